"""A table as a source: an Apache Iceberg table named by its metadata file or by the AWS
Glue Data Catalog, and the snapshot to read (the current one, one by id, or the one
current at a time)::

    {"iceberg": "s3://b/warehouse/db/t/metadata/00003-....metadata.json"}
    {"iceberg": {"glue": "db.t"}, "snapshot_id": 123}
    {"iceberg": "s3://...", "as_of": "2024-05-01T12:00:00Z"}   -- or milliseconds

Standard library only: :mod:`s3slice.core.model` parses requests with it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
from collections.abc import Mapping, Sequence

from s3slice.core.errors import RequestError

TABLE_FIELDS = frozenset({"iceberg", "snapshot_id", "as_of"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class TableSource:
    """An Iceberg table: its metadata file (``bucket``/``key``) or its Glue name, and an
    optional snapshot id or time (milliseconds since the epoch, UTC)."""

    bucket: str = ""
    key: str = ""
    glue: str | None = None
    snapshot_id: int | None = None
    as_of_ms: int | None = None
    #: Only these data files of the snapshot (a Distributed Map batch of its planned
    #: files, with the delete files that apply to them); all when empty.
    files: tuple[str, ...] = ()

    @property
    def table(self) -> str:
        """The table's own name: its metadata file's URI, or ``glue://db.t``."""
        return f"glue://{self.glue}" if self.glue is not None else f"s3://{self.bucket}/{self.key}"

    @property
    def uri(self) -> str:
        """The table, its snapshot and its files (two snapshots, or two batches of files,
        never share an output)."""
        uri = self.table
        if self.snapshot_id is not None:
            uri = f"{uri}@snapshot_id={self.snapshot_id}"
        elif self.as_of_ms is not None:
            uri = f"{uri}@as_of={self.as_of_ms}"
        if self.files:
            digest = hashlib.sha256("\n".join(sorted(self.files)).encode()).hexdigest()[:16]
            uri = f"{uri}#files={digest}"
        return uri

    # A table is read whole: for the recursion guard its directory is its "prefix".
    is_glob = False
    is_prefix = True

    @property
    def listed(self) -> str:
        if self.glue is not None:
            return self.key
        head, sep, _ = self.key.rpartition("metadata/")
        return head if sep else self.key.rpartition("/")[0] + "/"


def _int(raw: object, field: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise RequestError(f"expected a whole number, got {raw!r}", field=field)
    return raw


def _as_of(raw: object) -> int:
    """An ISO 8601 time (UTC when it names no zone) or milliseconds since the epoch."""
    if isinstance(raw, str):
        try:
            when = dt.datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
        except ValueError:
            raise RequestError(f"expected an ISO 8601 time or milliseconds since the epoch, "
                               f"got {raw!r}", field="source.as_of") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        return int(when.timestamp() * 1000)
    return _int(raw, "source.as_of")


def parse_table_source(raw: Mapping[str, object]) -> TableSource:
    """``{"iceberg": "s3://b/…/vN.metadata.json" | {"glue": "db.t"}, "snapshot_id": …}``."""
    unknown = set(raw) - TABLE_FIELDS
    if unknown:
        raise RequestError(f"unknown field(s) {sorted(unknown)}; expected some of "
                           f"{sorted(TABLE_FIELDS)}", field="source")
    if raw.get("snapshot_id") is not None and raw.get("as_of") is not None:
        raise RequestError("give snapshot_id or as_of, not both", field="source")
    snapshot = None if raw.get("snapshot_id") is None else _int(raw["snapshot_id"],
                                                                "source.snapshot_id")
    as_of = None if raw.get("as_of") is None else _as_of(raw["as_of"])
    table = raw.get("iceberg")
    if isinstance(table, Mapping):
        name = table.get("glue")
        if set(table) != {"glue"} or not isinstance(name, str) or name.count(".") != 1 or (
                not all(name.split("."))):
            raise RequestError(f"expected {{\"glue\": \"database.table\"}}, got {table!r}",
                               field="source.iceberg")
        return TableSource(glue=name, snapshot_id=snapshot, as_of_ms=as_of)
    if not isinstance(table, str) or not table.startswith("s3://"):
        raise RequestError(f"expected the s3:// URI of a table's metadata file (or "
                           f"{{\"glue\": \"db.table\"}}), got {table!r}", field="source.iceberg")
    bucket, _, key = table[5:].partition("/")
    if not bucket or not key.endswith((".json", ".json.gz")) or any(
            c in bucket for c in " \\?#"):
        raise RequestError(f"{table!r} names no metadata file (a key ending in .json, or "
                           f".json.gz)",
                           field="source.iceberg")
    return TableSource(bucket=bucket, key=key, snapshot_id=snapshot, as_of_ms=as_of)


def table_of(sources: Sequence[object]) -> TableSource | None:
    """The table a request's ``sources`` name, if they name one."""
    [*named] = sources
    return named[0] if len(named) == 1 and isinstance(named[0], TableSource) else None
