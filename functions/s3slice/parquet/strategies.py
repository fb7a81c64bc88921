"""How the bytes of one planned Parquet read reach the decoder: one small class per
strategy, chosen in one place (:func:`choose`) from the planner's facts, as s3transfer
chooses its download outputs by an ``is_compatible`` chain.

- ``single``: the whole object came with the footer's GET (small, of known size).
- ``whole``: most of the object is needed: all of it in parallel parts, into memory.
- ``whole-tmp``: the same into a file in /tmp, when memory cannot hold it.
- ``ranges``: only the needed column chunks in parallel parts (or only the needed pages,
  when the page index cuts the bytes enough).
- ``batches``: the needed column chunks, a batch of row groups at a time within the
  memory budget.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import polars as pl
import pyarrow as pa

from s3slice.core import ranges as _ranges
from s3slice.core.errors import ObjectError, first_line, is_native_panic
from s3slice.core.model import ObjectRef
from s3slice.core.settings import Settings
from s3slice.fetch.image import FileImage, Image, MemoryImage
from s3slice.parquet import handoff as _handoff
from s3slice.parquet import pages as _pages
from s3slice.parquet.arrow import to_polars
from s3slice.parquet.decode import decode, empty
from s3slice.parquet.footer import Footer, reaching_head
from s3slice.parquet.plan import Plan
from s3slice.parquet.read_ahead import ReadAhead, fetch_groups, windows
from s3slice.query.analysis import Analysis, collect
from s3slice.readers.base import Io, Timings

logger = logging.getLogger("s3slice")

@dataclasses.dataclass(frozen=True, kw_only=True)
class Job:
    """One planned read of a Parquet object: what every strategy works from."""

    obj: ObjectRef
    footer: Footer
    plan: Plan
    etag: str | None
    analysis: Analysis
    timings: Timings
    #: The whole object, when the footer's GET brought it.
    whole: Image | None = None
    #: What the choices were made from (``strategy_inputs``); strategies add to it.
    inputs: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: When set, the rows go here a row group at a time and are never held whole.
    sink: Callable[[pl.DataFrame], None] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Decoded:
    frame: pl.DataFrame
    row_groups_read: int
    rows_in: int
    needed_bytes: int


def _decoded(job: Job, frame: pl.DataFrame, decoder: str) -> Decoded:
    """A read of the plan's row groups, decoded by ``decoder``."""
    job.inputs["decoder"] = decoder
    md = job.footer.metadata
    return Decoded(frame=frame, row_groups_read=len(job.plan.row_groups),
                   rows_in=sum(md.row_group(g).num_rows for g in job.plan.row_groups),
                   needed_bytes=job.plan.needed_bytes)


Sink = Callable[[int, memoryview], None]


def _head(ranges: Sequence[_ranges.Range], sink: Sink, obj: ObjectRef, etag: str | None
          ) -> tuple[list[_ranges.Range], str | None, Sink]:
    """``io.fetch``'s arguments after ``obj``, for a fetch that checks the object's leading
    magic when its first range starts at byte 4 (:func:`s3slice.parquet.footer.reaching_head`)."""
    wanted, checked = reaching_head(ranges, sink, obj.uri)
    return wanted, etag, checked


def fetch_metadata(io: Io, obj: ObjectRef, footer: Footer, ranges: Sequence[_ranges.Range],
                   etag: str | None) -> _ranges.Held:
    """Page-index or Bloom-filter ranges: from the footer's suffix read where it holds
    them, the rest in as few GETs as possible (such ranges sit together, before the
    footer, so bridging other columns' entries costs less than another round trip)."""
    held = _ranges.Held()
    if footer.before:
        held.write(footer.before_range[0], memoryview(footer.before))
    wanted = _ranges.coalesce(ranges, max(io.settings.max_gap, _pages.INDEX_GAP))
    io.fetch(obj, *_head(_ranges.subtract(wanted, footer.before_range), held.write, obj, etag))
    return held


def _hands_off(io: Io, job: Job) -> bool:
    """Whether polars' reader takes the read (:func:`.handoff.applies`); not when polars
    refuses a footer pyarrow read (a repeated name): the ranged read then answers."""
    try:
        return _handoff.applies(io.settings, job.footer, job.plan, job.analysis, job.obj.uri)
    except BaseException as e:
        if not (isinstance(e, Exception) or is_native_panic(e)):
            raise
        logger.info("polars refuses the footer; s3slice reads the object itself",
                    extra={"uri": job.obj.uri, "error": first_line(e)})
        return False


def _decode_plan(job: Job, image: Image | None, settings: Settings, *,
                 complete: bool = False) -> tuple[pl.DataFrame, str]:
    """The plan's row groups decoded: as one frame, or, when the job streams, into its sink
    (the frame returned then holds no rows, only the schema): whole when the needed bytes
    are at most a quarter of the memory budget (one decode, polars' own when it may), else
    one row group at a time."""
    if job.sink is None or job.plan.needed_bytes <= settings.memory_budget_bytes // 4:
        frame, decoder = decode(job.obj, image, job.plan, job.plan.row_groups, job.analysis,
                                complete=complete)
        return _streamed(job, frame), decoder
    decoders = set()
    for g in job.plan.row_groups:
        frame, decoder = decode(job.obj, image, job.plan, [g], job.analysis, complete=complete)
        job.sink(frame)
        decoders.add(decoder)
    return empty(job.plan, job.analysis), _decoders(decoders, streamed=True)


def _decoders(decoders: set[str], *, streamed: bool) -> str:
    """The ``decoder`` of a read decoded in pieces: the pieces' decoders, and whether the
    pieces went to the job's sink."""
    name = "+".join(sorted(decoders or {"pyarrow"}))
    return f"{name}-streamed" if streamed else name


def _streamed(job: Job, frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` sent to the job's sink when it streams (then an empty frame is kept)."""
    if job.sink is None:
        return frame
    job.sink(frame)
    return frame.clear()


class Strategy:
    name: ClassVar[str]

    @staticmethod
    def is_compatible(job: Job, settings: Settings) -> bool:
        raise NotImplementedError

    def read(self, io: Io, job: Job) -> Decoded:
        raise NotImplementedError


def _wants_whole(job: Job, s: Settings) -> bool:
    if s.strategy not in ("whole", "auto"):
        return False
    size = job.footer.size
    return s.strategy == "whole" or (
        size > 0 and job.plan.needed_bytes / size >= s.whole_object_ratio)


class Single(Strategy):
    name = "single"

    @staticmethod
    def is_compatible(job: Job, settings: Settings) -> bool:
        return job.whole is not None

    def read(self, io: Io, job: Job) -> Decoded:
        with job.timings.phase("execute"):
            frame, decoder = _decode_plan(job, job.whole, io.settings, complete=True)
        return _decoded(job, frame, decoder)


class Whole(Strategy):
    name = "whole"

    @staticmethod
    def is_compatible(job: Job, settings: Settings) -> bool:
        return _wants_whole(job, settings) and job.footer.size <= settings.memory_budget_bytes

    def image(self, io: Io, size: int) -> Image:
        return MemoryImage(size)

    def read(self, io: Io, job: Job) -> Decoded:
        footer, s = job.footer, io.settings
        image = self.image(io, footer.size)
        try:
            image.write(footer.data_end, memoryview(footer.raw))
            with job.timings.phase("fetch"):
                held = (footer.data_end, footer.size)
                wanted = _ranges.parts(_ranges.subtract([(0, footer.size)], held), s)
                io.fetch(job.obj, *_head(wanted, image.write, job.obj, job.etag))
            with job.timings.phase("execute"):
                frame, decoder = _decode_plan(job, image, io.settings, complete=True)
        finally:
            image.close()
        return _decoded(job, frame, decoder)


class WholeTmp(Whole):
    name = "whole-tmp"

    @staticmethod
    def is_compatible(job: Job, settings: Settings) -> bool:
        return _wants_whole(job, settings) and job.footer.size <= settings.tmp_free_bytes() * 0.9

    def image(self, io: Io, size: int) -> Image:
        return FileImage(size, io.settings.tmp_dir)


class Ranges(Strategy):
    name = "ranges"

    @staticmethod
    def is_compatible(job: Job, settings: Settings) -> bool:
        return settings.strategy == "ranges" or (
            settings.strategy == "auto" and job.plan.needed_bytes <= settings.memory_budget_bytes)

    def read(self, io: Io, job: Job) -> Decoded:
        pages = None if job.analysis.pruned else self._page_plan(io, job)
        if pages is not None:
            return self._pages(io, job, pages)
        handed = self._handoff(io, job)
        if handed is not None:
            return handed
        if job.sink is not None:
            return self._ahead(io, job)
        with job.timings.phase("fetch"):
            image = fetch_groups(io, job.obj, job.etag, job.plan)
        try:
            with job.timings.phase("execute"):
                frame, decoder = _decode_plan(job, image, io.settings)
        finally:
            image.close()
        return _decoded(job, frame, decoder)

    @staticmethod
    def _handoff(io: Io, job: Job) -> Decoded | None:
        """The plan's bytes fetched and decoded by polars' own S3 reader, when they are
        exactly what it would fetch (:mod:`.handoff`); None when they are not, or polars
        failed (the ranged read then does it). ``strategy_inputs.transport`` says which."""
        location = io.fetcher.polars_location(job.obj)
        if job.etag is None or location is None or not _hands_off(io, job):
            return None
        with job.timings.phase("execute"):
            frame = _handoff.read(io, job.obj, job.plan, job.analysis, job.etag, location)
        if frame is None:
            job.inputs["transport"] = "s3slice (polars' reader failed)"
            return None
        job.inputs["transport"] = "polars"
        return _decoded(job, _streamed(job, frame), "polars")

    @staticmethod
    def _ahead(io: Io, job: Job) -> Decoded:
        """A streamed read: the row groups in windows fetched ahead of their decode
        (:mod:`.read_ahead`), each window's rows in the sink before its bytes are let go."""
        sink, plan, limit = job.sink, job.plan, io.settings.read_ahead_bytes
        assert sink is not None
        sizes = {g: plan.group_bytes(g) for g in plan.row_groups}
        ahead = ReadAhead(io, job.obj, job.etag, plan, windows(sizes, limit), limit)
        decoders: set[str] = set()
        try:
            while True:
                with job.timings.phase("fetch"):
                    taken = ahead.take()
                if taken is None:
                    break
                window, image = taken
                try:
                    with job.timings.phase("execute"):
                        frame, decoder = decode(job.obj, image, plan, window.groups,
                                                job.analysis)
                        sink(frame)
                finally:
                    ahead.release(window, image)
                decoders.add(decoder)
        finally:
            ahead.close()
        return _decoded(job, empty(plan, job.analysis), _decoders(decoders, streamed=True))

    @staticmethod
    def _page_plan(io: Io, job: Job) -> _pages.PagePlan | None:
        """A page-level plan when the file has a page index and it cuts the bytes enough.

        The index lies outside the footer: it costs one more GET unless the footer's suffix
        read holds it. Its locations are in the footer's Thrift form, which is parsed only
        when that may pay (:func:`s3slice.parquet.pages.parse_pays`). The pages are read
        instead of the row groups' column chunks when they come to at most
        ``page_index_ratio`` of those bytes. The choice goes into ``job.inputs``.
        """
        s, footer, plan, predicate = io.settings, job.footer, job.plan, job.analysis.predicate
        if s.page_index_ratio <= 0 or not plan.row_groups:
            return None
        with job.timings.phase("plan"):
            if not _pages.indexed(footer, plan, predicate):
                return None
            if not _pages.parse_pays(footer, plan):
                job.inputs["page_index"] = {"used": False, "footer_bytes": footer.length,
                                            "row_group_bytes": plan.needed_bytes}
                return None
            where = _pages.locate(footer, plan, predicate, uri=job.obj.uri)
            index = fetch_metadata(io, job.obj, footer, where.ranges(), job.etag)
            pages = _pages.select(footer, plan, predicate, where, index.read, uri=job.obj.uri)
        used = pages.needed_bytes <= s.page_index_ratio * plan.needed_bytes
        job.inputs["page_index"] = {"used": used, "pages_kept": pages.pages_kept,
                                    "pages_total": pages.pages_total,
                                    "row_group_bytes": plan.needed_bytes,
                                    "page_bytes": pages.needed_bytes}
        return pages if used else None

    @staticmethod
    def _pages(io: Io, job: Job, pages: _pages.PagePlan) -> Decoded:
        """The kept pages of a page-level plan, fetched in parallel and decoded by pyarrow."""
        s = io.settings
        with job.timings.phase("fetch"):
            held = _ranges.Held()
            wanted = _ranges.parts(_ranges.coalesce(pages.fetch_ranges(), s.max_gap), s)
            io.fetch(job.obj, *_head(wanted, held.write, job.obj, job.etag))
        with job.timings.phase("execute"):
            schema = job.footer.arrow_schema
            try:
                table = _pages.decode(job.footer, pages, held.read,
                                      pa.schema([schema.field(c) for c in job.plan.columns]),
                                      uri=job.obj.uri)
            except KeyError as e:  # bytes the page plan never fetched: never decoded
                raise ObjectError(f"a page to decode is not in the read's plan ({e.args[0]}); "
                                  "nothing unfetched is decoded", uri=job.obj.uri) from e
            frame = _streamed(job, collect(job.analysis.prefilter(to_polars(table).lazy())))
        job.inputs["decoder"] = "pyarrow-pages"
        return Decoded(frame=frame, row_groups_read=len(pages.row_groups), rows_in=pages.rows,
                       needed_bytes=pages.needed_bytes)


class Batches(Strategy):
    name = "batches"

    @staticmethod
    def is_compatible(job: Job, settings: Settings) -> bool:
        return True

    def read(self, io: Io, job: Job) -> Decoded:
        """Row groups in batches that fit the memory budget, one batch resident at a time."""
        s, plan = io.settings, job.plan
        budget = max(1, s.memory_budget_bytes // 2)  # half for fetched bytes, half to decode
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
        decoders: set[str] = set()
        rows = 0
        for batch in (b for b in batches if b):
            with job.timings.phase("fetch"):
                image = fetch_groups(io, job.obj, job.etag, plan, batch)
            try:
                with job.timings.phase("execute"):
                    piece, decoder = decode(job.obj, image, plan, batch, job.analysis)
            finally:
                image.close()
            decoders.add(decoder)
            frames.append(_streamed(job, piece))
            rows += piece.height
            if job.analysis.early_limit is not None and rows >= job.analysis.early_limit:
                break
        frame = (pl.concat(frames, how="vertical_relaxed") if frames
                 else decode(job.obj, None, plan, (), job.analysis)[0])
        return _decoded(job, frame, _decoders(decoders, streamed=job.sink is not None))


#: In order: the first compatible one reads.
STRATEGIES: tuple[Strategy, ...] = (Single(), Whole(), WholeTmp(), Ranges(), Batches())


def choose(job: Job, settings: Settings) -> Strategy:
    """The strategy for a planned read; its inputs go into ``job.inputs``."""
    if job.whole is None:
        job.inputs.update({
            "object_bytes": job.footer.size, "needed_bytes": job.plan.needed_bytes,
            "memory_budget_bytes": settings.memory_budget_bytes,
            "tmp_free_bytes": settings.tmp_free_bytes(), "memory_mb": settings.memory_mb,
            "forced": settings.strategy, "whole_object_ratio": settings.whole_object_ratio})
    else:
        job.inputs.update({"object_bytes": job.footer.size,
                           "needed_bytes": job.plan.needed_bytes})
    return next(s for s in STRATEGIES if s.is_compatible(job, settings))
