"""Format v2 deletes, through the real handler. pyiceberg writes deletes as copy-on-write
only, so position and equality delete files are built here to the spec (Parquet files
with the reserved field ids, in a delete manifest of a new snapshot): position deletes
are answered as pyiceberg's own scan reads them; equality deletes (which pyiceberg does
not read) as the rows of the snapshot before them less those they equal, in their
partition and only for data files of an earlier sequence number."""

from __future__ import annotations

import dataclasses
import io
import json
import time
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.integration.test_iceberg_tables import (
    BUCKET,
    Warehouse,
    data_gets,
    query,
    same,
    warehouse,  # noqa: F401 - the module's fixture
)
from tests.integration.test_iceberg_tables import pyiceberg_rows as oracle
from tests.support import S3Env

pytestmark = pytest.mark.integration

FILE_PATH_ID, POS_ID = 2147483546, 2147483545
EQ_IDS = [100, 101, 102, 10]  # 10 is in partition "a": the delete (in "b") spares it


def _field(name: str, type_: pa.DataType, fid: int) -> pa.Field:
    return pa.field(name, type_, nullable=False, metadata={b"PARQUET:field_id": str(fid).encode()})


def _parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def _put(env: S3Env, uri: str, body: bytes) -> None:
    env.client.put_object(Bucket=BUCKET, Key=uri.partition(f"{BUCKET}/")[2], Body=body)


def _commit(env: S3Env, table: Any, files: list[Any], name: str) -> str:
    """A new snapshot of ``table``: its manifests and one delete manifest of ``files``;
    the new metadata file's URI."""
    from pyiceberg.manifest import (
        ManifestContent,
        ManifestEntry,
        ManifestEntryStatus,
        ManifestWriterV2,
        write_manifest_list,
    )

    class DeleteManifestWriter(ManifestWriterV2):
        def content(self) -> ManifestContent:
            return ManifestContent.DELETES

        @property
        def _meta(self) -> dict[str, str]:
            return {**super()._meta, "content": "deletes"}

    md = table.metadata
    parent = md.current_snapshot()
    sid = int(time.time_ns() % (1 << 62))
    seq = md.last_sequence_number + 1
    location = f"{md.location}/metadata/{name}-{sid}"
    writer = DeleteManifestWriter(md.spec(), md.schema(), table.io.new_output(location + "-m.avro"),
                                  sid, "deflate")
    with writer:
        for f in files:
            writer.add_entry(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED,
                                                     snapshot_id=sid, data_file=f))
    manifests = [*parent.manifests(table.io), writer.to_manifest_file()]
    with write_manifest_list(2, table.io.new_output(location + "-list.avro"), sid,
                             parent.snapshot_id, seq, "deflate") as listing:
        listing.add_manifests(manifests)
    raw = json.loads(env.get(table.metadata_location))
    now = int(time.time() * 1000)
    raw["snapshots"].append({"snapshot-id": sid, "parent-snapshot-id": parent.snapshot_id,
                             "sequence-number": seq, "timestamp-ms": now,
                             "manifest-list": location + "-list.avro",
                             "summary": {"operation": "delete"},
                             "schema-id": md.current_schema_id})
    raw.update({"current-snapshot-id": sid, "last-sequence-number": seq,
                "last-updated-ms": now})
    raw["refs"]["main"]["snapshot-id"] = sid
    raw["snapshot-log"].append({"snapshot-id": sid, "timestamp-ms": now})
    uri = location + ".metadata.json"
    _put(env, uri, json.dumps(raw).encode())
    return uri


def _delete_file(content: Any, path: str, body: bytes, partition: str, rows: int,
                 equality_ids: list[int] | None = None, target: str | None = None) -> Any:
    """A delete file's manifest entry; a position delete file of one data file (``target``)
    says so by its file_path bounds, as writers do."""
    from pyiceberg.manifest import DataFile, FileFormat
    from pyiceberg.typedef import Record

    return DataFile.from_args(content=content, file_path=path, file_format=FileFormat.PARQUET,
                              partition=Record(partition), record_count=rows,
                              file_size_in_bytes=len(body), spec_id=1,
                              equality_ids=equality_ids,
                              **({} if target is None else {
                                  "lower_bounds": {FILE_PATH_ID: target.encode()},
                                  "upper_bounds": {FILE_PATH_ID: target.encode()}}))


@dataclasses.dataclass
class Deleted:
    before: Any  # the table before any delete file (pyiceberg)
    positions: str  # metadata: position deletes added
    equalities: str  # metadata: equality deletes added too
    appended: Any  # the table after a later append (pyiceberg, registered)
    deleted_positions: dict[str, list[int]]
    new_rows: pa.Table


@pytest.fixture(scope="module")
def deleted(warehouse: Warehouse) -> Deleted:  # noqa: F811
    from pyiceberg.manifest import DataFileContent
    from pyiceberg.transforms import IdentityTransform

    env = warehouse.env
    data = pa.table({"id": pa.array(range(300), pa.int64()),
                     "cat": pa.array([("a", "b", "c")[i // 100] for i in range(300)]),
                     "v": pa.array([None if i % 7 == 0 else i * 1.5 for i in range(300)])})
    table = warehouse.catalog.create_table("db.deletes", schema=data.schema)
    with table.update_spec() as spec:
        spec.add_field("cat", IdentityTransform(), "cat")
    table.append(data)
    files = table.inspect.files()
    path_a = next(p for p, part in zip(files["file_path"].to_pylist(),
                                       files["partition"].to_pylist(), strict=True)
                  if part["cat"] == "a")
    positions = {path_a: [0, 5, 7, 99]}
    body = _parquet(pa.table([pa.array([path_a] * 4), pa.array(positions[path_a], pa.int64())],
                             schema=pa.schema([_field("file_path", pa.string(), FILE_PATH_ID),
                                               _field("pos", pa.int64(), POS_ID)])))
    pos_path = f"{table.metadata.location}/data/cat=a/pos-deletes.parquet"
    _put(env, pos_path, body)
    pos_uri = _commit(env, table, [_delete_file(DataFileContent.POSITION_DELETES, pos_path,
                                                body, "a", 4, target=path_a)], "pos")
    with_pos = warehouse.static(pos_uri)
    body = _parquet(pa.table([pa.array(EQ_IDS, pa.int64())],
                             schema=pa.schema([_field("id", pa.int64(), 1)])))
    eq_path = f"{table.metadata.location}/data/cat=b/eq-deletes.parquet"
    _put(env, eq_path, body)
    eq_uri = _commit(env, with_pos, [_delete_file(DataFileContent.EQUALITY_DELETES, eq_path,
                                                  body, "b", len(EQ_IDS), [1])], "eq")
    registered = warehouse.catalog.register_table("db.deletes_eq", eq_uri)
    new_rows = pa.table({"id": pa.array([101, 500], pa.int64()), "cat": pa.array(["b", "b"]),
                         "v": pa.array([1.0, 2.0])})
    registered.append(new_rows)  # a later sequence number: the equality delete spares it
    return Deleted(table, pos_uri, eq_uri, warehouse.catalog.load_table("db.deletes_eq"),
                   positions, new_rows)


QUERIES = ["SELECT * FROM s3object", "SELECT cat, COUNT(*) AS c, SUM(v) AS s FROM s3object "
           "GROUP BY cat", "SELECT id FROM s3object WHERE id < 10 OR id BETWEEN 98 AND 103"]


@pytest.mark.parametrize("sql", QUERIES)
def test_position_deletes_as_pyiceberg_reads_them(s3: S3Env, warehouse: Warehouse,  # noqa: F811
                                                  deleted: Deleted, sql: str) -> None:
    got, stats = query(deleted.positions, sql)
    rows = oracle(warehouse.static(deleted.positions))
    assert rows.height == 300 - 4  # pyiceberg applied them
    same(got, pl.SQLContext(s3object=rows).execute(sql, eager=True), ordered=False)
    assert stats["iceberg"]["delete_files"] == stats["iceberg"]["delete_files_applied"] >= 1


def _equality_oracle(deleted: Deleted, warehouse: Warehouse, *, appended: bool  # noqa: F811
                     ) -> pl.DataFrame:
    rows = oracle(warehouse.static(deleted.positions))
    rows = rows.filter(~((pl.col("cat") == "b") & pl.col("id").is_in(EQ_IDS)))
    if appended:
        more = pl.from_arrow(deleted.new_rows)
        assert isinstance(more, pl.DataFrame)
        rows = pl.concat([rows, more])
    return rows


@pytest.mark.parametrize("sql", QUERIES)
def test_equality_deletes_in_their_partition_and_sequence(
        s3: S3Env, warehouse: Warehouse, deleted: Deleted, sql: str) -> None:  # noqa: F811
    for metadata, appended in ((deleted.equalities, False),
                               (deleted.appended.metadata_location, True)):
        got, stats = query(metadata, sql)
        want = _equality_oracle(deleted, warehouse, appended=appended)
        same(got, pl.SQLContext(s3object=want).execute(sql, eager=True), ordered=False)
        assert stats["iceberg"]["delete_files_applied"] == 2


def test_id_10_survives_and_101_returns_only_when_appended_later(
        s3: S3Env, deleted: Deleted) -> None:
    got, _ = query(deleted.equalities, "SELECT id FROM s3object WHERE id IN (10, 101)")
    assert got["id"].to_list() == [10]
    got, _ = query(deleted.appended.metadata_location,
                   "SELECT id FROM s3object WHERE id IN (10, 101)")
    assert sorted(got["id"].to_list()) == [10, 101]


def test_a_pruned_data_file_reads_none_of_its_deletes(s3: S3Env, deleted: Deleted) -> None:
    got, stats = query(deleted.equalities, "SELECT id FROM s3object WHERE cat = 'c'")
    assert sorted(got["id"].to_list()) == list(range(200, 300))
    assert stats["iceberg"]["delete_files_applied"] == 0
    assert not [p for p in data_gets(s3) if p.endswith("-deletes.parquet")]


def test_position_deletes_as_polars_scan_iceberg_reads_them(
        s3: S3Env, warehouse: Warehouse, deleted: Deleted) -> None:  # noqa: F811
    got, _ = query(deleted.positions, "SELECT * FROM s3object")
    theirs = pl.scan_iceberg(warehouse.static(deleted.positions),
                             reader_override="native").collect()
    assert theirs.height == 300 - 4
    same(got, theirs, ordered=False)
