"""An Iceberg table as a request's source (``{"iceberg": ...}``): its scan planned from
metadata (:mod:`s3slice.iceberg.plan`), the planned data files read whole, mapped to the
table's schema by field id, their deletes applied, and the query run over their rows."""

from __future__ import annotations

import dataclasses
import functools
import io
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import polars as pl

from s3slice.core.errors import (
    ObjectChangedError,
    ObjectFormatError,
    PreconditionFailed,
    QueryError,
    RequestError,
    contained,
)
from s3slice.core.model import ObjectRef, Request
from s3slice.core.table import TableSource
from s3slice.engine.results import ReadResult
from s3slice.iceberg import datafile as D
from s3slice.iceberg import glue, metadata
from s3slice.iceberg.metadata import Field
from s3slice.iceberg.plan import Load, Plan, Task, plan
from s3slice.query.analysis import Analysis, collect
from s3slice.query.analyzer import analyze
from s3slice.readers.base import ObjectResult, Timings

#: The engine (:class:`s3slice.engine.engine.Engine`, which imports this module).
Engine = Any
#: The first GET of a file: small files come whole in it.
FIRST_GET = 8 << 20
_SCHEMES = ("s3://", "s3a://", "s3n://")


class Remote(io.RawIOBase):
    """A file in S3 as pyarrow reads it: the last bytes (the footer) from the first GET,
    any other range fetched when it is read (only the column chunks a read needs)."""

    def __init__(self, engine: Engine, obj: ObjectRef, size: int, etag: str | None,
                 tail: bytes) -> None:
        self.engine, self.obj, self.size, self.etag, self.tail = engine, obj, size, etag, tail
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else (
            self.size + offset)
        return self.pos

    def readinto(self, b: Any) -> int:
        end = min(self.size, self.pos + len(b))
        if end <= self.pos:
            return 0
        held = self.size - len(self.tail)
        if self.pos >= held:
            data = self.tail[self.pos - held:end - held]
        else:
            out = bytearray(end - self.pos)

            def sink(at: int, part: memoryview) -> None:
                out[at - self.pos:at - self.pos + len(part)] = part
            self.engine.io.fetch(dataclasses.replace(self.obj, size=self.size),
                                 [(self.pos, end)], self.etag, sink)
            data = bytes(out)
        b[:len(data)] = data
        self.pos += len(data)
        return len(data)


def _location(uri: str) -> ObjectRef:
    scheme = next((s for s in _SCHEMES if uri.startswith(s)), None)
    if scheme is None:
        raise ObjectFormatError("only files in S3 (s3://) are read", uri=uri)
    bucket, _, key = uri[len(scheme):].partition("/")
    return ObjectRef(bucket=bucket, key=key)


def opener(engine: Engine) -> Callable[[str], bytes | Remote]:
    """A file's bytes when the first GET holds it whole, else a :class:`Remote`."""
    def open_(uri: str) -> bytes | Remote:
        obj = _location(uri)
        engine.deadline()
        tail = engine.fetcher.get_tail(obj, FIRST_GET)
        assert tail is not None
        if tail.size <= len(tail.data):
            whole: bytes = tail.data
            return whole
        return Remote(engine, obj, tail.size, tail.etag, tail.data)
    return open_


def loader(engine: Engine) -> Load:
    """A file's bytes, whole (metadata, manifests, delete files)."""
    open_ = opener(engine)

    def load(uri: str) -> bytes:
        found = open_(uri)
        return found if isinstance(found, bytes) else found.read()
    return load


def plan_table(engine: Engine, source: TableSource, analysis: Analysis) -> Plan:
    """The scan of ``source``'s snapshot that ``analysis`` needs, from metadata alone."""
    load = loader(engine)
    uri = source.table
    if source.glue is not None:
        uri = glue.metadata_location(source.glue)
    table = metadata.parse_metadata(load(uri), uri)
    snapshot, schema = metadata.select(table, snapshot_id=source.snapshot_id,
                                       as_of_ms=source.as_of_ms)
    return plan(table, snapshot, schema, analysis.predicate, load,
                functools.partial(_run, engine), only=frozenset(source.files),
                allowed=engine.settings.iceberg_locations)


def plan_items(engine: Engine, source: TableSource, request: Request
               ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A Distributed Map's items for ``source`` (each a data file the plan kept, with
    the exact snapshot it belongs to, so every batch reads the same one) and the plan's
    stats (files and bytes pruned by metadata)."""
    p = plan_table(engine, source, analyze(request.query))
    snapshot = None if p.snapshot is None else p.snapshot.snapshot_id
    items = [{"iceberg": source.table if source.glue is None else p.table.uri,
              "snapshot_id": snapshot, "file": t.file.path, "size": t.file.size,
              "deletes": len(t.position_deletes) + len(t.equality_deletes)}
             for t in p.tasks]
    if not items:  # one batch of no file: the answer over no rows (a count of 0)
        items = [{"iceberg": source.table if source.glue is None else p.table.uri,
                  "snapshot_id": snapshot, "file": "", "size": 0, "deletes": 0}]
    return items, p.stats()


def _run(engine: Engine, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    """``fn`` of each item, up to 8 at once (each bound by the engine), in order."""
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(min(len(items), 8), thread_name_prefix="s3slice-table") as pool:
        return list(pool.map(engine.bind(fn), items))


def _deletes(engine: Engine, p: Plan, fields: dict[int, Field], load: Load
             ) -> dict[str, pl.DataFrame]:
    """Every delete file the plan applies, read once: positions as (file_path, pos),
    equality deletes as their ``__eq<id>`` columns."""
    files = {d.path: d for t in p.tasks for d in (*t.position_deletes, *t.equality_deletes)}

    def one(d: Any) -> pl.DataFrame:
        data = load(d.path)
        if d.content == 1:
            return D.positions_frame(data, d.path)
        return D.equality_rows(data, d.path, d, fields)
    return dict(zip(files, _run(engine, one, list(files.values())), strict=True))


def read_table(engine: Engine, request: Request, source: TableSource, *,
               finish: Callable[[pl.LazyFrame], pl.LazyFrame] | None = None) -> ReadResult:
    if request.input is not None and request.input.format != "parquet":
        raise RequestError(f"an Iceberg table's data files are Parquet, not "
                           f"{request.input.format}", field="input")
    started = time.perf_counter()
    before = engine.fetcher.counters.snapshot()
    analysis = analyze(request.query)
    timings = Timings(span=engine.span)
    with timings.phase("plan"):
        p = plan_table(engine, source, analysis)
    schema = p.schema
    names = analysis.needed_columns([f.name for f in schema.fields], source=source.table)
    fields: dict[int, Field] = {}
    for s in (*p.table.schemas.values(), schema):
        fields.update(s.by_id())
    load, open_ = loader(engine), opener(engine)
    deletes = _deletes(engine, p, fields, load)

    def one(task: Task) -> ObjectResult:
        extra = sorted({i for d in task.equality_deletes for i in d.equality_ids})
        data = open_(task.file.path)
        size = len(data) if isinstance(data, bytes) else data.size
        with timings.phase("execute"):
            source = data if isinstance(data, bytes) else io.BufferedReader(data)
            try:
                frame, groups, read = D.read_rows(
                    source, task.file.path, schema, names, [fields[i] for i in extra],
                    analysis.predicate, None if isinstance(data, bytes) else D.footer(data.tail),
                    mapping=p.table.name_mapping, constants=_identity_values(p, task))
            except PreconditionFailed:  # its ETag changed between two of its range reads
                raise ObjectChangedError("the data file changed while it was read (an Iceberg "
                                         "data file is never rewritten)",
                                         uri=task.file.path) from None
            frame = D.apply_deletes(
                frame, [D.positions_of(deletes[d.path], task.file.path)
                        for d in task.position_deletes],
                [deletes[d.path] for d in task.equality_deletes])
            rows_in = frame.height
            with _query_failure():
                frame = collect(analysis.prefilter(frame.lazy()))
        bucket, _, key = task.file.path.partition("://")[2].partition("/")
        return ObjectResult(obj=ObjectRef(bucket=bucket, key=key, size=size), frame=frame,
                            size=size, row_groups=groups, row_groups_read=read, rows_in=rows_in,
                            needed_bytes=size, strategy="iceberg", inputs={})

    results: list[ObjectResult] = _run(engine, one, p.tasks)
    engine.deadline()
    with timings.phase("execute"), _query_failure():
        frames: Sequence[pl.DataFrame] = [r.frame for r in results] or [collect(
            analysis.prefilter(pl.DataFrame(schema=schema.polars()).select(names).lazy()))]
        combined = pl.concat(frames, how="vertical_relaxed", rechunk=True)
        frame = collect((finish or analysis.finish)(combined.lazy()))
    counts = p.counts
    stats, tiers = engine._stats(
        results, before=before, started=started, timings=timings,
        pruned=counts["files_pruned_by_partition"] + counts["files_pruned_by_bounds"],
        rows_out=frame.height)
    stats = dataclasses.replace(stats, table=p.stats())
    return ReadResult(frame=frame, stats=stats, objects=results, analysis=analysis,
                      per_object=None, requests_by_tier=tiers)


def _identity_values(p: Plan, task: Task) -> dict[int, Any]:
    """The data file's identity partition values by their source field's id (for a
    column the file lacks)."""
    spec = p.table.specs.get(task.file.spec_id)
    if spec is None or len(spec.fields) != len(task.file.partition):
        return {}
    return {f.source_id: value for f, value in zip(spec.fields, task.file.partition, strict=True)
            if f.transform == "identity" and value is not None}


def _query_failure() -> Any:
    return contained(lambda text: QueryError(f"polars failed running the query: {text}"),
                     native=(pl.exceptions.PolarsError,))
