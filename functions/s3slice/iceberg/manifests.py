"""Manifest lists and manifests (Avro, read with fastavro): the files of a snapshot, with
their partition values, column bounds, null counts and sequence numbers."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Mapping, Sequence
from typing import Any

from s3slice.core.errors import ObjectFormatError

DATA, POSITION_DELETES, EQUALITY_DELETES = 0, 1, 2
DELETED = 2  # a manifest entry's status


@dataclasses.dataclass(frozen=True)
class FieldSummary:
    contains_null: bool
    lower: bytes | None
    upper: bytes | None


@dataclasses.dataclass(frozen=True)
class ManifestFile:
    path: str
    length: int
    spec_id: int
    content: int  # 0 data, 1 deletes
    sequence_number: int
    added_files: int
    existing_files: int
    partitions: tuple[FieldSummary, ...] | None


@dataclasses.dataclass(frozen=True)
class DataFile:
    content: int  # DATA, POSITION_DELETES or EQUALITY_DELETES
    path: str
    format: str
    partition: tuple[Any, ...]  # in the spec's field order, as fastavro gives them
    record_count: int
    size: int
    spec_id: int
    sequence_number: int  # the data sequence number (inherited when null)
    null_counts: Mapping[int, int]
    lower: Mapping[int, bytes]
    upper: Mapping[int, bytes]
    equality_ids: tuple[int, ...] = ()


def _records(data: bytes, uri: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    import fastavro  # imported by the requests that read a table

    try:
        reader = fastavro.reader(io.BytesIO(data))
        return [r for r in reader if isinstance(r, dict)], dict(reader.metadata)
    except Exception as e:  # noqa: BLE001 - any failure to decode is the file's
        raise ObjectFormatError(f"not a readable Avro file: {type(e).__name__}: {e}",
                                uri=uri) from None


def _map(raw: Sequence[Mapping[str, Any]] | None) -> dict[int, Any]:
    return {int(e["key"]): e["value"] for e in raw or ()}


def read_manifest_list(data: bytes, uri: str) -> list[ManifestFile]:
    records, _ = _records(data, uri)
    try:
        return [ManifestFile(
            path=str(r["manifest_path"]), length=int(r["manifest_length"]),
            spec_id=int(r["partition_spec_id"]), content=int(r.get("content") or 0),
            sequence_number=int(r.get("sequence_number") or 0),
            added_files=int(r.get("added_files_count") or r.get("added_data_files_count") or 0),
            existing_files=int(r.get("existing_files_count")
                               or r.get("existing_data_files_count") or 0),
            partitions=None if r.get("partitions") is None else tuple(
                FieldSummary(bool(p["contains_null"]), p.get("lower_bound"),
                             p.get("upper_bound")) for p in r["partitions"]))
            for r in records]
    except (KeyError, TypeError, ValueError) as e:
        raise ObjectFormatError(f"not an Iceberg manifest list: {type(e).__name__}: {e}",
                                uri=uri) from None


def read_manifest(data: bytes, manifest: ManifestFile) -> list[DataFile]:
    """The live files of a manifest (entries with status DELETED are not)."""
    records, meta = _records(data, manifest.path)
    out: list[DataFile] = []
    try:
        for entry in records:
            if int(entry["status"]) == DELETED:
                continue
            f = entry["data_file"]
            seq = entry.get("sequence_number")
            fmt = str(f["file_format"]).upper()
            if fmt != "PARQUET":
                raise ObjectFormatError(f"{f['file_path']} is {fmt}: only Parquet data and "
                                        "delete files are supported (a PUFFIN deletion vector "
                                        "is Iceberg format version 3)", uri=manifest.path)
            out.append(DataFile(
                content=int(f.get("content") or 0), path=str(f["file_path"]), format=fmt,
                partition=tuple((f.get("partition") or {}).values()),
                record_count=int(f["record_count"]), size=int(f["file_size_in_bytes"]),
                spec_id=int(meta.get("partition-spec-id", manifest.spec_id)),
                sequence_number=manifest.sequence_number if seq is None else int(seq),
                null_counts=_map(f.get("null_value_counts")),
                lower=_map(f.get("lower_bounds")), upper=_map(f.get("upper_bounds")),
                equality_ids=tuple(f.get("equality_ids") or ())))
    except (KeyError, TypeError, ValueError) as e:
        raise ObjectFormatError(f"not an Iceberg manifest: {type(e).__name__}: {e}",
                                uri=manifest.path) from None
    return out
