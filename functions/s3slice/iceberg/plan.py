"""Planning a table scan from metadata alone: the snapshot's manifest list, its manifests
pruned by their partition summaries, their data files pruned by partition values and then
by column bounds and null counts, all against the query's predicate; and each data file's
delete files (v2 position and equality deletes, by sequence number and partition)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from s3slice.core.errors import RequestError
from s3slice.iceberg import locations as L
from s3slice.iceberg import manifests as M
from s3slice.iceberg import transforms as X
from s3slice.iceberg import types as T
from s3slice.iceberg.metadata import PartitionField, Schema, Snapshot, Spec, Table
from s3slice.query.pruning import predicate as P

#: Reads a whole file by its URI (typed errors naming it).
Load = Callable[[str], bytes]
#: Runs a function over items, in parallel, keeping their order.
Run = Callable[[Callable[[Any], Any], list[Any]], list[Any]]


@dataclasses.dataclass(frozen=True)
class Task:
    """A data file to read, and the delete files that apply to it."""

    file: M.DataFile
    position_deletes: tuple[M.DataFile, ...]
    equality_deletes: tuple[M.DataFile, ...]


@dataclasses.dataclass
class Plan:
    table: Table
    snapshot: Snapshot | None
    schema: Schema
    tasks: list[Task]
    counts: dict[str, int] = dataclasses.field(default_factory=dict)

    def stats(self) -> dict[str, Any]:
        return {"format_version": self.table.format_version,
                "snapshot_id": None if self.snapshot is None else self.snapshot.snapshot_id,
                **self.counts}


def _partition_stats(pf: PartitionField, source: T.Type, lower: Any, upper: Any, *,
                     nulls: bool, num_rows: int) -> P.ColumnStats | None:
    """What a unit (a data file: ``num_rows`` 1; a manifest's summary: 2) of partition
    values between ``lower`` and ``upper`` (their natural form) says under the field's
    :func:`~.transforms.key`, in the type it is judged in (:func:`~.transforms.dtype`):
    a monotone transform's values as the source values they stand for; None when the
    field is not judged. ``nulls``: a null partition value is in it."""
    dtype = X.dtype(pf.transform, source)
    if dtype is None or pf.transform == "void":
        return None
    if lower is None and upper is None:
        return P.ColumnStats(num_rows=1, null_count=1) if nulls else None
    null_count = 1 if nulls else 0
    if X.result_type(pf.transform, source) == "int":  # a day, as fastavro gives it
        lower, upper = ((v - T.EPOCH).days if isinstance(v, dt.date) else v
                        for v in (lower, upper))
    if X.is_range(pf.transform, source):
        low, high = X.span(pf.transform, source, lower), X.span(pf.transform, source, upper)
        lower, upper = low and low[0], high and high[1]
    return P.ColumnStats(num_rows=num_rows, min=lower, max=upper, null_count=null_count,
                         dtype=dtype)


def _summary_units(spec: Spec, types: dict[int, T.Type], summaries: Sequence[M.FieldSummary]
                   ) -> dict[str, P.ColumnStats]:
    unit: dict[str, P.ColumnStats] = {}
    for pf, s in zip(spec.fields, summaries, strict=False):
        source = types.get(pf.source_id)
        if source is None:
            continue
        rtype = X.result_type(pf.transform, source)
        found = _partition_stats(pf, source, T.from_bytes(rtype, s.lower),
                                 T.from_bytes(rtype, s.upper), nulls=bool(s.contains_null),
                                 num_rows=2)
        if found is not None:
            unit[X.key(pf)] = found
    return unit


def _value_unit(spec: Spec, types: dict[int, T.Type], values: Sequence[Any]
                ) -> dict[str, P.ColumnStats]:
    unit: dict[str, P.ColumnStats] = {}
    for pf, v in zip(spec.fields, values, strict=False):
        source = types.get(pf.source_id)
        if source is None:
            continue
        value = T.natural(X.result_type(pf.transform, source), v)
        found = _partition_stats(pf, source, value, value, nulls=value is None, num_rows=1)
        if found is not None:
            unit[X.key(pf)] = found
    return unit


def _bounds_unit(schema: Schema, columns: set[str], f: M.DataFile) -> dict[str, P.ColumnStats]:
    unit: dict[str, P.ColumnStats] = {}
    for name in columns:
        field = schema.by_name().get(name)
        if field is None or isinstance(field.type, dict):
            continue
        unit[name] = P.ColumnStats(
            num_rows=f.record_count, min=T.from_bytes(field.type, f.lower.get(field.id)),
            max=T.from_bytes(field.type, f.upper.get(field.id)),
            null_count=f.null_counts.get(field.id), dtype=field.dtype)
    return unit


def plan(table: Table, snapshot: Snapshot | None, schema: Schema, predicate: P.Pred,
         load: Load, run: Run, *, only: frozenset[str] = frozenset(),
         allowed: Sequence[str] = ()) -> Plan:
    """The scan; with ``only``, of those data files alone (a map batch's: one that is no
    data file of the snapshot is a :class:`RequestError` naming it). Every file is read
    only where the table's metadata puts its files, or under an ``allowed`` prefix
    (:mod:`.locations`); a manifest or file listed twice is read once."""
    counts = dict.fromkeys(("manifests", "manifests_read", "manifests_pruned",
                            "data_files", "files_pruned_by_partition",
                            "files_pruned_by_bounds", "bytes_pruned", "delete_files",
                            "delete_files_applied"), 0)
    result = Plan(table, snapshot, schema, [], counts)
    folders = L.roots(table.location, table.properties, allowed)
    if snapshot is None:
        _only_in(only, [], table, None)
        return result
    L.check(snapshot.manifest_list, folders, "manifest list", table.uri)
    manifests = M.read_manifest_list(load(snapshot.manifest_list), snapshot.manifest_list)
    manifests = list({m.path: m for m in reversed(manifests)}.values())[::-1]  # once each
    for m in manifests:
        L.check(m.path, folders, "manifest", table.uri)
    counts["manifests"] = len(manifests)
    types = schema.types_by_id()
    for s in table.schemas.values():  # a partition's source may be a dropped column
        types = {**s.types_by_id(), **types}
    projected = {sid: X.project(predicate, schema, spec.fields)
                 for sid, spec in table.specs.items()}
    # A delete manifest's files apply only in their own partitions (or everywhere, when
    # unpartitioned: no summary then rules anything out), so it is pruned alike.
    keep = [m.partitions is None or m.spec_id not in table.specs
            or P.may_match_each(projected[m.spec_id], [_summary_units(
                table.specs[m.spec_id], types, m.partitions)])[0] for m in manifests]
    counts["manifests_pruned"] = keep.count(False)
    read = [m for m, k in zip(manifests, keep, strict=True) if k]
    counts["manifests_read"] = len(read)
    entries: list[list[M.DataFile]] = run(lambda m: M.read_manifest(load(m.path), m), read)
    for f in (f for fs in entries for f in fs):
        L.check(f.path, folders, "data file" if f.content == M.DATA else "delete file",
                table.uri)
    live = _once(f for m, fs in zip(read, entries, strict=True) if m.content == M.DATA
                 for f in fs if f.content == M.DATA)
    if only:
        pruned = [m for m, k in zip(manifests, keep, strict=True) if not k and m.content == M.DATA]
        _only_in(only, live, table, snapshot, lambda: [
            f for fs in run(lambda m: M.read_manifest(load(m.path), m), pruned) for f in fs
            if f.content == M.DATA])
    data = [f for f in live if not only or f.path in only]
    deletes = _once(f for fs in entries for f in fs if f.content != M.DATA)
    counts["data_files"] = len(data) + (0 if only else sum(
        m.added_files + m.existing_files for m, k in zip(manifests, keep, strict=True) if not k))
    counts["delete_files"] = len(deletes)
    by_partition = [f for f in data if f.spec_id not in table.specs or P.may_match_each(
        projected[f.spec_id], [_value_unit(table.specs[f.spec_id], types, f.partition)])[0]]
    counts["files_pruned_by_partition"] = len(data) - len(by_partition)
    columns = P.columns_of(predicate)
    fits = P.may_match_each(predicate, [_bounds_unit(schema, columns, f)
                                        for f in by_partition]) if by_partition else []
    kept = [f for f, k in zip(by_partition, fits, strict=True) if k]
    counts["files_pruned_by_bounds"] = len(by_partition) - len(kept)
    counts["bytes_pruned"] = sum(f.size for f in data) - sum(f.size for f in kept)
    result.tasks = [_task(f, deletes, table) for f in kept]
    counts["delete_files_applied"] = len({d.path for t in result.tasks
                                          for d in (*t.position_deletes, *t.equality_deletes)})
    return result


def _once(files: Iterable[M.DataFile]) -> list[M.DataFile]:
    """Each file once (the first of its entries), in order: a file two manifests (or two
    entries) list is still one file of the snapshot."""
    return list({f.path: f for f in reversed(list(files))}.values())[::-1]


def _only_in(only: frozenset[str], live: Sequence[M.DataFile], table: Table,
             snapshot: Snapshot | None,
             more: Callable[[], Sequence[M.DataFile]] = list) -> None:
    """A map batch's files (``""``: none) are data files of its snapshot, looked for in the
    manifests the predicate pruned (``more``) only when not among ``live``."""
    missing = only - {""} - {f.path for f in live}
    if missing:
        missing -= {f.path for f in more()}
    if missing:
        snap = "no snapshot" if snapshot is None else f"snapshot {snapshot.snapshot_id}"
        raise RequestError(f"{sorted(missing)[0]} is no data file of {snap} of {table.uri}"
                           f" ({len(missing)} such file(s)); nothing was read", field="Items")


_FILE_PATH_ID = 2147483546  # the file_path column of a position delete file


def _task(f: M.DataFile, deletes: Sequence[M.DataFile], table: Table) -> Task:
    """The spec's rule: a position delete file applies to the data files of its partition
    (spec and values) of a data sequence number at most its own; an equality delete file
    to those of a lower one, in its partition or everywhere when its spec is
    unpartitioned."""
    positions, equalities = [], []
    for d in deletes:
        if d.content == M.POSITION_DELETES:
            if d.sequence_number < f.sequence_number or (d.spec_id, d.partition) != (
                    f.spec_id, f.partition):
                continue
            lo, hi = d.lower.get(_FILE_PATH_ID), d.upper.get(_FILE_PATH_ID)
            if lo is not None and lo == hi and lo != f.path.encode():
                continue
            positions.append(d)
        elif d.sequence_number > f.sequence_number:
            spec = table.specs.get(d.spec_id)
            if spec is None or not spec.fields or (d.spec_id == f.spec_id
                                                   and d.partition == f.partition):
                equalities.append(d)
    return Task(f, tuple(positions), tuple(equalities))
