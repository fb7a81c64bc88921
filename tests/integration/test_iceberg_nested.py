"""Schema evolution inside nested columns, and data files without field ids, through the
real handler: pyiceberg writes tables with struct, list and map columns, then renames,
adds, drops and promotes their nested fields (``int`` to ``long``, ``float`` to
``double``, a wider decimal); files added with ``add_files`` (no field ids in their
Parquet schema) are read through the table's name mapping, and a partition column such
a file leaves out is its identity partition value. Every answer equals pyiceberg's scan
of the same snapshot; a file with neither ids nor a name mapping is refused by name, as
pyiceberg refuses it."""

from __future__ import annotations

import dataclasses
import decimal
import io
import json
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.integration.test_iceberg_tables import (
    BUCKET,
    Warehouse,
    fails,
    put,
    query,
    same,
    warehouse,  # noqa: F401 - the module's fixture
)
from tests.integration.test_iceberg_tables import pyiceberg_rows as oracle
from tests.support import S3Env, invoke

pytestmark = pytest.mark.integration
c = pl.col


@pytest.fixture(autouse=True)
def migrated_locations(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Files added by ``add_files`` stay where the migration found them, outside the
    table's location: a deployment reading such tables allows their prefixes."""
    from s3slice.entry import dispatch

    monkeypatch.setenv("S3SLICE_ICEBERG_ALLOWED_LOCATIONS",
                       f"s3://{BUCKET}/imports/, s3://{BUCKET}/hive/")
    dispatch.reset()
    yield
    monkeypatch.delenv("S3SLICE_ICEBERG_ALLOWED_LOCATIONS")
    dispatch.reset()

S_OLD = pa.struct([("a", pa.int32()), ("b", pa.string()), ("c", pa.float32()),
                   ("dec", pa.decimal128(9, 2))])
ITEM_OLD = pa.struct([("x", pa.int32()), ("y", pa.string())])


def old_batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "s": pa.array([None if i % 13 == 0 else {
            "a": None if i % 7 == 0 else i, "b": f"b{i % 5}", "c": i * 0.25,
            "dec": decimal.Decimal(i) / 100} for i in ids], S_OLD),
        "l": pa.array([None if i % 11 == 0 else [i, None, -i][: i % 4] for i in ids],
                      pa.list_(pa.int32())),
        # (a float that a float32 holds inexactly: widened to double as the file held it)
        "m": pa.array([None if i % 9 == 0 else [(f"k{j}", None if j == 1 else i + j * 0.1)
                                                for j in range(i % 3)] for i in ids],
                      pa.map_(pa.string(), pa.float32())),
        "ls": pa.array([[{"x": i + j, "y": f"y{j}"} for j in range(i % 3)] for i in ids],
                       pa.list_(ITEM_OLD)),
    })


def new_batch(table: Any, start: int, n: int) -> pa.Table:
    """Rows in the evolved schema (pyiceberg's own Arrow schema of it)."""
    ids = list(range(start, start + n))
    rows = [{
        "id": i,
        "s": None if i % 13 == 0 else {
            "a": 5_000_000_000 + i, "bee": f"b{i % 5}", "dec": decimal.Decimal(i) / 100,
            "new": None if i % 3 == 0 else f"n{i}", "inner": {"q": i % 4}},
        "l": [i * 1_000_000_000, None][: i % 3],
        "m": [(f"k{j}", i + j * 0.5) for j in range(i % 3)],
        "ls": [{"xx": i + j, "y": f"y{j}", "z": j % 2 == 0} for j in range(i % 3)],
        "added": None if i % 4 == 0 else {"p": i, "r": [f"r{i}"]},
    } for i in ids]
    return pa.Table.from_pylist(rows, schema=table.schema().as_arrow())


@dataclasses.dataclass
class Nested:
    table: Any
    snapshots: list[int]


@pytest.fixture(scope="module")
def nested(warehouse: Warehouse) -> Nested:  # noqa: F811
    from pyiceberg.types import (
        BooleanType,
        DecimalType,
        DoubleType,
        IntegerType,
        ListType,
        LongType,
        NestedField,
        StringType,
        StructType,
    )

    first = old_batch(0, 120)
    table = warehouse.catalog.create_table("db.nested", schema=first.schema)
    table.append(first)
    with table.update_schema() as schema:
        schema.rename_column(("s", "b"), "bee")
        schema.delete_column(("s", "c"))
        schema.update_column(("s", "a"), field_type=LongType())
        schema.update_column(("s", "dec"), field_type=DecimalType(12, 2))
        schema.add_column(("s", "new"), StringType())
        schema.add_column(("s", "inner"), StructType(
            NestedField(1001, "q", IntegerType(), required=False)))
        schema.update_column(("l", "element"), field_type=LongType())
        schema.update_column(("m", "value"), field_type=DoubleType())
        schema.rename_column(("ls", "element", "x"), "xx")
        schema.add_column(("ls", "element", "z"), BooleanType())
        schema.add_column("added", StructType(
            NestedField(1002, "p", LongType(), required=False),
            NestedField(1003, "r", ListType(1004, StringType(), element_required=False),
                        required=False)))
    table.append(new_batch(table, 120, 90))
    table = warehouse.catalog.load_table("db.nested")
    return Nested(table, [s.snapshot_id for s in table.snapshots()])


def same_rows(table: Any, sql: str, want: pl.DataFrame, **source: Any) -> None:
    """The handler's inline rows equal ``want``'s, row for row in any order (a decimal as
    its text, as the rows show it)."""
    response = invoke({"source": {"iceberg": table.metadata_location, **source}, "sql": sql,
                       "return_rows": True})
    assert response["status"] == "ok", response
    got = [json.dumps(r, sort_keys=True) for r in response["rows"]]
    expected = [json.dumps(r, sort_keys=True, default=str) for r in want.to_dicts()]
    assert list(response["rows"][0]) == want.columns if got else not expected
    assert sorted(got) == sorted(expected)


def test_nested_evolution_select_star_equals_pyiceberg(s3: S3Env, nested: Nested) -> None:
    want = oracle(nested.table)
    assert want.height == 210
    # the old files' values, by id: renamed, promoted, and the fields added later null
    old = want.filter(c("id") < 120, c("s").is_not_null())
    assert old["s"].struct.field("bee").null_count() == 0
    assert old["s"].struct.field("new").null_count() == old.height
    assert old["added"].null_count() == old.height
    same_rows(nested.table, "SELECT * FROM s3object", want)


def test_nested_evolution_equals_polars_scan_iceberg(s3: S3Env, nested: Nested) -> None:
    """polars' own Iceberg reader (native) as a second oracle."""
    theirs = pl.scan_iceberg(nested.table, reader_override="native").collect()
    same_rows(nested.table, "SELECT * FROM s3object", theirs)


def test_the_first_snapshot_reads_its_own_schema(s3: S3Env, nested: Nested) -> None:
    first = nested.snapshots[0]
    same_rows(nested.table, "SELECT * FROM s3object",
              oracle(nested.table, snapshot_id=first), snapshot_id=first)


PATHS: list[tuple[str, Any]] = [
    ("SELECT s.id, s.s.bee, s.s.a FROM S3Object s WHERE s.s.a > 100",
     lambda f: f.filter(c("s").struct.field("a") > 100).select(
         "id", c("s").struct.field("bee"), c("s").struct.field("a"))),
    ("SELECT s.id, s.s.new, s.s.inner.q FROM S3Object s WHERE s.s.new IS NOT NULL",
     lambda f: f.filter(c("s").struct.field("new").is_not_null()).select(
         "id", c("s").struct.field("new"), c("s").struct.field("inner").struct.field("q"))),
    ("SELECT s.id, s.l[0], s.ls[0].xx, s.ls[1].z FROM S3Object s",
     lambda f: f.select("id", c("l").list.get(0, null_on_oob=True).alias("_2"),
                        c("ls").list.get(0, null_on_oob=True).struct.field("xx"),
                        c("ls").list.get(1, null_on_oob=True).struct.field("z"))),
    ("SELECT SUM(s.s.a) AS a, SUM(s.s.dec) AS d, COUNT(s.added.p) AS p FROM S3Object s",
     lambda f: f.select(c("s").struct.field("a").sum().alias("a"),
                        c("s").struct.field("dec").sum().alias("d"),
                        c("added").struct.field("p").count().alias("p"))),
]


@pytest.mark.parametrize(("sql", "expected"), PATHS, ids=range(len(PATHS)))
def test_nested_fields_by_path_equal_pyiceberg(s3: S3Env, nested: Nested, sql: str,
                                               expected: Any) -> None:
    got, _ = query(nested.table, sql)
    want = expected(oracle(nested.table))
    same(got, want, ordered=False)


def test_a_promoted_map_value_and_list_element_keep_old_values(s3: S3Env, nested: Nested
                                                               ) -> None:
    want = oracle(nested.table).filter(c("id") < 120).select("id", "l", "m")
    assert want["m"].dtype == pl.Map(pl.String, pl.Float64)
    assert want["l"].dtype == pl.List(pl.Int64)
    same_rows(nested.table, "SELECT id, l, m FROM s3object WHERE id < 120", want)


# -- data files without field ids: the table's name mapping ---------------------------

def plain_file(env: S3Env, key: str, frame: pa.Table) -> str:
    """A Parquet file as another engine writes it: no field ids."""
    buf = io.BytesIO()
    pq.write_table(frame, buf)
    assert b"field_id" not in pq.read_schema(io.BytesIO(buf.getvalue())).to_string().encode()
    return put(env, key, buf.getvalue())


def migrated_rows(start: int, n: int, *, name: str = "name") -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        name: pa.array([None if i % 6 == 0 else f"n{i}" for i in ids], pa.string()),
        "s": pa.array([{"a": i % 10, "b": f"b{i}"} for i in ids],
                      pa.struct([("a", pa.int32()), ("b", pa.string())])),
        "l": pa.array([[i, i + 1][: i % 3] for i in ids], pa.list_(pa.int64())),
    })


@pytest.fixture(scope="module")
def migrated(warehouse: Warehouse) -> Any:  # noqa: F811
    """A table migrated by ``add_files`` (files without field ids: pyiceberg sets the name
    mapping): the first file names a column ``full_name``; the column is renamed
    ``name`` (the mapping keeps both names) and the second file names it so; then it is
    renamed ``label``, a nested field too, and a file with ids is appended."""
    env = warehouse.env
    first_rows = migrated_rows(0, 80, name="full_name")
    table = warehouse.catalog.create_table("db.migrated", schema=first_rows.schema)
    table.add_files([plain_file(env, "imports/part-0.parquet", first_rows)])
    with table.update_schema() as schema:
        schema.rename_column("full_name", "name")
    table.add_files([plain_file(env, "imports/part-1.parquet", migrated_rows(80, 40))])
    with table.update_schema() as schema:
        schema.rename_column("name", "label")
        schema.rename_column(("s", "b"), "bee")
    table.append(pa.Table.from_pylist(
        [{"id": i, "label": f"n{i}", "s": {"a": i % 10, "bee": f"b{i}"}, "l": [i]}
         for i in range(120, 150)], schema=table.schema().as_arrow()))
    return warehouse.catalog.load_table("db.migrated")


@pytest.mark.parametrize("sql", [
    "SELECT * FROM s3object",
    "SELECT id, label FROM s3object WHERE label LIKE 'n1%'",
    "SELECT s.id, s.s.bee, s.l[1] FROM S3Object s WHERE s.s.a = 3",
])
def test_files_without_ids_read_through_the_name_mapping_equal_pyiceberg(
        s3: S3Env, migrated: Any, sql: str) -> None:
    got, _ = query(migrated, sql)
    base = oracle(migrated)
    # both names of the column mapped (the first file's ``full_name``, the second's ``name``)
    assert base.height == 150 and sorted(base.filter(c("label").is_null())["id"]) == [
        i for i in range(120) if i % 6 == 0]
    assert [f["names"] for f in json.loads(migrated.metadata.properties[
        "schema.name-mapping.default"]) if f["field-id"] == 2] == [["full_name", "name", "label"]]
    if sql.startswith("SELECT s."):
        want = base.filter(c("s").struct.field("a") == 3).select(
            "id", c("s").struct.field("bee"), c("l").list.get(1, null_on_oob=True).alias("_3"))
    else:
        want = pl.SQLContext(s3object=base).execute(sql, eager=True)
    same(got, want, ordered=False)


def test_without_ids_or_a_name_mapping_a_file_is_refused_by_name(
        s3: S3Env, warehouse: Warehouse) -> None:  # noqa: F811
    table = warehouse.catalog.create_table("db.unmapped", schema=migrated_rows(0, 1).schema)
    path = plain_file(s3, "imports/unmapped.parquet", migrated_rows(0, 20))
    table.add_files([path])
    with table.transaction() as tx:
        tx.remove_properties("schema.name-mapping.default")
    table = warehouse.catalog.load_table("db.unmapped")
    assert table.metadata.name_mapping() is None
    with pytest.raises(ValueError, match="field-ids"):  # pyiceberg refuses it too
        table.scan().to_arrow()
    error = fails({"source": {"iceberg": table.metadata_location},
                   "sql": "SELECT COUNT(*) AS n FROM s3object"})
    assert type(error).__name__ == "ObjectFormatError" and path in str(error), error
    assert "name mapping" in str(error)


def test_a_file_column_the_mapping_does_not_name_is_no_column_of_the_table(
        s3: S3Env, warehouse: Warehouse) -> None:  # noqa: F811
    """The spec's rule (pyiceberg refuses such a file instead): a column of the file the
    name mapping does not name is not read, so the table's column is null in that file."""
    table = warehouse.catalog.create_table("db.partly", schema=migrated_rows(0, 1).schema)
    rows = migrated_rows(0, 30)
    table.add_files([plain_file(s3, "imports/partly.parquet", rows)])
    mapping = [f for f in json.loads(table.metadata.properties["schema.name-mapping.default"])
               if f["names"] != ["name"]]
    with table.transaction() as tx:
        tx.set_properties(**{"schema.name-mapping.default": json.dumps(mapping)})
    table = warehouse.catalog.load_table("db.partly")
    got, _ = query(table, "SELECT * FROM s3object")
    plain = pl.from_arrow(rows)
    assert isinstance(plain, pl.DataFrame)
    want = plain.with_columns(pl.lit(None, pl.String).alias("name"))
    assert want["name"].null_count() == 30 and plain["name"].null_count() < 30
    same(got, want, ordered=False)


def test_a_malformed_name_mapping_is_refused_by_name(s3: S3Env, migrated: Any) -> None:
    raw = json.loads(s3.get(migrated.metadata_location))
    raw["properties"]["schema.name-mapping.default"] = "[{\"names\": 7}]"
    uri = put(s3, "malformed-mapping/metadata/v1.metadata.json", json.dumps(raw).encode())
    error = fails({"source": {"iceberg": uri}, "sql": "SELECT * FROM s3object"})
    assert type(error).__name__ == "ObjectFormatError" and uri in str(error)
    assert "name mapping" in str(error)


def test_a_partition_column_the_file_leaves_out_is_its_identity_partition_value(
        s3: S3Env, warehouse: Warehouse) -> None:  # noqa: F811
    """The spec's first rule of column projection (a migrated Hive table's files hold no
    partition columns): the value comes from the manifest's identity partition value,
    as pyiceberg's scan has it."""
    import datetime as dt

    from pyiceberg.transforms import IdentityTransform

    def rows(region: str, day: dt.date, start: int) -> pa.Table:
        ids = list(range(start, start + 25))
        return pa.table({"id": pa.array(ids, pa.int64()),
                         "region": pa.array([region] * 25, pa.string()),
                         "day": pa.array([day] * 25, pa.date32()),
                         "v": pa.array([i * 0.5 for i in ids], pa.float64())})

    parts = [("eu", dt.date(2024, 5, 1)), ("us", dt.date(2024, 5, 2))]
    table = warehouse.catalog.create_table("db.hive", schema=rows("eu", parts[0][1], 0).schema)
    with table.update_spec() as spec:
        spec.add_field("region", IdentityTransform(), "region")
        spec.add_field("day", IdentityTransform(), "day")
    paths = [plain_file(s3, f"hive/region={r}/day={d}/part.parquet", rows(r, d, 100 * k))
             for k, (r, d) in enumerate(parts)]
    table.add_files(paths)  # the partition values from each file's column bounds
    # then as Hive wrote them: no partition columns (pyiceberg's add_files infers no
    # partition value from such a file; the manifest keeps the first files' sizes, which
    # neither reader relies on)
    for k, path in enumerate(paths):
        plain_file(s3, path.partition(f"{BUCKET}/")[2],
                   rows(*parts[k], 100 * k).drop_columns(["region", "day"]))
    table = warehouse.catalog.load_table("db.hive")
    base = oracle(table)
    assert base["region"].null_count() == 0 and sorted(set(base["region"])) == ["eu", "us"]
    for sql in ("SELECT * FROM s3object",
                "SELECT id, day FROM s3object WHERE region = 'us' AND v > 60",
                "SELECT region, day, COUNT(*) AS n, SUM(v) AS s FROM s3object "
                "GROUP BY region, day"):
        got, _ = query(table, sql)
        same(got, pl.SQLContext(s3object=base).execute(sql, eager=True), ordered=False)


def test_equality_deletes_by_a_nested_field_are_refused_by_name(
        s3: S3Env, warehouse: Warehouse) -> None:  # noqa: F811
    """The spec lets an equality delete name a field inside a struct; this reader matches
    top-level columns only, so such a delete file is refused by name, never half-applied."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    from tests.integration.test_iceberg_deletes import _commit

    table = warehouse.catalog.create_table("db.nested_eq", schema=old_batch(0, 1).schema)
    table.append(old_batch(0, 30))
    a_id = table.schema().find_field("s.a").field_id
    body = io.BytesIO()
    pq.write_table(pa.table([pa.array([3], pa.int32())], schema=pa.schema([pa.field(
        "a", pa.int32(), metadata={b"PARQUET:field_id": str(a_id).encode()})])), body)
    path = f"{table.metadata.location}/data/eq-nested.parquet"
    put(s3, path.partition(f"{BUCKET}/")[2], body.getvalue())
    entry = DataFile.from_args(content=DataFileContent.EQUALITY_DELETES, file_path=path,
                               file_format=FileFormat.PARQUET, partition=Record(),
                               record_count=1, file_size_in_bytes=len(body.getvalue()),
                               spec_id=0, equality_ids=[a_id])
    uri = _commit(s3, table, [entry], "eq-nested")
    error = fails({"source": {"iceberg": uri}, "sql": "SELECT COUNT(*) AS n FROM s3object"})
    assert type(error).__name__ == "ObjectFormatError" and path in str(error), error
    assert "nested" in str(error)
