"""A table's metadata file: its schemas, partition specs and snapshots, and the snapshot a
request reads (the current one, one by id, or the one current at a time)."""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from s3slice.core.errors import ObjectFormatError, RequestError
from s3slice.iceberg import columns as C
from s3slice.iceberg import types as T

SUPPORTED_VERSIONS = (1, 2)


@dataclasses.dataclass(frozen=True)
class Field:
    id: int
    name: str
    type: T.Type
    required: bool = False
    #: Its ``initial-default`` as the metadata holds it (the spec's JSON single-value
    #: form; :func:`types.from_json` reads it): the value of the field in the rows of
    #: data files written before it was added. Its ``write-default`` is for writers only.
    initial_default: Any = None

    @property
    def dtype(self) -> pl.DataType:
        return T.polars_type(self.type)


@dataclasses.dataclass(frozen=True)
class Schema:
    schema_id: int
    fields: tuple[Field, ...]

    def by_name(self) -> dict[str, Field]:
        return {f.name: f for f in self.fields}

    def by_id(self) -> dict[int, Field]:
        return {f.id: f for f in self.fields}

    def types_by_id(self) -> dict[int, T.Type]:
        """Every field's type by id, nested ones too (a partition's source may be one)."""
        out: dict[int, T.Type] = {}

        def walk(fid: int, t: T.Type) -> None:
            out[fid] = t
            if isinstance(t, dict):
                for f in t.get("fields", ()):
                    walk(f["id"], f["type"])
        for f in self.fields:
            walk(f.id, f.type)
        return out

    def polars(self) -> dict[str, pl.DataType]:
        return {f.name: f.dtype for f in self.fields}


@dataclasses.dataclass(frozen=True)
class PartitionField:
    source_id: int
    field_id: int
    transform: str
    name: str


@dataclasses.dataclass(frozen=True)
class Spec:
    spec_id: int
    fields: tuple[PartitionField, ...]


@dataclasses.dataclass(frozen=True)
class Snapshot:
    snapshot_id: int
    sequence_number: int
    timestamp_ms: int
    manifest_list: str
    schema_id: int | None


@dataclasses.dataclass(frozen=True)
class Table:
    uri: str  # the metadata file
    format_version: int
    location: str
    schemas: Mapping[int, Schema]
    current_schema_id: int
    specs: Mapping[int, Spec]
    snapshots: Mapping[int, Snapshot]
    current_snapshot_id: int | None
    log: tuple[tuple[int, int], ...]  # (timestamp ms, snapshot id), in order
    #: The table's name mapping (``schema.name-mapping.default``), for data files
    #: without field ids.
    name_mapping: C.Mapping | None = None
    #: Its properties (``write.data.path`` and the like: :mod:`.locations`).
    properties: Mapping[str, str] = dataclasses.field(default_factory=dict)


def _check_defaults(fields: Sequence[Mapping[str, Any]]) -> None:
    """Every field's ``initial-default`` (nested ones too) is a value of its type."""
    for f in fields:
        try:
            T.from_json(f["type"], f.get("initial-default"))
        except ValueError as e:
            raise ValueError(f"field {f['name']!r} (id {f['id']}): its initial-default {e}"
                             ) from None
        t = f["type"]
        if isinstance(t, dict):
            children = t.get("fields") or [
                {"id": t.get(f"{k}-id"), "name": f"{f['name']}.{k}", "type": t[k]}
                for k in ("element", "key", "value") if k in t]
            _check_defaults(children)


def _schema(raw: Mapping[str, Any]) -> Schema:
    fields = tuple(Field(f["id"], f["name"], f["type"], bool(f.get("required")),
                         f.get("initial-default")) for f in raw["fields"])
    for f in fields:
        T.polars_type(f.type)  # refuses what is not supported, by name
    _check_defaults(raw["fields"])
    return Schema(int(raw.get("schema-id", 0)), fields)


def _spec(raw: Sequence[Mapping[str, Any]], spec_id: int) -> Spec:
    """A spec's fields (v1 fields have no id: theirs are 1000, 1001, ...)."""
    return Spec(spec_id, tuple(PartitionField(int(f["source-id"]),
                                              int(f.get("field-id", 1000 + i)),
                                              str(f["transform"]), str(f["name"]))
                               for i, f in enumerate(raw)))


#: The most bytes a gzip-compressed metadata file may inflate to (a bomb is refused).
MAX_METADATA_BYTES = 256 << 20
_GZIP = b"\x1f\x8b"


def _inflated(data: bytes, uri: str) -> bytes:
    """``data``, inflated when gzip-compressed (by its magic bytes, whatever its name: Java
    writes ``*.gz.metadata.json``, and once wrote ``*.metadata.json.gz``)."""
    if not data.startswith(_GZIP):
        return data
    inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflate.decompress(data, MAX_METADATA_BYTES + 1)
    except zlib.error as e:
        raise ObjectFormatError(f"not a readable gzip-compressed metadata file: {e}",
                                uri=uri) from None
    if len(out) > MAX_METADATA_BYTES:
        raise ObjectFormatError(f"the gzip-compressed metadata inflates past "
                                f"{MAX_METADATA_BYTES} bytes; nothing was read", uri=uri)
    if not inflate.eof:
        raise ObjectFormatError("the gzip-compressed metadata file is truncated", uri=uri)
    return out


def parse_metadata(data: bytes, uri: str) -> Table:
    """The table metadata in ``data`` (the file at ``uri``; gzip-compressed or not). A
    corrupt file, and a format version other than 1 or 2, are an
    :class:`ObjectFormatError` naming it."""
    data = _inflated(data, uri)
    try:
        raw = json.loads(data)
        version = int(raw["format-version"])
    except (ValueError, KeyError, TypeError) as e:
        raise ObjectFormatError(f"not an Iceberg table metadata file: {e}", uri=uri) from None
    if version not in SUPPORTED_VERSIONS:
        raise ObjectFormatError(f"Iceberg format version {version} is not supported (versions "
                                f"1 and 2 are); nothing was read", uri=uri)
    try:
        if "schemas" in raw:
            schemas = {s.schema_id: s for s in map(_schema, raw["schemas"])}
            current = int(raw["current-schema-id"])
        else:  # v1 may have one schema only
            one = _schema(raw["schema"])
            schemas, current = {one.schema_id: one}, one.schema_id
        if current not in schemas:
            raise ValueError(f"the current schema {current} is not among its schemas")
        if "partition-specs" in raw:
            specs = {int(s["spec-id"]): _spec(s["fields"], int(s["spec-id"]))
                     for s in raw["partition-specs"]}
        else:
            specs = {0: _spec(raw.get("partition-spec", []), 0)}
        snapshots = {int(s["snapshot-id"]): Snapshot(
            int(s["snapshot-id"]), int(s.get("sequence-number", 0)), int(s["timestamp-ms"]),
            str(s["manifest-list"]), None if s.get("schema-id") is None else int(s["schema-id"]))
            for s in raw.get("snapshots") or ()}
        if any("manifests" in s and "manifest-list" not in s for s in raw.get("snapshots") or ()):
            raise ValueError("a v1 snapshot without a manifest list is not supported")
        current_snapshot = raw.get("current-snapshot-id")
        if current_snapshot is not None and int(current_snapshot) < 0:
            current_snapshot = None
        log = tuple((int(e["timestamp-ms"]), int(e["snapshot-id"]))
                    for e in raw.get("snapshot-log") or ())
        properties = {str(k): str(v) for k, v in (raw.get("properties") or {}).items()}
        mapping = properties.get(C.NAME_MAPPING)
        try:
            name_mapping = None if mapping is None else C.parse_mapping(mapping)
        except (ValueError, TypeError) as e:
            raise ValueError(f"its name mapping ({C.NAME_MAPPING}) is malformed: {e}"
                             ) from None
        return Table(uri, version, str(raw.get("location", "")), schemas, current, specs,
                     snapshots, None if current_snapshot is None else int(current_snapshot),
                     log, name_mapping, properties)
    except T.UnsupportedType as e:
        raise ObjectFormatError(str(e), uri=uri) from None
    except (ValueError, KeyError, TypeError) as e:
        raise ObjectFormatError(f"corrupt Iceberg table metadata: {type(e).__name__}: {e}",
                                uri=uri) from None


def select(table: Table, *, snapshot_id: int | None, as_of_ms: int | None
           ) -> tuple[Snapshot | None, Schema]:
    """The snapshot to read and the schema to read it with: the current snapshot and the
    current schema; or, time travelling (by id, or the snapshot current at ``as_of_ms`` in
    the snapshot log), that snapshot and its own schema (as pyiceberg's scan does). None
    for a table with no snapshot (no rows)."""
    schema = table.schemas[table.current_schema_id]
    if snapshot_id is None and as_of_ms is None:
        if table.current_snapshot_id is None:
            return None, schema
        chosen = table.snapshots.get(table.current_snapshot_id)
        if chosen is None:
            raise ObjectFormatError(f"the current snapshot {table.current_snapshot_id} is not "
                                    "in the metadata", uri=table.uri)
        return chosen, schema
    if snapshot_id is None:
        assert as_of_ms is not None
        earlier = [sid for ts, sid in table.log if ts <= as_of_ms]
        if not earlier:
            raise RequestError(f"{table.uri} has no snapshot at or before {as_of_ms} ms",
                               field="source.as_of")
        snapshot_id = earlier[-1]
    chosen = table.snapshots.get(snapshot_id)
    if chosen is None:
        raise RequestError(f"{table.uri} has no snapshot {snapshot_id}",
                           field="source.snapshot_id" if as_of_ms is None else "source.as_of")
    if chosen.schema_id is not None and chosen.schema_id in table.schemas:
        schema = table.schemas[chosen.schema_id]
    return chosen, schema
