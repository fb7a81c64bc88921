"""The engine: plan, fetch, execute (and, in :mod:`._output`, write) for each object.

It knows nothing of Lambda. ``read`` answers a request with a polars frame and honest
stats; ``run`` also writes the outputs and builds the response.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from s3slice._arrow import compatible, foreign_time_zones, to_polars
from s3slice._cost import cost
from s3slice._errors import (
    ObjectChangedError,
    ObjectFormatError,
    ObjectNotFoundError,
    PreconditionFailed,
    QueryError,
    SchemaConflictError,
    contained,
    first_line,
    is_native_panic,
)
from s3slice._model import ObjectRef, Request, parse_request
from s3slice._settings import Settings
from s3slice.engine import sources as _sources
from s3slice.fetch.image import FileImage, Image, MemoryImage
from s3slice.fetch.s3 import Fetcher, S3Fetcher
from s3slice.parquet import bloom as _bloom
from s3slice.parquet import pages as _pages
from s3slice.parquet import plan as _plan
from s3slice.query.analysis import Analysis, analyze, collect
from s3slice.query.split import Split, partial_step, split_for
from s3slice.text.formats import (
    InputSpec,
    collect_text,
    decompress,
    decompressed_file,
    detect_compression,
    input_for_key,
    read_text,
    scan_text,
    streamable,
)

logger = logging.getLogger("s3slice")

PHASES = ("plan", "fetch", "execute", "write")


class FooterCache:
    """Parsed footers across warm invocations, keyed by (bucket, key, ETag), bounded in bytes.

    The newest ETag seen of each key is remembered with it, so a read that knows no ETag
    (a direct invoke) can ask S3 whether the object is still that one (a suffix GET with
    ``If-None-Match``: no bytes when it is) instead of parsing its footer again.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: collections.OrderedDict[tuple[str, str, str], _plan.Footer] = (
            collections.OrderedDict())
        self._newest: dict[tuple[str, str], str] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0

    def resize(self, max_bytes: int) -> None:
        with self._lock:
            self.max_bytes = max_bytes
            self._evict()

    def _evict(self) -> None:
        while self._bytes > self.max_bytes:
            (bucket, key, etag), old = self._items.popitem(last=False)
            self._bytes -= old.nbytes
            if self._newest.get((bucket, key)) == etag:
                del self._newest[(bucket, key)]

    def newest(self, obj: ObjectRef) -> tuple[str, _plan.Footer] | None:
        """The newest ETag cached for ``obj``'s key, and its footer."""
        with self._lock:
            etag = self._newest.get((obj.bucket, obj.key))
            footer = None if etag is None else self._items.get((obj.bucket, obj.key, etag))
        return None if etag is None or footer is None else (etag, footer)

    def get(self, obj: ObjectRef, etag: str | None) -> _plan.Footer | None:
        if not etag:
            return None
        with self._lock:
            footer = self._items.get((obj.bucket, obj.key, etag))
            if footer is not None:
                self._items.move_to_end((obj.bucket, obj.key, etag))
                self.hits += 1
            return footer

    def put(self, obj: ObjectRef, etag: str | None, footer: _plan.Footer) -> None:
        if not etag or footer.nbytes > self.max_bytes:
            return
        key = (obj.bucket, obj.key, etag)
        with self._lock:
            self._newest[(obj.bucket, obj.key)] = etag
            if key in self._items:
                return
            self._items[key] = footer
            self._bytes += footer.nbytes
            self._evict()

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._newest.clear()
            self._bytes = 0


#: The process's footer cache, sized by ``S3SLICE_FOOTER_CACHE_MB`` when an engine is made.
FOOTER_CACHE = FooterCache(64 * 1024 * 1024)


def _no_span(name: str) -> AbstractContextManager[None]:
    return nullcontext()


@dataclasses.dataclass
class Timings:
    """Milliseconds per phase, summed over objects; each phase may also open a trace span."""

    ms: dict[str, float] = dataclasses.field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    span: Callable[[str], AbstractContextManager[None]] = _no_span
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            with self.span(name):
                yield
        finally:
            with self._lock:
                self.ms[name] += (time.perf_counter() - t0) * 1000


@dataclasses.dataclass(kw_only=True)
class ObjectResult:
    obj: ObjectRef
    frame: pl.DataFrame  # after the per-piece step (row filter, projection)
    size: int
    row_groups: int
    row_groups_read: int
    rows_in: int  # rows in the row groups read (before the row filter)
    needed_bytes: int
    strategy: str
    inputs: dict[str, Any]


@dataclasses.dataclass(kw_only=True)
class ReadResult:
    """What ``read`` returns: the query's result and how it was obtained."""

    frame: pl.DataFrame
    stats: dict[str, Any]
    objects: list[ObjectResult]
    analysis: Analysis
    per_object: list[tuple[ObjectRef, pl.DataFrame]] | None = None
    #: The read's requests by S3 price tier (``get``, ``put``, ``free``), for its cost.
    requests_by_tier: dict[str, int] = dataclasses.field(default_factory=dict)


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
        self.span: Callable[[str], AbstractContextManager[None]] = _no_span
        #: Wraps work handed to another thread (to carry the trace context there).
        self.bind: Callable[[Callable[..., Any]], Callable[..., Any]] = lambda fn: fn

    # ------------------------------------------------------------------ sources

    def resolve(self, request: Request) -> list[ObjectRef]:
        objects: list[ObjectRef] = []
        for src in request.sources:
            if isinstance(src, ObjectRef):
                objects.append(src)
            elif src.is_glob:
                pattern = _sources.glob_regex(src.key)
                found = [o for o in self.fetcher.list_objects(src.bucket, src.listed)
                         if pattern.match(o.key) and not o.key.endswith("/") and o.size != 0]
                if not found:
                    raise ObjectNotFoundError("no objects match this pattern", uri=src.uri)
                objects.extend(found)
            elif src.is_prefix:
                found = [o for o in self.fetcher.list_objects(src.bucket, src.key)
                         if not o.key.endswith("/") and o.size != 0]
                if not found:
                    raise ObjectNotFoundError("no objects under this prefix", uri=src.uri)
                objects.extend(found)
            else:
                objects.append(ObjectRef(bucket=src.bucket, key=src.key))
        return objects

    # ------------------------------------------------------------------- reading

    def read(self, request: Request | Mapping[str, Any], *,
             finish: Callable[[pl.LazyFrame], pl.LazyFrame] | None = None) -> ReadResult:
        """Answer ``request``. ``finish``, when given, replaces the query's own final step
        over the objects' rows (a map batch computes its partial aggregates with it)."""
        if not isinstance(request, Request):
            request = parse_request(request)
        started = time.perf_counter()
        before = self.fetcher.counters.snapshot()
        analysis = analyze(request.query)
        timings = Timings(span=self.span)
        with timings.phase("plan"):
            objects = self.resolve(request)
            work = self._prune_partitions(objects, analysis)

        def one(item: tuple[ObjectRef, Analysis]) -> ObjectResult:
            return self.read_object(item[0], item[1], timings, request.input)

        workers = max(1, min(len(work), 8))
        if workers == 1:
            results = [one(item) for item in work]
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix="s3slice-obj") as pool:
                results = list(pool.map(self.bind(one), work))
        self.deadline()
        with timings.phase("execute"), contained(
                lambda text: QueryError(f"polars failed running the query: {text}")):
            per_object = None
            if finish is not None:
                frame = collect(finish(_combine([(r.obj.uri, r.frame) for r in results]).lazy()))
            elif analysis.per_object and len(results) > 1:
                per_object = [(r.obj, collect(analysis.finish(r.frame.lazy())))
                              for r in results]
                frame = _combine([(o.uri, f) for o, f in per_object])
            else:
                combined = _combine([(r.obj.uri, r.frame) for r in results])
                split = _single_split(analysis) if len(results) > 1 else None
                if split is None:
                    frame = collect(analysis.finish(combined.lazy()))
                else:  # as a Distributed Map answers it: partials per object, then final
                    partials, at = [], 0
                    for r in results:
                        piece = combined.slice(at, r.frame.height).lazy()
                        partials.append(collect(partial_step(analysis, split, piece)))
                        at += r.frame.height
                    frame = collect(split.final(partials))
        requests, fetched, tiers = self.fetcher.counters.snapshot()
        tiers = {k: n - before[2].get(k, 0) for k, n in tiers.items()}
        total_ms = round((time.perf_counter() - started) * 1000, 1)
        strategies = sorted({r.strategy for r in results})
        stats: dict[str, Any] = {
            "objects": len(results),
            "objects_pruned": len(objects) - sum(not a.pruned for _, a in work),
            "object_bytes": sum(r.size for r in results),
            "row_groups": sum(r.row_groups for r in results),
            "row_groups_read": sum(r.row_groups_read for r in results),
            "rows_in": sum(r.rows_in for r in results),
            "needed_bytes": sum(r.needed_bytes for r in results),
            "bytes_fetched": fetched - before[1],
            "requests": requests - before[0],
            "strategy": "+".join(strategies),
            "strategy_inputs": results[0].inputs if len(results) == 1 else {
                "per_strategy": dict(collections.Counter(r.strategy for r in results))},
            "rows_out": frame.height,
            "timings_ms": {**{k: round(v, 1) for k, v in timings.ms.items()},
                           "total": total_ms},
            "cost": cost(self.settings, duration_ms=total_ms, requests=tiers),
        }
        return ReadResult(frame=frame, stats=stats, objects=results, analysis=analysis,
                          per_object=per_object, requests_by_tier=tiers)

    def _prune_partitions(self, objects: list[ObjectRef], analysis: Analysis,
                          ) -> list[tuple[ObjectRef, Analysis]]:
        """Each object to read with its own analysis (its partition values). Objects whose
        partition values rule out every row are dropped before any read; when that is all
        of them, the first is kept to give the result its schema, reading no rows."""
        values, types = _sources.partitions(objects)
        if not types:
            return [(o, analysis) for o in objects]
        work = [(o, analysis.for_object(v, types)) for o, v in zip(objects, values, strict=True)
                if _sources.may_match(analysis.predicate, v)]
        if not work:
            work = [(objects[0], analysis.for_object(values[0], types, pruned=True))]
        return work

    def read_object(self, obj: ObjectRef, analysis: Analysis, timings: Timings,
                    spec: InputSpec | None = None) -> ObjectResult:
        """Read one object; an ETag change mid-read restarts it once, trusting nothing the
        caller knew of it (an event's size and ETag describe the object it announced).

        Whatever a native library raises or panics with while reading it is an
        :class:`ObjectFormatError` naming the object.
        """
        effective = input_for_key(obj.key, spec)

        def attempt(o: ObjectRef) -> ObjectResult:
            with contained(lambda text: ObjectFormatError(f"unreadable: {text}", uri=o.uri),
                           native=(pl.exceptions.PolarsError, pa.ArrowException)):
                if effective.format != "parquet":
                    return self._read_text(o, analysis, effective, timings)
                return self._read_parquet(o, analysis, timings)

        try:
            return attempt(obj)
        except PreconditionFailed:
            logger.warning("object changed during the read; restarting", extra={"uri": obj.uri})
        try:
            return attempt(dataclasses.replace(obj, etag=None, size=None))
        except PreconditionFailed:
            raise ObjectChangedError("the object changed twice while being read",
                                     uri=obj.uri) from None

    def _read_text(self, obj: ObjectRef, analysis: Analysis, spec: InputSpec,
                   timings: Timings) -> ObjectResult:
        """CSV/JSON: the whole object in parallel parts (the first GET learns the size and
        brings the tail). One larger than that first GET is scanned lazily, the filter
        applied as it is parsed: from memory when it is at most a quarter of the memory
        budget (polars parses an in-memory source on every core), else from a file in /tmp
        when there is room for it (compressed content is decompressed into /tmp by
        streaming). A small one, a scan range or a JSON document is parsed whole."""
        s = self.settings
        self.deadline()
        with timings.phase("fetch"):
            tail = self.fetcher.get_tail(obj, s.footer_size)
        assert tail is not None  # asked with no If-None-Match
        size = tail.size
        tmp_free = s.tmp_free_bytes()
        lazy = len(tail.data) < size and streamable(spec)
        to_tmp = lazy and size > s.memory_budget_bytes // 4 and size * 4 <= tmp_free
        image: Image = FileImage(size, s.tmp_dir) if to_tmp else MemoryImage(size)
        try:
            with timings.phase("fetch"):
                head = size - len(tail.data)
                image.write(head, memoryview(tail.data))
                if head:
                    self.deadline()
                    self.fetcher.get_ranges(obj, _plan.parts([(0, head)], s),
                                            etag=tail.etag, sink=image.write,
                                            concurrency=s.max_concurrency)
            self.deadline()
            with timings.phase("execute"):
                with image.source() as f:
                    compression = (detect_compression(_read_at(f, 0, min(size, 4)))
                                   if spec.compression == "auto" else spec.compression)
                lazy = lazy and (compression == "none" or size * 4 <= tmp_free)
                if lazy:
                    with decompressed_file(image.reader_source(), compression, s.tmp_dir,
                                           uri=obj.uri) as source:
                        lf = scan_text(source, spec, uri=obj.uri)
                        analysis.needed_columns(lf.collect_schema().names(), source=obj.uri)
                        rows_in = int(collect_text(lf.select(pl.len()), spec,
                                                   uri=obj.uri).item())
                        frame = collect_text(analysis.prefilter(lf), spec, uri=obj.uri)
                else:
                    with image.source() as f:
                        raw = _read_at(f, 0, size)
                    data = read_text(decompress(raw, compression, uri=obj.uri), spec,
                                     uri=obj.uri)
                    analysis.needed_columns(data.columns, source=obj.uri)
                    rows_in = data.height
                    frame = collect(analysis.prefilter(data.lazy()))
        finally:
            image.close()
        return ObjectResult(obj=obj, frame=frame, size=size, row_groups=0, row_groups_read=0,
                            rows_in=rows_in, needed_bytes=size, strategy="whole-text",
                            inputs={"object_bytes": size, "format": spec.format,
                                    "compression": compression, "streamed": lazy,
                                    "image": "tmp" if to_tmp else "memory"})

    def _footer(self, obj: ObjectRef) -> tuple[_plan.Footer, str | None, Image | None, str]:
        """The object's footer, its ETag, and (for small objects) the whole object."""
        s = self.settings
        cached = self.footers.get(obj, obj.etag)
        if cached is not None and (obj.size is None or obj.size == cached.size):
            return cached, obj.etag, None, "cache"
        if obj.size is not None and obj.size <= s.small_object_size:
            # Small and of known size: the whole object in one GET, no footer round trip.
            image = MemoryImage(obj.size)
            try:
                self.fetcher.get_ranges(obj, [(0, obj.size)], etag=obj.etag,
                                        sink=_magic_checked(image.write, obj.uri),
                                        concurrency=1)
                with image.source() as f:
                    tail = _read_at(f, max(0, obj.size - s.footer_size),
                                    min(obj.size, s.footer_size))

                def held(start: int, end: int) -> bytes:
                    with image.source() as f:
                        return _read_at(f, start, end - start)
                footer = _footer_of(tail, obj.size, held, uri=obj.uri, keep_before=0)
            except BaseException:
                image.close()
                raise
            return footer, obj.etag, image, "whole-object GET"
        known = self.footers.newest(obj) if obj.etag is None else None
        got = self.fetcher.get_tail(obj, s.footer_size,
                                    if_none_match=known[0] if known else None)
        if got is None:  # the object is still the one whose footer is cached
            assert known is not None
            if obj.size is None or obj.size == known[1].size:
                return known[1], known[0], None, "cache (revalidated)"
            got = self.fetcher.get_tail(obj, s.footer_size)
            assert got is not None

        def fetched(start: int, end: int) -> bytes:
            parts: list[tuple[int, bytes]] = []
            self.fetcher.get_ranges(obj, [(start, end)], etag=got.etag, concurrency=1,
                                    sink=lambda at, data: parts.append((at, bytes(data))))
            return b"".join(data for _, data in sorted(parts))
        footer = _footer_of(got.data, got.size, fetched, uri=obj.uri,
                            keep_before=s.footer_size)
        self.footers.put(obj, got.etag, footer)
        return footer, got.etag, None, "suffix GET"

    def choose(self, plan: _plan.Plan) -> tuple[str, dict[str, Any]]:
        """The strategy for a plan, and the inputs it was chosen from."""
        s = self.settings
        size = plan.footer.size
        needed = plan.needed_bytes
        budget = s.memory_budget_bytes
        tmp_free = s.tmp_free_bytes()
        inputs: dict[str, Any] = {
            "object_bytes": size, "needed_bytes": needed, "memory_budget_bytes": budget,
            "tmp_free_bytes": tmp_free, "memory_mb": s.memory_mb, "forced": s.strategy,
            "whole_object_ratio": s.whole_object_ratio}
        wants_whole = size > 0 and needed / size >= s.whole_object_ratio
        if s.strategy == "ranges" or (s.strategy == "auto" and not wants_whole
                                      and needed <= budget):
            return "ranges", inputs
        if s.strategy in ("whole", "auto") and (s.strategy == "whole" or wants_whole):
            if size <= budget:
                return "whole", inputs
            if size <= tmp_free * 0.9:
                return "whole-tmp", inputs
        if s.strategy == "auto" and needed <= budget:
            return "ranges", inputs
        return "batches", inputs

    def _read_parquet(self, obj: ObjectRef, analysis: Analysis,
                      timings: Timings) -> ObjectResult:
        s = self.settings
        self.deadline()
        with timings.phase("plan"):
            footer, etag, whole, footer_via = self._footer(obj)
        try:
            with timings.phase("plan"):
                columns = analysis.needed_columns(footer.schema_names, source=obj.uri)
                plan = _plan.plan_parquet(footer, columns=columns,
                                          predicate=analysis.predicate, uri=obj.uri,
                                          fields=analysis.fields())
                if analysis.pruned:
                    plan = plan.keep(())
                # A whole object is already held: its Bloom filters could save no bytes.
                plan, bloom = ((plan, None) if whole is not None
                               else self._bloom_prune(obj, footer, plan, analysis, etag))
                inputs: dict[str, Any]
                if whole is not None:
                    strategy, inputs = "single", {"object_bytes": footer.size,
                                                  "needed_bytes": plan.needed_bytes}
                else:
                    strategy, inputs = self.choose(plan)
                inputs["footer"] = footer_via
                if bloom is not None:
                    inputs["bloom_filters"] = bloom
            held = (footer.size - footer.length, footer.size)
            pages = (self._page_plan(obj, footer, plan, analysis, etag, inputs, timings)
                     if strategy == "ranges" and not analysis.pruned else None)
            if pages is not None:
                frame = self._read_pages(obj, footer, plan, pages, analysis, etag, timings)
                inputs["decoder"] = "pyarrow-pages"
                return ObjectResult(obj=obj, frame=frame, size=footer.size,
                                    row_groups=footer.metadata.num_row_groups,
                                    row_groups_read=len(pages.row_groups), rows_in=pages.rows,
                                    needed_bytes=pages.needed_bytes, strategy=strategy,
                                    inputs=inputs)
            if strategy == "batches":
                frame = self._read_batches(obj, plan, analysis, etag, timings)
                inputs["decoder"] = "pyarrow"
            else:
                image = whole
                if image is None:
                    image = (FileImage(footer.size, s.tmp_dir) if strategy == "whole-tmp"
                             else MemoryImage(footer.size))
                try:
                    if whole is None:
                        image.write(footer.data_end, memoryview(footer.raw))
                        with timings.phase("fetch"):
                            ranges = (_plan.parts(_plan.subtract([(0, footer.size)], held), s)
                                      if strategy.startswith("whole")
                                      else plan.fetch_ranges(s, held=held))
                            self.deadline()
                            self.fetcher.get_ranges(obj, ranges, etag=etag,
                                                    sink=_magic_checked(image.write, obj.uri),
                                                    concurrency=s.max_concurrency)
                    with timings.phase("execute"):
                        frame, inputs["decoder"] = self._decode(
                            obj, image, plan, plan.row_groups, analysis,
                            complete=whole is not None or strategy.startswith("whole"))
                finally:
                    image.close()
        except BaseException:
            if whole is not None:
                whole.close()
            raise
        return ObjectResult(obj=obj, frame=frame, size=footer.size,
                            row_groups=footer.metadata.num_row_groups,
                            row_groups_read=len(plan.row_groups),
                            rows_in=sum(footer.metadata.row_group(g).num_rows
                                        for g in plan.row_groups),
                            needed_bytes=plan.needed_bytes,
                            strategy=strategy, inputs=inputs)

    def _metadata_ranges(self, obj: ObjectRef, footer: _plan.Footer, ranges: Iterable[_plan.Range],
                         etag: str | None) -> _pages.Held:
        """Page-index or Bloom-filter ranges: from the footer's suffix read where it holds
        them, the rest in as few GETs as possible (such ranges sit together, before the
        footer, so bridging other columns' entries costs less than another round trip)."""
        held = _pages.Held()
        if footer.before:
            held.write(footer.before_range[0], memoryview(footer.before))
        wanted = _plan.coalesce(ranges, max(self.settings.max_gap, _pages.INDEX_GAP))
        return self._fetch_held(obj, _plan.subtract(wanted, footer.before_range), etag, held)

    def _fetch_held(self, obj: ObjectRef, ranges: list[_plan.Range], etag: str | None,
                    held: _pages.Held) -> _pages.Held:
        """``ranges`` fetched in parallel into ``held``, which is returned."""
        if ranges:
            self.deadline()
            self.fetcher.get_ranges(obj, ranges, etag=etag, sink=held.write,
                                    concurrency=self.settings.max_concurrency)
        return held

    def _bloom_prune(self, obj: ObjectRef, footer: _plan.Footer, plan: _plan.Plan,
                     analysis: Analysis, etag: str | None
                     ) -> tuple[_plan.Plan, dict[str, Any] | None]:
        """The plan less the row groups whose Bloom filters rule out every ``=``/IN value.

        The filters are read (from the suffix read where it holds them, else in one GET) only
        when they come to at most ``_bloom.MAX_SHARE`` of the plan's bytes; what was decided
        is returned for ``strategy_inputs``.
        """
        where = _bloom.locate(footer, plan, analysis.predicate, uri=obj.uri)
        if not where:
            return plan, None
        filter_bytes = _plan.total(where.values())
        info: dict[str, Any] = {"filter_bytes": filter_bytes,
                                "row_groups_before": len(plan.row_groups)}
        if filter_bytes > _bloom.MAX_SHARE * plan.needed_bytes:
            return plan, {**info, "used": False}
        held = self._metadata_ranges(obj, footer, where.values(), etag)
        kept = _bloom.prune(footer, plan, analysis.predicate, where, held.read, uri=obj.uri)
        return plan.keep(kept), {**info, "used": True, "row_groups_after": len(kept)}

    def _page_plan(self, obj: ObjectRef, footer: _plan.Footer, plan: _plan.Plan,
                   analysis: Analysis, etag: str | None, inputs: dict[str, Any],
                   timings: Timings) -> _pages.PagePlan | None:
        """A page-level plan when the file has a page index and it cuts the bytes enough.

        The index lies outside the footer: it costs one more GET unless the footer's suffix
        read holds it. Its locations are in the footer's Thrift form, which is parsed only
        when that may pay (:func:`._pages.parse_pays`). The pages are read instead of the
        row groups' column chunks when they come to at most ``page_index_ratio`` of those
        bytes. The choice goes into ``inputs``.
        """
        s = self.settings
        if s.page_index_ratio <= 0 or not plan.row_groups:
            return None
        with timings.phase("plan"):
            if not _pages.indexed(footer, plan, analysis.predicate):
                return None
            if not _pages.parse_pays(footer, plan):
                inputs["page_index"] = {"used": False, "footer_bytes": footer.length,
                                        "row_group_bytes": plan.needed_bytes}
                return None
            where = _pages.locate(footer, plan, analysis.predicate, uri=obj.uri)
            index = self._metadata_ranges(obj, footer, where.ranges(), etag)
            pages = _pages.select(footer, plan, analysis.predicate, where, index.read,
                                  uri=obj.uri)
        used = pages.needed_bytes <= s.page_index_ratio * plan.needed_bytes
        inputs["page_index"] = {"used": used, "pages_kept": pages.pages_kept,
                                "pages_total": pages.pages_total,
                                "row_group_bytes": plan.needed_bytes,
                                "page_bytes": pages.needed_bytes}
        return pages if used else None

    def _read_pages(self, obj: ObjectRef, footer: _plan.Footer, plan: _plan.Plan,
                    pages: _pages.PagePlan, analysis: Analysis, etag: str | None,
                    timings: Timings) -> pl.DataFrame:
        """The kept pages of a page-level plan, fetched in parallel and decoded by pyarrow."""
        s = self.settings
        with timings.phase("fetch"):
            ranges = _plan.parts(_plan.coalesce(pages.fetch_ranges(), s.max_gap), s)
            held = self._fetch_held(obj, ranges, etag, _pages.Held())
        with timings.phase("execute"):
            schema = footer.arrow_schema
            table = _pages.decode(footer, pages, held.read,
                                  pa.schema([schema.field(c) for c in plan.columns]),
                                  uri=obj.uri)
            return collect(analysis.prefilter(to_polars(table).lazy()))

    def _read_batches(self, obj: ObjectRef, plan: _plan.Plan, analysis: Analysis,
                      etag: str | None, timings: Timings) -> pl.DataFrame:
        """Row groups in batches that fit the memory budget, one batch resident at a time."""
        s = self.settings
        budget = max(1, s.memory_budget_bytes // 2)  # half for fetched bytes, half for decoding
        batches: list[list[int]] = [[]]
        used = 0
        for g in plan.row_groups:
            size = plan.group_bytes(g)
            if batches[-1] and used + size > budget:
                batches.append([])
                used = 0
            batches[-1].append(g)
            used += size
        frames: list[pl.DataFrame] = []
        rows = 0
        for batch in batches:
            if not batch:
                continue
            self.deadline()
            image = MemoryImage(plan.footer.size)
            try:
                image.write(plan.footer.data_end, memoryview(plan.footer.raw))
                with timings.phase("fetch"):
                    self.fetcher.get_ranges(obj, plan.fetch_ranges(s, row_groups=batch), etag=etag,
                                            sink=image.write, concurrency=s.max_concurrency)
                with timings.phase("execute"):
                    piece, _ = self._decode(obj, image, plan, batch, analysis)
            finally:
                image.close()
            frames.append(piece)
            rows += piece.height
            if analysis.early_limit is not None and rows >= analysis.early_limit:
                break
        if not frames:
            return self._decode(obj, None, plan, (), analysis)[0]
        return pl.concat(frames, how="vertical_relaxed")

    def _decode(self, obj: ObjectRef, image: Image | None, plan: _plan.Plan,
                groups: tuple[int, ...] | list[int], analysis: Analysis, *,
                complete: bool = False) -> tuple[pl.DataFrame, str]:
        """The needed columns of ``groups``, filtered, and which reader decoded them.

        polars' reader decodes them when it may: it applies the filter while decoding and
        reads only the columns the query uses. It picks row groups by their statistics, not
        by this plan, so it is used only when every row group it could read is in the image
        (the whole object, or a plan that keeps every group); otherwise, or when polars
        fails, pyarrow decodes exactly ``groups`` and polars filters after.

        No result is built from fewer rows than the footer declares: a decoder that returns
        another number of rows has failed, and the other decoder is tried. polars' filter
        while decoding hides the count, so it is used with a filter only on columns of flat
        types (the decoders differ on nested ones: legacy two-level lists, for one). When
        both disagree with the footer the object is an :class:`ObjectFormatError`.
        """
        md = plan.footer.metadata
        columns = list(plan.columns)
        schema = plan.footer.arrow_schema
        if image is None or not groups:
            return collect(analysis.prefilter(
                to_polars(schema.empty_table().select(columns)).lazy())), "pyarrow"
        expected = sum(md.row_group(g).num_rows for g in groups)
        whole = complete or len(groups) == md.num_row_groups
        counted = analysis.where is None and analysis.early_limit is None
        # polars reads a struct column whole: one read in part is pyarrow's.
        polars_may = whole and not plan.fields and not foreign_time_zones(
            pa.schema([schema.field(c) for c in columns]))
        polars_rows: int | None = None  # what polars decoded, unfiltered, when it was tried
        if polars_may and (counted or not _plan.nested_columns(md) & set(columns)):
            frame = self._try_polars(obj, image, columns, schema,
                                     None if counted else analysis)
            if frame is not None and not counted:
                return frame, "polars"
            if frame is not None and frame.height == expected:
                return collect(analysis.prefilter(frame.lazy())), "polars"
            polars_rows = None if frame is None else frame.height
        try:
            pf = pq.ParquetFile(image.source(), metadata=md,
                                coerce_int96_timestamp_unit=_plan.INT96_UNIT)
            # One row group at a time (as fast), so each one's rows are counted.
            pieces = [pf.read_row_group(g, columns=plan.read_columns, use_threads=True)
                      for g in groups]
        except (OSError, pa.ArrowException, ValueError) as e:
            raise ObjectFormatError(f"corrupt Parquet data: {e}", uri=obj.uri) from e
        wrong = next(((g, t.num_rows) for g, t in zip(groups, pieces, strict=True)
                      if t.num_rows != md.row_group(g).num_rows), None)
        if wrong is not None and polars_may and polars_rows is None:
            frame = self._try_polars(obj, image, columns, schema, None)
            if frame is not None and frame.height == expected:
                return collect(analysis.prefilter(frame.lazy())), "polars"
            polars_rows = None if frame is None else frame.height
        if wrong is not None:
            g, n = wrong
            also = ("" if polars_rows is None else f", and polars {polars_rows} of the "
                    f"{expected} in row groups {_ranges_text(groups)}")
            raise ObjectFormatError(
                f"row group {g} holds {md.row_group(g).num_rows} rows by the footer, but "
                f"pyarrow decoded {n}{also}; no result is built from fewer rows", uri=obj.uri)
        table = pa.concat_tables(pieces)
        # The row groups stay separate chunks: rechunking would copy the whole decoded table
        # once more, at twice its memory for a moment.
        return collect(analysis.prefilter(to_polars(table).lazy())), "pyarrow"

    @staticmethod
    def _try_polars(obj: ObjectRef, image: Image, columns: list[str], schema: pa.Schema,
                    analysis: Analysis | None) -> pl.DataFrame | None:
        """polars' decode of the image, filtered by ``analysis`` when given, as the pyarrow
        path types it; None when polars fails or panics."""
        want = to_polars(compatible(schema).empty_table().select(columns))
        try:
            lf = pl.scan_parquet(image.reader_source(), glob=False,
                                 hive_partitioning=False).select(columns)
            have = lf.collect_schema()
            casts = [pl.col(c).cast(t) for c, t in want.schema.items() if have[c] != t]
            if casts:
                lf = lf.with_columns(casts)
            return (analysis.prefilter(lf) if analysis is not None else lf).collect()
        except BaseException as e:
            if not (isinstance(e, Exception) or is_native_panic(e)):
                raise
            logger.debug("polars could not decode; pyarrow decodes",
                         extra={"uri": obj.uri, "error": first_line(e)})
            return None


def _single_split(analysis: Analysis) -> Split | None:
    """The split a many-object read shares with the Distributed Map; None when the query
    does not combine objects or cannot be split exactly (one process answers it whole)."""
    try:
        return split_for(analysis)
    except QueryError:
        return None


def _ranges_text(groups: Iterable[int]) -> str:
    """Row group indexes as ``0-3, 7``."""
    runs: list[list[int]] = []
    for g in groups:
        if runs and g == runs[-1][1] + 1:
            runs[-1][1] = g
        else:
            runs.append([g, g])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _magic_checked(sink: Callable[[int, memoryview], None], uri: str
                   ) -> Callable[[int, memoryview], None]:
    """``sink``, checking the leading ``PAR1`` of the part that starts the object."""
    def check(start: int, data: memoryview) -> None:
        magic = _plan.MAGIC
        if start == 0 and len(data) >= len(magic) and data[:len(magic)] != magic:
            raise ObjectFormatError("not a Parquet object: no PAR1 magic at its start", uri=uri)
        sink(start, data)
    return check


def _footer_of(tail: bytes, size: int, before: Callable[[int, int], bytes], *, uri: str,
               keep_before: int) -> _plan.Footer:
    """The footer of an object of ``size`` bytes from its last bytes ``tail``; when the
    footer is longer, ``before(start, end)`` brings the bytes missing in front of the tail
    (and ``keep_before`` more, where the page index and Bloom filters are)."""
    try:
        return _plan.parse_footer(tail, size=size, uri=uri, keep_before=keep_before)
    except _plan.FooterTooLarge as more:
        start = max(0, size - more.needed - keep_before)
        whole = before(start, size - len(tail)) + tail
        return _plan.parse_footer(whole, size=size, uri=uri, keep_before=keep_before)


def _read_at(f: pa.NativeFile, offset: int, nbytes: int) -> bytes:
    f.seek(offset)
    return bytes(f.read(nbytes))
