"""Only what a table names as its own is read, through the real handler: a manifest list,
manifest or data file outside the table's location and the paths its properties declare
is refused by default with an ``AccessDeniedError`` naming it (nothing of it read), and
read when the deployment allows its prefix (``S3SLICE_ICEBERG_ALLOWED_LOCATIONS``),
answering as pyiceberg's scan; a table writing its data under ``write.data.path`` is read
as it is; a manifest or a data file listed twice is read once; a map batch's item naming
a file that is no data file of its snapshot is a ``RequestError``, not "ok, 0 rows"."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import polars as pl
import pyarrow as pa
import pytest

from s3slice.entry import dispatch as _entry
from tests.integration.test_iceberg_nested import plain_file
from tests.integration.test_iceberg_tables import (
    BUCKET,
    Warehouse,
    arrow_of,
    conformance_frame,
    data_gets,
    fails,
    invoke,
    put,
    query,
    same,
    warehouse,  # noqa: F401 - the module's fixture
)
from tests.integration.test_iceberg_tables import pyiceberg_rows as oracle
from tests.support import S3Env

pytestmark = pytest.mark.integration

OTHER = "iceberg-elsewhere"
SETTING = "S3SLICE_ICEBERG_ALLOWED_LOCATIONS"
SQL = "SELECT * FROM s3object"


@pytest.fixture
def allow(monkeypatch: pytest.MonkeyPatch) -> Any:
    def set_(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv(SETTING, raising=False)
        else:
            monkeypatch.setenv(SETTING, value)
        _entry.reset()
    set_(None)
    yield set_
    monkeypatch.delenv(SETTING, raising=False)
    _entry.reset()


@pytest.fixture(scope="module")
def foreign(warehouse: Warehouse) -> tuple[Any, str]:  # noqa: F811
    """A table whose second file (added by ``add_files``) is in another bucket."""
    env = warehouse.env
    env.bucket(OTHER)
    data = arrow_of(conformance_frame().head(60))
    table = warehouse.catalog.create_table("db.foreign", schema=data.schema)
    table.append(data.slice(0, 30))
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(data.slice(30), buf)
    env.client.put_object(Bucket=OTHER, Key="foreign/part-0.parquet", Body=buf.getvalue())
    path = f"s3://{OTHER}/foreign/part-0.parquet"
    table.add_files([path])
    return warehouse.catalog.load_table("db.foreign"), path


def test_a_data_file_in_another_bucket_is_refused_by_default_and_read_when_allowed(
        s3: S3Env, foreign: tuple[Any, str], allow: Any) -> None:
    table, path = foreign
    want = oracle(table)
    assert want.height == 60  # pyiceberg reads it
    s3.log.clear()
    error = fails({"source": {"iceberg": table.metadata_location}, "sql": SQL})
    assert type(error).__name__ == "AccessDeniedError" and path in str(error), error
    assert "data file" in str(error) and SETTING in str(error)
    assert not data_gets(s3)  # refused before any data file was read
    allow(f"s3://{OTHER}/foreign/")
    got, _ = query(table, SQL)
    same(got, want, ordered=False)
    allow(f"s3://{OTHER}/foreig")  # a prefix is a folder, not a string's start
    assert type(fails({"source": {"iceberg": table.metadata_location}, "sql": SQL})
                ).__name__ == "AccessDeniedError"
    allow("*")
    got, _ = query(table, SQL)
    same(got, want, ordered=False)


def test_a_bad_setting_fails_as_configuration(s3: S3Env, foreign: tuple[Any, str],
                                              allow: Any) -> None:
    allow("other-bucket/x")
    error = fails({"source": {"iceberg": foreign[0].metadata_location}, "sql": SQL})
    assert type(error).__name__ == "ConfigurationError" and SETTING in str(error)


def test_a_table_writing_under_its_declared_data_path_is_read(
        s3: S3Env, warehouse: Warehouse, allow: Any) -> None:  # noqa: F811
    s3.bucket(OTHER)
    data = arrow_of(conformance_frame().head(40))
    table = warehouse.catalog.create_table(
        "db.data_path", schema=data.schema,
        properties={"write.data.path": f"s3://{OTHER}/data-path/db/t"})
    table.append(data)
    [path] = table.inspect.files()["file_path"].to_pylist()
    assert path.startswith(f"s3://{OTHER}/data-path/db/t/")
    got, _ = query(table, SQL)
    same(got, oracle(table), ordered=False)


def _avro(data: bytes) -> tuple[Any, dict[str, str], list[dict[str, Any]]]:
    reader = fastavro.reader(io.BytesIO(data))
    records = [r for r in reader if isinstance(r, dict)]
    return reader.writer_schema, dict(reader.metadata), records


def _write_avro(env: S3Env, uri: str, schema: Any, meta: dict[str, str],
                records: list[dict[str, Any]]) -> None:
    buf = io.BytesIO()
    meta = {k: v for k, v in meta.items() if not k.startswith("avro.")}
    fastavro.writer(buf, schema, records, metadata=meta)
    bucket, _, key = uri[5:].partition("/")
    env.client.put_object(Bucket=bucket, Key=key, Body=buf.getvalue())


def _with_manifests(env: S3Env, table: Any, name: str, change: Any) -> str:
    """A copy of ``table``'s metadata whose current manifest list is ``change``'s records
    of it (written where ``change`` says), at ``name``."""
    raw = json.loads(env.get(table.metadata_location))
    snapshot = next(s for s in raw["snapshots"]
                    if s["snapshot-id"] == raw["current-snapshot-id"])
    schema, meta, records = _avro(env.get(snapshot["manifest-list"]))
    where, records = change(records)
    _write_avro(env, where, schema, meta, records)
    snapshot["manifest-list"] = where
    return put(env, f"{name}/metadata/v1.metadata.json", json.dumps(raw).encode())


@pytest.fixture(scope="module")
def small(warehouse: Warehouse) -> Any:  # noqa: F811
    data = arrow_of(conformance_frame().head(50))
    table = warehouse.catalog.create_table("db.small", schema=data.schema)
    table.append(data.slice(0, 20))
    table.append(data.slice(20))
    return table


def test_a_manifest_list_or_manifest_outside_the_table_is_refused(
        s3: S3Env, small: Any, allow: Any) -> None:
    s3.bucket(OTHER)
    listed = f"s3://{OTHER}/lists/snap.avro"
    uri = _with_manifests(s3, small, "list-outside", lambda rs: (listed, rs))
    error = fails({"source": {"iceberg": uri}, "sql": SQL})
    assert type(error).__name__ == "AccessDeniedError" and listed in str(error), error
    assert "manifest list" in str(error)
    allow(f"s3://{OTHER}/lists")
    got, _ = query(uri, SQL)
    same(got, oracle(small), ordered=False)

    allow(None)
    moved = f"s3://{OTHER}/manifests/m.avro"
    first = small.location() + "/metadata/moved-list.avro"

    def move(records: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
        s3.client.put_object(Bucket=OTHER, Key="manifests/m.avro",
                             Body=s3.get(records[0]["manifest_path"]))
        return first, [{**records[0], "manifest_path": moved}, *records[1:]]
    uri = _with_manifests(s3, small, "manifest-outside", move)
    s3.log.clear()
    error = fails({"source": {"iceberg": uri}, "sql": SQL})
    assert type(error).__name__ == "AccessDeniedError" and moved in str(error), error
    assert not data_gets(s3)


def test_a_manifest_listed_twice_is_read_once(s3: S3Env, small: Any) -> None:
    where = small.location() + "/metadata/twice-list.avro"
    uri = _with_manifests(s3, small, "manifest-twice", lambda rs: (where, [*rs, *rs]))
    got, stats = query(uri, SQL)
    want = oracle(small)
    assert want.height == 50
    same(got, want, ordered=False)
    assert stats["iceberg"]["manifests"] == 2 and stats["iceberg"]["data_files"] == 2


def test_a_data_file_listed_twice_is_read_once(s3: S3Env, warehouse: Warehouse  # noqa: F811
                                               ) -> None:
    rows = pa.table({"id": pa.array(range(25), pa.int64()),
                     "v": pa.array([f"v{i}" for i in range(25)])})
    table = warehouse.catalog.create_table("db.twice", schema=rows.schema)
    path = plain_file(s3, "warehouse/db/twice/data/twice.parquet", rows)
    table.add_files([path])
    want = oracle(table)
    table.add_files([path], check_duplicate_files=False)  # now two manifests list it
    table = warehouse.catalog.load_table("db.twice")
    assert table.inspect.files()["file_path"].to_pylist() == [path, path]
    s3.log.clear()
    got, stats = query(table, "SELECT * FROM s3object")
    same(got, want, ordered=False)
    assert stats["objects"] == 1 and len(data_gets(s3)) == 1


def test_a_batch_item_naming_a_file_outside_its_snapshot_is_refused(
        s3: S3Env, small: Any) -> None:
    first, second = small.snapshots()[0].snapshot_id, small.metadata.current_snapshot_id
    files = small.inspect.files()["file_path"].to_pylist()
    older = set(small.inspect.files(snapshot_id=first)["file_path"].to_pylist())
    [newer] = set(files) - older
    sql = "SELECT COUNT(*) AS n FROM s3object"
    batch = {"BatchInput": {"query": {"sql": sql}, "output": "s3://iceberg-results/out/"}}

    def items(snapshot: int, *paths: str) -> list[dict[str, Any]]:
        return [{"iceberg": small.metadata_location, "snapshot_id": snapshot, "file": p,
                 "size": 1, "deletes": 0} for p in paths]
    s3.bucket("iceberg-results")
    s3.log.clear()
    for bad in (f"s3://{BUCKET}/elsewhere/x.parquet", newer):
        error = fails({**batch, "Items": items(first, *older, bad)})
        assert type(error).__name__ == "RequestError" and bad in str(error), error
        assert str(first) in str(error)
    assert not data_gets(s3)
    answer = invoke({**batch, "Items": items(second, newer)})
    assert answer["status"] == "ok"
    n = pl.read_parquet(s3.get(answer["outputs"][0]["uri"]))["n"].to_list()
    assert n == [30]


def test_a_batch_item_in_a_manifest_its_predicate_prunes_is_of_the_snapshot(
        s3: S3Env, warehouse: Warehouse) -> None:  # noqa: F811
    """A file of the snapshot whose manifest the batch's predicate rules out is no error:
    it holds no matching row (the plan looks in that manifest only to know it)."""
    from pyiceberg.transforms import IdentityTransform

    data = arrow_of(conformance_frame().head(60))
    table = warehouse.catalog.create_table("db.pruned_batch", schema=data.schema)
    with table.update_spec() as spec:
        spec.add_field("quoted col", IdentityTransform(), "q")
    q = data["quoted col"].to_pylist()
    for value in (0, 1):  # one manifest per partition value: their summaries are disjoint
        table.append(data.filter(pa.array([v == value for v in q])))
    files = table.inspect.files()
    [zero] = [p for p, part in zip(files["file_path"].to_pylist(),
                                   files["partition"].to_pylist(), strict=True)
              if part["q"] == 0]
    sql = "SELECT COUNT(*) AS n FROM s3object WHERE \"quoted col\" = 1"
    s3.bucket("iceberg-results")
    item = {"iceberg": table.metadata_location, "snapshot_id": table.metadata.current_snapshot_id,
            "file": zero, "size": 1, "deletes": 0}
    batch = {"BatchInput": {"query": {"sql": sql}, "output": "s3://iceberg-results/pruned/"}}
    answer = invoke({**batch, "Items": [item]})
    assert answer["status"] == "ok"
    assert pl.read_parquet(s3.get(answer["outputs"][0]["uri"]))["n"].to_list() == [0]
    error = fails({**batch, "Items": [{**item, "file": zero + ".other"}]})
    assert type(error).__name__ == "RequestError" and zero + ".other" in str(error)
