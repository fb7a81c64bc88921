"""Every form the spec (and Java's writer) gives a table's metadata, through the real
handler: gzip-compressed metadata files (``*.gz.metadata.json``, the older
``*.metadata.json.gz``, and found by their magic bytes whatever the name), and name
mappings in each form the spec allows (several names for a field, nested structs, lists
and maps, a field without id, a field with no names). Every answer equals pyiceberg's
scan of the same metadata; a corrupt or inflating-past-its-bound file is refused by
name."""

from __future__ import annotations

import gzip
import json
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

from tests.integration.test_iceberg_nested import plain_file
from tests.integration.test_iceberg_tables import (
    Warehouse,
    arrow_of,
    conformance_frame,
    fails,
    put,
    query,
    same,
    warehouse,  # noqa: F401 - the module's fixture
)
from tests.integration.test_iceberg_tables import pyiceberg_rows as oracle
from tests.support import S3Env

pytestmark = pytest.mark.integration
SQL = "SELECT * FROM s3object"


@pytest.fixture(scope="module")
def plain(warehouse: Warehouse) -> Any:  # noqa: F811
    data = arrow_of(conformance_frame().head(80))
    table = warehouse.catalog.create_table("db.gzipped", schema=data.schema)
    table.append(data.slice(0, 30))
    table.append(data.slice(30))
    return table


@pytest.mark.parametrize("name", ["00002-x.gz.metadata.json", "00002-x.metadata.json.gz",
                                  "00002-x.metadata.json"])
def test_gzip_compressed_metadata_is_read(s3: S3Env, warehouse: Warehouse,  # noqa: F811
                                          plain: Any, name: str) -> None:
    text = s3.get(plain.metadata_location)
    uri = put(s3, f"gzipped/{name.replace('.', '-')}/metadata/{name}", gzip.compress(text))
    # pyiceberg reads the first form by its name; the others are the same table's
    want = oracle(warehouse.static(uri) if name.endswith(".gz.metadata.json") else plain)
    assert want.height == 80
    for sql in (SQL, "SELECT qty, COUNT(*) AS n FROM s3object WHERE id > 20 GROUP BY qty"):
        got, stats = query(uri, sql)
        same(got, pl.SQLContext(s3object=want).execute(sql, eager=True), ordered=False)
        assert stats["iceberg"]["snapshot_id"] == plain.metadata.current_snapshot_id


def test_corrupt_or_bomb_gzip_metadata_is_refused_by_name(
        s3: S3Env, plain: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from s3slice.iceberg import metadata

    packed = gzip.compress(s3.get(plain.metadata_location))
    uri = put(s3, "gzipped/truncated/metadata/v1.gz.metadata.json", packed[: len(packed) // 2])
    error = fails({"source": {"iceberg": uri}, "sql": SQL})
    assert type(error).__name__ == "ObjectFormatError" and uri in str(error), error
    uri = put(s3, "gzipped/garbage/metadata/v1.gz.metadata.json", b"\x1f\x8b" + b"x" * 40)
    error = fails({"source": {"iceberg": uri}, "sql": SQL})
    assert type(error).__name__ == "ObjectFormatError" and uri in str(error), error
    monkeypatch.setattr(metadata, "MAX_METADATA_BYTES", 1000)
    uri = put(s3, "gzipped/bomb/metadata/v1.gz.metadata.json", packed)
    error = fails({"source": {"iceberg": uri}, "sql": SQL})
    assert type(error).__name__ == "ObjectFormatError" and "1000 bytes" in str(error)
    assert uri in str(error)


# -- name mappings in every form the spec allows ------------------------------------

LOC = pa.struct([("lat", pa.float64()), ("lon", pa.float64())])
ITEM = pa.struct([("x", pa.int32()), ("y", pa.string())])
VALUE = pa.struct([("v", pa.int64())])


def canonical(n: int) -> pa.Table:
    ids = list(range(n))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "loc": pa.array([None if i % 7 == 0 else {"lat": i * 0.5, "lon": -i * 0.25}
                         for i in ids], LOC),
        "items": pa.array([[{"x": i + j, "y": f"y{j}"} for j in range(i % 3)] for i in ids],
                          pa.list_(ITEM)),
        "attrs": pa.array([[(f"k{j}", {"v": i * j}) for j in range(i % 2 + 1)] for i in ids],
                          pa.map_(pa.string(), VALUE)),
        "a.b": pa.array([f"dot{i}" for i in ids]),
    })


def as_other_writer(rows: pa.Table, *, junk: bool) -> pa.Table:
    """The same rows as another writer named them (every name one the mapping lists)."""
    def renamed(column: str, t: pa.DataType) -> pa.Array:  # by position, not by name
        return rows[column].combine_chunks().view(t)
    renamed = pa.table({
        "record_id": rows["id"],
        "loc": renamed("loc", pa.struct([("latitude", pa.float64()), ("long", pa.float64())])),
        "items": renamed("items", pa.list_(pa.struct([("x", pa.int32()),
                                                      ("why", pa.string())]))),
        "attrs": renamed("attrs", pa.map_(pa.string(), pa.struct([("val", pa.int64())]))),
        "a.b": rows["a.b"],
    })
    return renamed.append_column("junk", pa.array(["j"] * rows.num_rows)) if junk else renamed


def _mapping(table: Any, *, junk: bool) -> list[dict[str, Any]]:
    schema = table.schema()

    def fid(*path: str) -> int:
        return int(schema.find_field(".".join(path)).field_id)
    items, attrs = schema.find_type("items"), schema.find_type("attrs")
    mapping: list[dict[str, Any]] = [
        {"field-id": fid("id"), "names": ["id", "record_id"]},
        {"field-id": fid("loc"), "names": ["loc"], "fields": [
            {"field-id": fid("loc", "lat"), "names": ["lat", "latitude"]},
            {"field-id": fid("loc", "lon"), "names": ["lon", "long"]}]},
        {"field-id": fid("items"), "names": ["items"], "fields": [
            {"field-id": items.element_id, "names": ["element"], "fields": [
                {"field-id": fid("items", "element", "x"), "names": ["x"], "fields": None},
                {"field-id": fid("items", "element", "y"), "names": ["y", "why"]}]}]},
        {"field-id": fid("attrs"), "names": ["attrs"], "fields": [
            {"field-id": attrs.key_id, "names": ["key"]},
            {"field-id": attrs.value_id, "names": ["value"], "fields": [
                {"field-id": fid("attrs", "value", "v"), "names": ["v", "val"]}]}]},
        {"field-id": next(f.field_id for f in schema.fields if f.name == "a.b"),
         "names": ["a.b"]},  # a dot is part of a name, never a path
        {"field-id": fid("later"), "names": []},  # only in the table, never in a file
    ]
    if junk:
        mapping.append({"names": ["junk"]})  # in the file only: no field id
    return mapping


def mapped_table(warehouse: Warehouse, name: str, *, junk: bool) -> Any:  # noqa: F811
    from pyiceberg.types import StringType

    rows = canonical(40)
    table = warehouse.catalog.create_table(f"db.{name}", schema=rows.schema)
    key = f"warehouse/db/{name}/data/imported.parquet"
    path = plain_file(warehouse.env, key, rows)
    table.add_files([path])
    plain_file(warehouse.env, key, as_other_writer(rows, junk=junk))  # as written elsewhere
    with table.update_schema() as schema:
        schema.add_column("later", StringType())
    table = warehouse.catalog.load_table(f"db.{name}")
    with table.transaction() as tx:
        tx.set_properties(**{"schema.name-mapping.default":
                             json.dumps(_mapping(table, junk=junk))})
    return warehouse.catalog.load_table(f"db.{name}")


@pytest.mark.parametrize("sql", [
    SQL,
    "SELECT s.id, s.loc.lat, s.items[1].y, s.\"a.b\" FROM S3Object s WHERE s.loc.lon < -3",
])
def test_every_form_of_name_mapping_equals_pyiceberg(
        s3: S3Env, warehouse: Warehouse, sql: str) -> None:  # noqa: F811
    table = mapped_table(warehouse, f"mapped_{abs(hash(sql)) % 10_000}", junk=False)
    base = oracle(table)
    # every column read through the mapping's other names (none all null)
    assert base.height == 40 and base["later"].null_count() == 40
    assert base["id"].null_count() == 0 and base["loc"].struct.field("lon").null_count() < 40
    assert base["attrs"].null_count() == 0 and base["a.b"].null_count() == 0
    got, _ = query(table, sql)
    if sql == SQL:
        want = base
    else:
        want = base.filter(pl.col("loc").struct.field("lon") < -3).select(
            "id", pl.col("loc").struct.field("lat"),
            pl.col("items").list.get(1, null_on_oob=True).struct.field("y"),
            "a.b")
    assert want.height > 0
    same(got, want, ordered=False)


def test_a_file_column_mapped_without_a_field_id_is_not_read(
        s3: S3Env, warehouse: Warehouse) -> None:  # noqa: F811
    """pyiceberg refuses such a file; the spec maps the column to no field: the answer is
    the same file's without it."""
    table = mapped_table(warehouse, "mapped_junk", junk=True)
    without = mapped_table(warehouse, "mapped_clean", junk=False)
    got, _ = query(table, SQL)
    same(got, oracle(without), ordered=False)
    assert "junk" not in got.columns
