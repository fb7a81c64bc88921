"""Iceberg tables as a source, through the real handler on the local S3 server: tables
written by pyiceberg (a SQL catalog on SQLite, its warehouse in the S3 server), answered
exactly as pyiceberg's own scan of the same snapshot answers, with the SQL conformance
suite's queries; pruning by partitions and column bounds proven by the requests the S3
server saw."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from typing import Any

import polars as pl
import pytest

from s3slice.cli.local_s3 import LOCAL_CREDENTIALS
from tests.functional.test_sql_conformance import CASES, Oracle
from tests.integration.iceberg_warehouse import (  # noqa: F401 - imported from here
    BUCKET,
    N,
    Warehouse,
    arrow_of,
    conformance_frame,
    data_gets,
    fails,
    put,
    pyiceberg_rows,
    query,
    same,
)
from tests.support import S3Env, invoke  # noqa: F401 - as above

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def warehouse(s3_server: S3Env, tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    from pyiceberg.catalog.sql import SqlCatalog

    s3_server.bucket(BUCKET)
    props = {"s3.endpoint": s3_server.endpoint_url,
             "s3.access-key-id": LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
             "s3.secret-access-key": LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
             "s3.region": LOCAL_CREDENTIALS["AWS_REGION"]}
    db = tmp_path_factory.mktemp("catalog") / "catalog.db"
    catalog = SqlCatalog("tests", uri=f"sqlite:///{db}", warehouse=f"s3://{BUCKET}/warehouse",
                         **props)
    catalog.create_namespace_if_not_exists("db")
    return Warehouse(s3_server, catalog, props)


@pytest.fixture(scope="module")
def conformance(warehouse: Warehouse) -> Any:
    """The conformance table, unpartitioned, written once: one data file."""
    data = arrow_of(conformance_frame())
    table = warehouse.catalog.create_table("db.conformance", schema=data.schema)
    table.append(data)
    return table


@pytest.fixture(scope="module")
def partitioned(warehouse: Warehouse) -> Any:
    """The conformance table with hidden partitioning: identity("quoted col"), month(ts)
    and bucket[2](id)."""
    from pyiceberg.transforms import BucketTransform, IdentityTransform, MonthTransform

    data = arrow_of(conformance_frame())
    table = warehouse.catalog.create_table("db.partitioned", schema=data.schema)
    with table.update_spec() as spec:
        spec.add_field("quoted col", IdentityTransform(), "q")
        spec.add_field("ts", MonthTransform(), "ts_month")
        spec.add_field("id", BucketTransform(2), "id_bucket")
    table.append(data)
    return table


@pytest.fixture(scope="module")
def partitioned_rows(partitioned: Any) -> pl.DataFrame:
    return pyiceberg_rows(partitioned)


APPLICABLE = CASES


@pytest.mark.parametrize(("name", "sql", "expected"), APPLICABLE, ids=[c[0] for c in APPLICABLE])
def test_conformance_query_equals_pyiceberg_scan(s3: S3Env, conformance: Any, name: str,
                                                 sql: str, expected: Oracle) -> None:
    got, stats = query(conformance, sql)
    want = expected(pyiceberg_rows(conformance))
    same(got, want, ordered="ORDER BY" in sql or "LIMIT" in sql)
    assert stats["iceberg"]["data_files"] == 1


UNORDERED = [c for c in APPLICABLE if "LIMIT" not in c[1]]


@pytest.mark.parametrize(("name", "sql", "expected"), UNORDERED, ids=[c[0] for c in UNORDERED])
def test_conformance_query_on_hidden_partitions(s3: S3Env, partitioned: Any,
                                               partitioned_rows: pl.DataFrame, name: str,
                                               sql: str, expected: Oracle) -> None:
    got, _ = query(partitioned, sql)
    want = expected(partitioned_rows)
    same(got, want, ordered="ORDER BY" in sql)


def test_a_limit_without_order_on_many_files_is_some_of_the_matching_rows(
        s3: S3Env, partitioned: Any, partitioned_rows: pl.DataFrame) -> None:
    got, _ = query(partitioned, "SELECT id FROM s3object WHERE id > 100 LIMIT 7")
    matching = set(partitioned_rows.filter(pl.col("id") > 100)["id"].to_list())
    assert got.height == 7 and set(got["id"].to_list()) <= matching


def test_a_partition_the_predicate_rules_out_opens_none_of_its_files(
        s3: S3Env, partitioned: Any, partitioned_rows: pl.DataFrame) -> None:
    sql = "SELECT id, ts FROM s3object WHERE ts >= TIMESTAMP '2024-03-01 00:00:00' " \
          "AND ts < TIMESTAMP '2024-03-03 00:00:00' AND \"quoted col\" = 1"
    got, stats = query(partitioned, sql)
    opened = data_gets(s3)
    want = partitioned_rows.filter((pl.col("ts") >= dt.datetime(2024, 3, 1))
                        & (pl.col("ts") < dt.datetime(2024, 3, 3))
                        & (pl.col("quoted col") == 1)).select("id", "ts")
    same(got, want, ordered=False)
    assert want.height > 0
    files = partitioned.inspect.files()
    matching = [p for p, part in zip(files["file_path"].to_pylist(),
                                     files["partition"].to_pylist(), strict=True)
                if part["q"] == 1 and part["ts_month"] == (2024 - 1970) * 12 + 2]
    # Every file opened is of the one partition the predicate allows (its column bounds
    # may rule out some of those too); none of the others is opened.
    names = {p.rpartition("/")[2] for p in matching}
    assert opened and {p.rpartition("/")[2] for p in opened} <= names
    table = stats["iceberg"]
    assert table["files_pruned_by_partition"] == len(files) - len(matching)
    assert stats["objects"] == len(opened) == len(matching) - table["files_pruned_by_bounds"]


def test_a_column_bound_prunes_files_the_partitions_keep(s3: S3Env, partitioned: Any) -> None:
    # id is bucketed: a range of ids is ruled out by each file's bounds, not its partition.
    got, stats = query(partitioned, "SELECT id FROM s3object WHERE id BETWEEN 10 AND 12")
    assert sorted(got["id"].to_list()) == [10, 11, 12]
    opened = data_gets(s3)
    table = stats["iceberg"]
    assert table["files_pruned_by_bounds"] > 0
    files = partitioned.inspect.files()
    assert len(opened) == len(files) - table["files_pruned_by_bounds"] - table[
        "files_pruned_by_partition"] == stats["objects"]
    assert table["bytes_pruned"] > 0


def test_missing_metadata_file_is_typed_and_named(s3: S3Env, warehouse: Warehouse) -> None:
    uri = f"s3://{BUCKET}/warehouse/db/none/metadata/v9.metadata.json"
    error = fails({"source": {"iceberg": uri}, "sql": "SELECT * FROM s3object"})
    assert type(error).__name__ == "ObjectNotFoundError" and uri in str(error)


def test_corrupt_metadata_and_v3_are_refused_by_name(s3: S3Env, conformance: Any) -> None:
    uri = put(s3, "bad/metadata/v1.metadata.json", b"{not json")
    error = fails({"source": {"iceberg": uri}, "sql": "SELECT * FROM s3object"})
    assert type(error).__name__ == "ObjectFormatError" and uri in str(error)
    raw = json.loads(s3.get(conformance.metadata_location))
    raw["format-version"] = 3
    uri = put(s3, "v3/metadata/v1.metadata.json", json.dumps(raw).encode())
    error = fails({"source": {"iceberg": uri}, "sql": "SELECT * FROM s3object"})
    assert type(error).__name__ == "ObjectFormatError", error
    assert "format version 3" in str(error) and uri in str(error)
    assert not data_gets(s3)


def _copy_table(env: S3Env, metadata: str, damage: str) -> tuple[str, str]:
    """A copy of a table's metadata whose manifest list (``damage="list"``), first manifest
    or first data file is missing; the URI of the new metadata and of the missing file."""
    raw = json.loads(env.get(metadata))
    snapshot = next(s for s in raw["snapshots"] if s["snapshot-id"] == raw["current-snapshot-id"])
    if damage == "list":
        missing = snapshot["manifest-list"] + ".missing"
        snapshot["manifest-list"] = missing
    else:
        import io

        import fastavro

        listing = list(fastavro.reader(io.BytesIO(env.get(snapshot["manifest-list"]))))
        manifest = listing[0]["manifest_path"]
        if damage == "manifest":
            missing = manifest
            env.client.delete_object(Bucket=BUCKET, Key=manifest.partition(f"{BUCKET}/")[2])
        else:
            entries = list(fastavro.reader(io.BytesIO(env.get(manifest))))
            missing = entries[0]["data_file"]["file_path"]
            env.client.delete_object(Bucket=BUCKET, Key=missing.partition(f"{BUCKET}/")[2])
    uri = put(env, f"damaged-{damage}/metadata/v1.metadata.json", json.dumps(raw).encode())
    return uri, missing


@pytest.mark.parametrize("damage", ["list", "manifest", "data"])
def test_a_missing_manifest_list_manifest_or_data_file_is_named(
        s3: S3Env, warehouse: Warehouse, damage: str) -> None:
    data = arrow_of(conformance_frame().head(50))
    table = warehouse.catalog.create_table(f"db.damaged_{damage}", schema=data.schema)
    table.append(data)
    uri, missing = _copy_table(s3, table.metadata_location, damage)
    error = fails({"source": {"iceberg": uri}, "sql": "SELECT * FROM s3object"})
    assert type(error).__name__ == "ObjectNotFoundError" and missing in str(error)


@pytest.mark.parametrize("damage", ["manifest", "data"])
def test_a_corrupt_manifest_or_data_file_is_named(s3: S3Env, warehouse: Warehouse,
                                                  damage: str) -> None:
    import io

    import fastavro

    data = arrow_of(conformance_frame().head(50))
    table = warehouse.catalog.create_table(f"db.corrupt_{damage}", schema=data.schema)
    table.append(data)
    snapshot = table.metadata.current_snapshot()
    manifest = next(iter(fastavro.reader(io.BytesIO(s3.get(snapshot.manifest_list)))))
    path = manifest["manifest_path"]  # type: ignore[index, call-overload]
    if damage == "data":
        entry = next(iter(fastavro.reader(io.BytesIO(s3.get(path)))))
        path = entry["data_file"]["file_path"]  # type: ignore[index, call-overload]
    put(s3, path.partition(f"{BUCKET}/")[2], b"PAR1 this is not what it claims to be")
    error = fails({"source": {"iceberg": table.metadata_location},
                   "sql": "SELECT COUNT(*) AS n FROM s3object"})
    assert type(error).__name__ == "ObjectFormatError" and path in str(error), error


def test_a_glue_table_is_read_through_its_metadata_location(
        s3: S3Env, conformance: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3

    monkeypatch.setenv("AWS_ENDPOINT_URL_GLUE", s3.endpoint_url)
    glue = boto3.client("glue", endpoint_url=s3.endpoint_url,
                        region_name=LOCAL_CREDENTIALS["AWS_REGION"])
    with contextlib.suppress(glue.exceptions.AlreadyExistsException):
        glue.create_database(DatabaseInput={"Name": "gluedb"})
    glue.create_table(DatabaseName="gluedb", TableInput={
        "Name": "conformance", "TableType": "EXTERNAL_TABLE",
        "Parameters": {"table_type": "ICEBERG",
                       "metadata_location": conformance.metadata_location}})
    glue.create_table(DatabaseName="gluedb", TableInput={
        "Name": "plain", "Parameters": {"classification": "parquet"}})
    sql = "SELECT qty, COUNT(*) AS n FROM s3object GROUP BY qty"
    got, stats = query({"glue": "gluedb.conformance"}, sql)  # type: ignore[arg-type]
    same(got, pl.SQLContext(s3object=pyiceberg_rows(conformance)).execute(sql, eager=True),
         ordered=False)
    assert stats["iceberg"]["snapshot_id"] == conformance.metadata.current_snapshot_id
    error = fails({"source": {"iceberg": {"glue": "gluedb.missing"}}, "sql": sql})
    assert type(error).__name__ == "ObjectNotFoundError" and "glue://gluedb.missing" in str(error)
    error = fails({"source": {"iceberg": {"glue": "gluedb.plain"}}, "sql": sql})
    assert type(error).__name__ == "ObjectFormatError" and "not an Iceberg table" in str(error)


def test_a_large_data_file_is_read_by_its_needed_row_groups_and_columns(
        s3: S3Env, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    from s3slice.engine import iceberg_source

    n = 40_000
    data = arrow_of(pl.DataFrame({"id": list(range(n)), "x": [i * 0.25 for i in range(n)],
                                  "text": [f"row {i} " * 4 for i in range(n)]}))
    table = warehouse.catalog.create_table(
        "db.large", schema=data.schema, properties={"write.parquet.row-group-limit": "5000"})
    table.append(data)
    [path] = table.inspect.files()["file_path"].to_pylist()
    size = len(s3.get(path))
    s3.log.clear()
    monkeypatch.setattr(iceberg_source, "FIRST_GET", 16 * 1024)  # the file is larger
    got, stats = query(table, "SELECT id, x FROM s3object WHERE id BETWEEN 12000 AND 12010")
    key = path.partition("//")[2]
    fetched = sum(r.body_bytes for r in s3.log.gets() if r.path.lstrip("/") == key)
    want = pyiceberg_rows(table).filter(pl.col("id").is_between(12000, 12010)).select("id", "x")
    same(got, want, ordered=False)
    assert stats["row_groups"] == 8 and stats["row_groups_read"] == 1
    # the first GET (the footer), then the id and x chunks of the one row group kept (the
    # reads are buffered: at most 8 KiB past each chunk)
    import io

    import pyarrow.parquet as pq

    md = pq.ParquetFile(io.BytesIO(s3.get(path))).metadata
    group = md.row_group(2)  # ids 10000..14999
    chunks = sum(group.column(i).total_compressed_size for i in range(group.num_columns)
                 if group.column(i).path_in_schema in ("id", "x"))
    assert 16 * 1024 + chunks <= fetched <= 16 * 1024 + chunks + 2 * 8192, (fetched, chunks)
    assert fetched < size / 2


def test_a_format_version_1_table_equals_pyiceberg(s3: S3Env, warehouse: Warehouse) -> None:
    from pyiceberg.transforms import BucketTransform, IdentityTransform

    data = arrow_of(conformance_frame().head(600))
    table = warehouse.catalog.create_table("db.version1", schema=data.schema,
                                           properties={"format-version": "1"})
    with table.update_spec() as spec:
        spec.add_field("quoted col", IdentityTransform(), "q")
        spec.add_field("id", BucketTransform(3), "b")
    table.append(data.slice(0, 300))
    table.append(data.slice(300))
    assert table.metadata.format_version == 1
    for sql in ("SELECT * FROM s3object",
                "SELECT \"quoted col\", COUNT(*) AS n, SUM(amount) AS s FROM s3object "
                "WHERE \"quoted col\" <> 1 AND id > 100 GROUP BY \"quoted col\""):
        got, stats = query(table, sql)
        same(got, pl.SQLContext(s3object=pyiceberg_rows(table)).execute(sql, eager=True),
             ordered=False)
        assert stats["iceberg"]["format_version"] == 1


def test_year_and_hour_partitions_prune_and_answer_as_pyiceberg(
        s3: S3Env, warehouse: Warehouse) -> None:
    from pyiceberg.transforms import HourTransform, YearTransform

    data = arrow_of(conformance_frame().head(300))  # day spans 2024-2025, ts 2024-01..03
    table = warehouse.catalog.create_table("db.times", schema=data.schema)
    with table.update_spec() as spec:
        spec.add_field("day", YearTransform(), "day_year")
        spec.add_field("ts", HourTransform(), "ts_hour")
    table.append(data)
    sql = ("SELECT id, day, ts FROM s3object WHERE day >= DATE '2024-03-01' "
           "AND ts < TIMESTAMP '2024-01-25 07:00:00'")
    got, stats = query(table, sql)
    opened = data_gets(s3)
    want = pl.SQLContext(s3object=pyiceberg_rows(table)).execute(sql, eager=True)
    same(got, want, ordered=False)
    assert want.height > 0
    table_stats = stats["iceberg"]
    assert table_stats["files_pruned_by_partition"] > 0
    assert len(opened) == stats["objects"] == table_stats["data_files"] - table_stats[
        "files_pruned_by_partition"] - table_stats["files_pruned_by_bounds"]


def test_a_table_read_as_csv_is_refused_before_reading(s3: S3Env, conformance: Any) -> None:
    error = fails({"source": {"iceberg": conformance.metadata_location}, "input": "csv",
                   "sql": "SELECT * FROM s3object"})
    assert type(error).__name__ == "RequestError" and "input" in str(error)
    assert not s3.log.gets()


def test_a_data_file_changed_between_its_reads_is_named(
        s3: S3Env, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    from s3slice.engine import iceberg_source
    from s3slice.iceberg import datafile

    n = 20_000
    data = arrow_of(pl.DataFrame({"id": list(range(n)), "x": [i * 0.5 for i in range(n)]}))
    table = warehouse.catalog.create_table("db.changing", schema=data.schema)
    table.append(data)
    [path] = table.inspect.files()["file_path"].to_pylist()
    monkeypatch.setattr(iceberg_source, "FIRST_GET", 8 * 1024)
    footer = datafile.footer

    def replaced_after_the_footer(tail: bytes) -> Any:
        # the file is rewritten (another ETag) once its first GET was answered
        put(s3, path.partition(f"{BUCKET}/")[2], b"x" + s3.get(path)[1:])
        return footer(tail)
    monkeypatch.setattr(datafile, "footer", replaced_after_the_footer)
    error = fails({"source": {"iceberg": table.metadata_location},
                   "sql": "SELECT SUM(x) AS s FROM s3object"})
    assert type(error).__name__ == "ObjectChangedError" and path in str(error), error
