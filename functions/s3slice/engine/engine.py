"""The engine: resolve a request's sources, read each object with the reader of its
format on a thread pool, and run the query's final step over their rows.

It knows nothing of Lambda. ``read`` answers a typed request with a polars frame and
honest stats; :func:`s3slice.answer.run.run` also writes the outputs and builds the response.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any

import polars as pl
import pyarrow as pa

from s3slice.core.cost import cost
from s3slice.core.errors import (
    ObjectChangedError,
    ObjectFormatError,
    ObjectNotFoundError,
    PreconditionFailed,
    QueryError,
    SchemaConflictError,
    contained,
)
from s3slice.core.model import InputSpec, ObjectRef, Request
from s3slice.core.settings import Settings
from s3slice.core.table import table_of
from s3slice.engine import sources as _sources
from s3slice.engine.lacking import read_all
from s3slice.engine.results import ReadResult, Stats
from s3slice.fetch.base import Fetcher
from s3slice.fetch.s3 import S3Fetcher
from s3slice.parquet.footer_cache import FOOTER_CACHE, FooterCache
from s3slice.parquet.reader import ParquetReader
from s3slice.query.analysis import Analysis, collect
from s3slice.query.analyzer import analyze, split_for
from s3slice.query.split.plan import Split, partial_step, used_split
from s3slice.query.sqlglot.sql_errors import sum_overflow
from s3slice.readers.base import (
    Copied,
    Io,
    ObjectReader,
    ObjectResult,
    PieceSink,
    Timings,
    no_span,
)
from s3slice.text.formats import input_for_key
from s3slice.text.reader import TextReader

logger = logging.getLogger("s3slice")


@contextlib.contextmanager
def _sums_named(analysis: Analysis) -> Iterator[None]:
    """polars' decimal-sum overflow named by the query's sums (:func:`sum_overflow`)."""
    try:
        yield
    except QueryError as e:
        named = sum_overflow(analysis.query.sql, str(e))
        if named is None:
            raise
        raise QueryError(named) from e


def _compatible(a: pl.DataType, b: pl.DataType) -> bool:
    return (a == b or a == pl.Null or b == pl.Null or (a.is_numeric() and b.is_numeric())
            or a.base_type() == b.base_type())


def _combine(pieces: list[tuple[str, pl.DataFrame]]) -> pl.DataFrame:
    """Rows of several objects as one frame: columns unified by name (a column an object
    lacks is null there; numbers widen to a common type); any other difference of type is
    a :class:`SchemaConflictError` naming both objects."""
    if len(pieces) == 1:
        return pieces[0][1]
    seen: dict[str, tuple[pl.DataType, str]] = {}
    for uri, frame in pieces:
        for name, dtype in frame.schema.items():
            first = seen.setdefault(name, (dtype, uri))
            if not _compatible(first[0], dtype):
                raise SchemaConflictError(
                    f"column {name!r} is {first[0]} in {first[1]} but {dtype} in {uri}")
            if first[0] == pl.Null:
                seen[name] = (dtype, uri)
    try:
        return pl.concat([f for _, f in pieces], how="diagonal_relaxed")
    except pl.exceptions.PolarsError as e:
        raise SchemaConflictError(f"the objects' schemas do not unify: {e}") from e


class Engine:
    """Reads objects for queries. One per process is enough; it is safe to reuse warm."""

    def __init__(self, settings: Settings, *, fetcher: Fetcher | None = None,
                 footer_cache: FooterCache | None = None,
                 deadline: Callable[[], None] | None = None) -> None:
        self.settings = settings
        self.fetcher: Fetcher = fetcher if fetcher is not None else S3Fetcher(settings)
        if footer_cache is None:
            footer_cache = FOOTER_CACHE
            footer_cache.resize(settings.footer_cache_mb * 1024 * 1024)
        self.footers = footer_cache
        self.deadline = deadline or (lambda: None)
        #: Opens a trace span per phase; the entry point sets it when tracing is on.
        self.span: Callable[[str], AbstractContextManager[None]] = no_span
        #: Wraps work handed to another thread (to carry the trace context there).
        self.bind: Callable[[Callable[..., Any]], Callable[..., Any]] = lambda fn: fn
        # The deadline is looked up at each check: the entry point sets one per invocation.
        self.io = Io(settings=settings, fetcher=self.fetcher, deadline=lambda: self.deadline())
        self.parquet = ParquetReader(self.io, self.footers)

    def reader(self, obj: ObjectRef, spec: InputSpec | None) -> ObjectReader:
        """The reader for ``obj``'s format (the request's, else its key's)."""
        effective = input_for_key(obj.key, spec)
        return self.parquet if effective.format == "parquet" else TextReader(self.io, effective)

    # ------------------------------------------------------------------ sources

    def resolve(self, request: Request) -> list[ObjectRef]:
        objects: list[ObjectRef] = []
        for src in request.sources:
            if isinstance(src, ObjectRef):
                objects.append(src)
            elif src.is_glob:
                pattern = _sources.glob_regex(src.key)
                found = [o for o in self.fetcher.list_objects(src.bucket, src.listed)
                         if pattern.match(o.key) and _sources.listable(o)]
                if not found:
                    raise ObjectNotFoundError("no objects match this pattern", uri=src.uri)
                objects.extend(found)
            elif src.is_prefix:
                found = [o for o in self.fetcher.list_objects(src.bucket, src.key)
                         if _sources.listable(o)]
                if not found:
                    raise ObjectNotFoundError("no objects under this prefix", uri=src.uri)
                objects.extend(found)
            else:
                objects.append(ObjectRef(bucket=src.bucket, key=src.key))
        return objects

    # ------------------------------------------------------------------- reading

    def read(self, request: Request, *,
             finish: Callable[[pl.LazyFrame], pl.LazyFrame] | None = None,
             sink: PieceSink | None = None) -> ReadResult:
        """Answer ``request``. ``finish``, when given, replaces the query's own final step
        over the objects' rows (a map batch computes its partial aggregates with it).

        With ``sink`` (only for a request that :meth:`streams`), the answer goes there a
        row group at a time, each piece through the query's final step, and is never held
        whole: the result's frame then holds no rows, only the answer's schema."""
        if (table := table_of(request.sources)) is not None:  # an Iceberg table (never streamed)
            # imported here: the Iceberg modules cost some 55 ms of a cold start otherwise
            from s3slice.engine.iceberg_source import read_table

            return read_table(self, request, table, finish=finish)
        started = time.perf_counter()
        before = self.fetcher.counters.snapshot()
        analysis = analyze(request.query)
        timings = Timings(span=self.span)
        with timings.phase("plan"):
            objects = self.resolve(request)
            work = self._prune_partitions(objects, analysis)

        def one(item: tuple[ObjectRef, Analysis]) -> ObjectResult:
            return self.read_object(item[0], item[1], timings, request.input, sink=sink)

        results = read_all(work, one, functools.partial(_map, self.bind),
                           functools.partial(_column_types, self, request.input))
        self.deadline()
        with timings.phase("execute"), _sums_named(analysis), contained(
                lambda text: QueryError(f"polars failed running the query: {text}"),
                native=(pl.exceptions.PolarsError,)):
            per_object = None
            if finish is not None:
                frame = collect(finish(_combine([(r.obj.uri, r.frame) for r in results]).lazy()))
            elif analysis.per_object and len(results) > 1:
                per_object = [(r.obj, collect(analysis.finish(r.frame.lazy())))
                              for r in results]
                frame = _combine([(o.uri, f) for o, f in per_object])
            else:
                combined = _combine([(r.obj.uri, r.frame) for r in results])
                split = _single_split(analysis, len(results), combined)
                if split is None:
                    frame = collect(analysis.finish(combined.lazy()))
                else:  # as a Distributed Map answers it: partials per object, then final
                    partials, at = [], 0
                    for r in results:
                        piece = combined.slice(at, r.frame.height).lazy()
                        partials.append(collect(partial_step(analysis, split, piece)))
                        at += r.frame.height
                    frame = collect(split.final(partials))
        stats, tiers = self._stats(results, before=before, started=started, timings=timings,
                                   pruned=len(objects) - sum(not a.pruned for _, a in work),
                                   rows_out=frame.height if sink is None else sink.rows)
        return ReadResult(frame=frame, stats=stats, objects=results, analysis=analysis,
                          per_object=per_object, requests_by_tier=tiers)

    def _stats(self, results: list[ObjectResult], *, before: tuple[int, int, dict[str, int]],
               started: float, timings: Timings, pruned: int, rows_out: int,
               ) -> tuple[Stats, dict[str, int]]:
        """A read's stats, and its requests by price tier, since ``before`` (the fetcher's
        counters) and ``started``."""
        requests, fetched, tiers = self.fetcher.counters.snapshot()
        tiers = {k: n - before[2].get(k, 0) for k, n in tiers.items()}
        total_ms = round((time.perf_counter() - started) * 1000, 1)
        strategies = sorted({r.strategy for r in results})
        stats = Stats(
            objects=len(results),
            objects_pruned=pruned,
            object_bytes=sum(r.size for r in results),
            row_groups=sum(r.row_groups for r in results),
            row_groups_read=sum(r.row_groups_read for r in results),
            rows_in=sum(r.rows_in for r in results),
            needed_bytes=sum(r.needed_bytes for r in results),
            bytes_fetched=fetched - before[1],
            requests=requests - before[0],
            strategy="+".join(strategies),
            strategy_inputs=results[0].inputs if len(results) == 1 else {
                "per_strategy": dict(collections.Counter(r.strategy for r in results))},
            rows_out=rows_out,
            timings_ms={**{k: round(v, 1) for k, v in timings.ms.items()}, "total": total_ms},
            cost=cost(self.settings, duration_ms=total_ms, requests=tiers),
        )
        return stats, tiers

    def copy(self, request: Request) -> tuple[ReadResult, Copied] | None:
        """``request``'s Parquet answer as a file of the object's column chunks copied
        without decoding (:meth:`ParquetReader.copy`), when the request only selects
        columns of one Parquet object: no filter, limit, path, partition column or SQL,
        and no rows asked inline; with the ``auto`` strategy only (another one is asked
        for by name). None when it does more, or the object cannot be copied (then
        :meth:`read` answers it)."""
        output = request.output
        if (output is None or output.format != "parquet" or request.return_rows
                or self.settings.strategy != "auto" or not self.streams(request)):
            return None
        analysis = analyze(request.query)
        if analysis.where is not None or analysis.sql is not None or analysis.paths:
            return None
        started = time.perf_counter()
        before = self.fetcher.counters.snapshot()
        timings = Timings(span=self.span)
        with timings.phase("plan"):
            [obj] = self.resolve(request)
            [(obj, analysis)] = self._prune_partitions([obj], analysis)
        if analysis.partitions or analysis.fields():
            return None
        codec = output.compression.upper() if output.compression_given else None
        try:
            with _unreadable(obj.uri):
                copied = self.parquet.copy(obj, analysis, timings, codec=codec)
        except PreconditionFailed:  # changed mid-read: the read restarts it
            return None
        if copied is None:
            return None
        stats, tiers = self._stats([copied.result], before=before, started=started,
                                   timings=timings, pruned=0, rows_out=copied.rows)
        return ReadResult(frame=copied.result.frame, stats=stats, objects=[copied.result],
                          analysis=analysis, per_object=None, requests_by_tier=tiers), copied

    def _prune_partitions(self, objects: list[ObjectRef], analysis: Analysis,
                          ) -> list[tuple[ObjectRef, Analysis]]:
        """Each object to read with its own analysis (its partition values). Objects whose
        partition values rule out every row are dropped before any read; when that is all
        of them, the first is kept to give the result its schema, reading no rows."""
        values, types = _sources.partitions(objects)
        if not types:
            return [(o, analysis) for o in objects]
        work = [(o, analysis.for_object(v, types)) for o, v, k in zip(objects, values,
                _sources.may_match_each(analysis.predicate, values, types), strict=True) if k]
        if not work:
            work = [(objects[0], analysis.for_object(values[0], types, pruned=True))]
        return work

    def streams(self, request: Request) -> bool:
        """Whether ``request`` can be answered a row group at a time (:meth:`read` with a
        sink): one Parquet object, named exactly, and a query that does not combine rows
        (a projection, a filter, row-wise expressions)."""
        [*sources] = request.sources
        if len(sources) != 1 or (not isinstance(sources[0], ObjectRef)
                                 and (sources[0].is_glob or sources[0].is_prefix)):
            return False
        if input_for_key(sources[0].key, request.input).format != "parquet":
            return False
        analysis = analyze(request.query)
        try:
            combines = split_for(analysis) is not None
        except QueryError:  # combines, with no exact split: answered whole
            combines = True
        return not combines and analysis.query.limit is None and analysis.early_limit is None

    def read_object(self, obj: ObjectRef, analysis: Analysis, timings: Timings,
                    spec: InputSpec | None = None, *,
                    sink: PieceSink | None = None) -> ObjectResult:
        """Read one object; an ETag change mid-read restarts it once, trusting nothing the
        caller knew of it (an event's size and ETag describe the object it announced).

        Whatever a native library raises or panics with while reading it is an
        :class:`ObjectFormatError` naming the object.
        """
        reader = self.reader(obj, spec)

        def finished(piece: pl.DataFrame) -> None:
            assert sink is not None
            # inside the object's read, but the query's failure: never the object's
            with contained(lambda text: QueryError(f"polars failed running the query: {text}"),
                           native=(pl.exceptions.PolarsError,)):
                frame = collect(analysis.finish(piece.lazy()))
            sink.write(frame)

        def attempt(o: ObjectRef) -> ObjectResult:
            with _unreadable(o.uri):
                if sink is not None:
                    sink.reset()
                    return self.parquet.read(o, analysis, timings, sink=finished)
                return reader.read(o, analysis, timings)

        try:
            return attempt(obj)
        except PreconditionFailed:
            logger.warning("object changed during the read; restarting", extra={"uri": obj.uri})
        try:
            return attempt(dataclasses.replace(obj, etag=None, size=None))
        except PreconditionFailed:
            raise ObjectChangedError("the object changed twice while being read",
                                     uri=obj.uri) from None


def _map(bind: Callable[[Callable[..., Any]], Callable[..., Any]], fn: Callable[[Any], Any],
         items: list[Any]) -> list[Any]:
    """``fn`` of each item, up to 8 at once (each bound by ``bind``), in order."""
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(min(len(items), 8), thread_name_prefix="s3slice-obj") as pool:
        return list(pool.map(bind(fn), items))


def _column_types(engine: Engine, spec: InputSpec | None, obj: ObjectRef,
                  names: Sequence[str]) -> dict[str, pl.DataType]:
    """The types a Parquet object's footer gives those of ``names`` it has."""
    if engine.reader(obj, spec) is not engine.parquet:
        return {}
    with _unreadable(obj.uri):
        return engine.parquet.column_types(obj, names)


def _unreadable(uri: str) -> AbstractContextManager[None]:
    """What a native library raises or panics with while reading the object at ``uri``,
    as an :class:`ObjectFormatError` naming it."""
    return contained(lambda text: ObjectFormatError(f"unreadable: {text}", uri=uri),
                     native=(pl.exceptions.PolarsError, pa.ArrowException))


def _single_split(analysis: Analysis, objects: int, rows: pl.DataFrame) -> Split | None:
    """The split a read of ``objects`` shares with the Distributed Map (:func:`used_split`);
    None when it has none, or cannot be split exactly (one process answers it whole)."""
    try:
        return used_split(analysis, split_for(analysis), objects, rows)
    except QueryError:
        return None
