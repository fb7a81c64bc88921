"""An Iceberg table that evolved, through the real handler: partition evolution (identity,
then day, bucket and truncate), schema evolution (a column renamed, one added, one dropped,
an int promoted to long), several snapshots read by id and by time, and pyiceberg's
copy-on-write deletes; every snapshot's answer equals pyiceberg's scan of it."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

from tests.integration.test_iceberg_tables import (
    Warehouse,
    data_gets,
    fails,
    query,
    same,
    warehouse,  # noqa: F401 - the module's fixture
)
from tests.integration.test_iceberg_tables import pyiceberg_rows as oracle
from tests.support import S3Env

pytestmark = pytest.mark.integration


def batch(start: int, n: int, *, evolved: bool = False) -> pa.Table:
    ids = list(range(start, start + n))
    cols: dict[str, Any] = {
        "id": pa.array(ids, pa.int64()),
        "cat": pa.array([("north", "south", "east", "west")[i % 4] for i in ids]),
        "ts": pa.array([dt.datetime(2024, 1, 1) + dt.timedelta(minutes=20 * i) for i in ids],
                       pa.timestamp("us")),
    }
    if evolved:
        cols["value"] = pa.array([None if i % 11 == 0 else i * 0.5 for i in ids], pa.float64())
        cols["n"] = pa.array([i * 1_000_000_000 for i in ids], pa.int64())
        cols["note"] = pa.array([f"note-{i % 3}" for i in ids])
    else:
        cols["v"] = pa.array([None if i % 11 == 0 else i * 0.5 for i in ids], pa.float64())
        cols["n"] = pa.array([i % 1000 for i in ids], pa.int32())
        cols["dropme"] = pa.array([f"x{i}" for i in ids])
    return pa.table(cols)


@dataclasses.dataclass
class Evolved:
    table: Any
    snapshots: list[int]
    times: list[int]  # each snapshot's commit time, ms


@pytest.fixture(scope="module")
def evolved(warehouse: Warehouse) -> Evolved:  # noqa: F811
    from pyiceberg.transforms import (
        BucketTransform,
        DayTransform,
        IdentityTransform,
        TruncateTransform,
    )
    from pyiceberg.types import LongType, StringType

    first = batch(0, 200)
    table = warehouse.catalog.create_table("db.evolved", schema=first.schema)
    with table.update_spec() as spec:
        spec.add_field("cat", IdentityTransform(), "cat")
    table.append(first)
    with table.update_spec() as spec:  # partition evolution
        spec.add_field("ts", DayTransform(), "ts_day")
        spec.add_field("id", BucketTransform(2), "id_bucket")
    table.append(batch(200, 150))
    with table.update_schema() as schema:  # schema evolution
        schema.rename_column("v", "value")
        schema.update_column("n", field_type=LongType())
        schema.delete_column("dropme")
        schema.add_column("note", StringType())
    with table.update_spec() as spec:
        spec.add_field("note", TruncateTransform(6), "note_trunc")
    table.append(batch(350, 150, evolved=True))
    table.delete("id >= 100 AND id < 150")  # copy-on-write
    table = warehouse.catalog.load_table("db.evolved")
    snapshots = [s.snapshot_id for s in table.snapshots()]
    times = [s.timestamp_ms for s in table.snapshots()]
    return Evolved(table, snapshots, times)


QUERIES = [
    "SELECT * FROM s3object",
    "SELECT id, value, n, note FROM s3object WHERE value > 300 OR note = 'note-2'",
    "SELECT cat, COUNT(*) AS c, SUM(n) AS s, AVG(value) AS a FROM s3object GROUP BY cat",
    "SELECT id FROM s3object WHERE ts >= TIMESTAMP '2024-01-04 00:00:00' "
    "AND ts < TIMESTAMP '2024-01-05 06:00:00'",
    "SELECT id, note FROM s3object WHERE note IS NULL AND id > 300",
    "SELECT id FROM s3object WHERE id = 377",
    "SELECT COUNT(*) AS c FROM s3object WHERE n > 400000000000",
]


@pytest.mark.parametrize("sql", QUERIES)
def test_current_snapshot_equals_pyiceberg(s3: S3Env, evolved: Evolved, sql: str) -> None:
    got, stats = query(evolved.table, sql)
    base = oracle(evolved.table)
    want = pl.SQLContext(s3object=base.rechunk()).execute(sql, eager=True)
    same(got, want, ordered=False)
    assert stats["iceberg"]["snapshot_id"] == evolved.snapshots[-1]


def test_every_snapshot_by_id_equals_pyiceberg(s3: S3Env, evolved: Evolved) -> None:
    assert len(evolved.snapshots) >= 4
    for snapshot in evolved.snapshots:
        got, stats = query(evolved.table, "SELECT * FROM s3object", snapshot_id=snapshot)
        want = oracle(evolved.table, snapshot_id=snapshot)
        same(got, want, ordered=False)
        assert stats["iceberg"]["snapshot_id"] == snapshot


def test_as_of_reads_the_snapshot_current_then(s3: S3Env, evolved: Evolved) -> None:
    second = evolved.times[1]
    got, stats = query(evolved.table, "SELECT COUNT(*) AS c FROM s3object", as_of=second + 1)
    assert stats["iceberg"]["snapshot_id"] == evolved.snapshots[1]
    assert got["c"].to_list() == [oracle(evolved.table, snapshot_id=evolved.snapshots[1]).height]
    iso = dt.datetime.fromtimestamp(second / 1000, dt.UTC).isoformat()
    _, stats = query(evolved.table, "SELECT COUNT(*) AS c FROM s3object", as_of=iso)
    assert stats["iceberg"]["snapshot_id"] == evolved.snapshots[1]
    error = fails({"source": {"iceberg": evolved.table.metadata_location,
                              "as_of": evolved.times[0] - 1}, "sql": "SELECT 1 FROM s3object"})
    assert type(error).__name__ == "RequestError"
    error = fails({"source": {"iceberg": evolved.table.metadata_location, "snapshot_id": 7},
                   "sql": "SELECT 1 FROM s3object"})
    assert type(error).__name__ == "RequestError" and "no snapshot 7" in str(error)


def test_old_files_prune_by_their_old_spec_and_new_by_the_new(s3: S3Env, evolved: Evolved
                                                              ) -> None:
    got, stats = query(evolved.table, "SELECT id FROM s3object WHERE cat = 'west' AND id < 50")
    opened = data_gets(s3)
    want = oracle(evolved.table).filter((pl.col("cat") == "west") & (pl.col("id") < 50))
    assert sorted(got["id"].to_list()) == sorted(want["id"].to_list())
    table = stats["iceberg"]
    assert table["files_pruned_by_partition"] > 0 and table["files_pruned_by_bounds"] > 0
    files = evolved.table.inspect.files()
    assert len(opened) == stats["objects"] == len(files) - table[
        "files_pruned_by_partition"] - table["files_pruned_by_bounds"]


def test_a_renamed_column_is_read_by_field_id_and_the_old_name_is_unknown(
        s3: S3Env, evolved: Evolved) -> None:
    got, _ = query(evolved.table, "SELECT SUM(value) AS s FROM s3object WHERE id < 300")
    want = oracle(evolved.table).filter(pl.col("id") < 300)["value"].sum()
    assert got["s"].to_list() == [pytest.approx(want)]
    error = fails({"source": {"iceberg": evolved.table.metadata_location},
                   "sql": "SELECT v FROM s3object"})
    assert type(error).__name__ == "UnknownColumnError"
    error = fails({"source": {"iceberg": evolved.table.metadata_location},
                   "sql": "SELECT dropme FROM s3object"})
    assert type(error).__name__ == "UnknownColumnError"


def test_time_travel_sees_the_old_schema(s3: S3Env, evolved: Evolved) -> None:
    got, _ = query(evolved.table, "SELECT id, v, dropme FROM s3object WHERE id < 3",
                   snapshot_id=evolved.snapshots[0])
    # the snapshot's own schema, as pyiceberg's scan by snapshot id reads it
    assert sorted(got["dropme"].to_list()) == ["x0", "x1", "x2"]


def test_a_manifest_its_partition_summaries_rule_out_is_never_read(
        s3: S3Env, evolved: Evolved) -> None:
    import io

    import fastavro

    sql = "SELECT id FROM s3object WHERE ts >= TIMESTAMP '2024-01-06 12:00:00'"
    got, stats = query(evolved.table, sql)
    manifests_read = [r.path for r in s3.log.gets()
                      if r.path.endswith(".avro") and "snap-" not in r.path]
    want = oracle(evolved.table).filter(pl.col("ts") >= dt.datetime(2024, 1, 6, 12))
    assert sorted(got["id"].to_list()) == sorted(want["id"].to_list()) and want.height > 0
    table = stats["iceberg"]
    assert table["manifests_pruned"] >= 1
    assert table["manifests_read"] + table["manifests_pruned"] == table["manifests"]
    snapshot = evolved.table.metadata.current_snapshot()
    listing = list(fastavro.reader(io.BytesIO(s3.get(snapshot.manifest_list))))
    paths = {m["manifest_path"].partition("//")[2] for m in listing}  # type: ignore[index]
    assert len({p.lstrip("/") for p in manifests_read} & paths) == table["manifests_read"]


def test_every_snapshot_equals_polars_scan_iceberg(s3: S3Env, evolved: Evolved) -> None:
    """polars' own Iceberg reader (native) as a second oracle."""
    for snapshot in evolved.snapshots:
        got, _ = query(evolved.table, "SELECT * FROM s3object", snapshot_id=snapshot)
        theirs = pl.scan_iceberg(evolved.table, snapshot_id=snapshot,
                                 reader_override="native").collect()
        same(got, theirs, ordered=False)
