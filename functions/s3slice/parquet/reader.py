"""Reading one Parquet object for a query: its footer (cached across warm invocations),
the plan, Bloom-filter pruning, then the strategy that fetches and decodes."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import polars as pl
import pyarrow as pa

from s3slice.core import ranges as _ranges
from s3slice.core.errors import ObjectFormatError
from s3slice.core.model import ObjectRef
from s3slice.core.settings import Settings
from s3slice.fetch.image import FileImage, Image, MemoryImage, read_at
from s3slice.parquet import bloom as _bloom
from s3slice.parquet.arrow import compatible, empty_table, foreign_time_zones, to_polars
from s3slice.parquet.chunk_copy import Layout, check_chunks, check_decodes, copy_layout
from s3slice.parquet.decode import empty
from s3slice.parquet.footer import MAGIC, Footer, footer_of, magic_checked, reaching_head
from s3slice.parquet.footer_cache import FooterCache
from s3slice.parquet.plan import Plan, first_rows, plan_parquet
from s3slice.parquet.strategies import Job, Strategy, choose, fetch_metadata
from s3slice.query.analysis import Analysis
from s3slice.query.pruning import predicate as P
from s3slice.readers.base import Copied, Io, ObjectResult, Timings

logger = logging.getLogger("s3slice")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Footing:
    """An object's footer, how it was had, and what came with it."""

    footer: Footer
    etag: str | None
    via: str
    #: The whole object, when it came in the footer's GET.
    whole: Image | None = None


#: A copy is made when the footer is at most 1/16 of the needed bytes (see ``copy``).
COPY_FOOTER_RATIO = 16


def judged(footer: Footer, predicate: P.Pred) -> P.Pred:
    """``predicate`` less its comparisons of a column whose path another leaf shares
    (:attr:`Footer.shared_paths`): their statistics and Bloom filters are found by path,
    and may be the other column's, so they prune nothing."""
    shared = footer.shared_paths & P.columns_of(predicate) if footer.shared_paths else None
    return _opaque(predicate, shared) if shared else predicate


def _opaque(pred: P.Pred, columns: AbstractSet[str]) -> P.Pred:
    """``pred`` with every comparison of ``columns`` made opaque (judged by no statistic)."""
    match pred:
        case P.Cmp(column=c) | P.Between(column=c) | P.In(column=c) | P.IsNull(column=c):
            return P.TRUE if c in columns else pred
        case P.And(items=items):
            return P.And(tuple(_opaque(p, columns) for p in items))
        case P.Or(items=items):
            return P.Or(tuple(_opaque(p, columns) for p in items))
        case P.Not(item=item):
            return P.Not(_opaque(item, columns))
    return pred


#: The share of the function's memory one row group may decode to (that of the default
#: memory budget): beyond it, the decode and what the answer holds meanwhile would not fit.
DECODE_SHARE = 0.6


def decode_limit(s: Settings) -> int:
    """The most one row group may decode to: the memory budget, or, where a smaller budget
    is set (to bound what is fetched and held at once), :data:`DECODE_SHARE` of the
    function's memory, which is what the process dies of."""
    return max(s.memory_budget_bytes, int(s.memory_mb * DECODE_SHARE) << 20)


def check_decoded(plan: Plan, budget: int, uri: str) -> None:
    """Every kept row group's needed chunks decode within ``budget`` (by the footer's
    figures, :func:`~s3slice.parquet.plan.decoded_size`): a row group is the least a
    decoder decodes at once, so one that does not fit is refused, naming it, before any
    byte of it is fetched, rather than let the process die of its memory."""
    for g in plan.row_groups:
        size = plan.decoded.get(g, 0)
        if size > budget:
            raise ObjectFormatError(
                f"row group {g} decodes to {size:,} bytes or more (columns "
                f"{', '.join(map(repr, plan.columns))}, by its footer), more than the memory "
                f"budget of {budget:,} bytes: a row group is decoded whole; a larger "
                "memory size (memory_mb) or fewer columns may read it", uri=uri)


class ParquetReader:
    """Reads Parquet objects through ``io``, keeping their footers in ``footers``."""

    def __init__(self, io: Io, footers: FooterCache) -> None:
        self.io = io
        self.footers = footers

    def read(self, obj: ObjectRef, analysis: Analysis, timings: Timings, *,
             sink: Callable[[pl.DataFrame], None] | None = None) -> ObjectResult:
        """``obj`` read for ``analysis``; with ``sink``, its rows go there a row group at a
        time (the result's frame then holds none)."""
        self.io.deadline()
        with timings.phase("plan"):
            footing = self.footer(obj)
        try:
            with timings.phase("plan"):
                job, strategy = self._plan(obj, footing, analysis, timings, sink)
            decoded = strategy.read(self.io, job)
        finally:
            if footing.whole is not None:
                footing.whole.close()
        return ObjectResult(obj=obj, frame=decoded.frame, size=job.footer.size,
                            row_groups=job.footer.metadata.num_row_groups,
                            row_groups_read=decoded.row_groups_read, rows_in=decoded.rows_in,
                            needed_bytes=decoded.needed_bytes, strategy=strategy.name,
                            inputs=job.inputs)

    def copy(self, obj: ObjectRef, analysis: Analysis, timings: Timings, *,
             codec: str | None) -> Copied | None:
        """``obj``'s needed column chunks of every row group copied as they are into a
        Parquet file in /tmp (:mod:`.chunk_copy`), for a query with no row filter; None
        when they cannot be: the object came whole with its footer (small), it cannot be
        copied exactly, a chunk's codec is not ``codec`` (when one is asked for), or
        /tmp would not hold the file."""
        self.io.deadline()
        s = self.io.settings
        with timings.phase("plan"):
            footing = self.footer(obj)
            if footing.whole is not None:
                footing.whole.close()
                return None
            footer = footing.footer
            columns = analysis.needed_columns(footer.schema_names, source=obj.uri)
            if not columns:  # no column asked for: the plan would read one to count rows
                return None
            plan = plan_parquet(footer, columns=columns,
                                predicate=judged(footer, analysis.predicate), uri=obj.uri)
            # The copy needs the footer's Thrift form, parsed in Python at about 0.8 µs a
            # byte, where decoding costs some 35 ns a needed byte: a footer more than a
            # sixteenth of the needed bytes is not worth it (unless already parsed).
            if "thrift" not in footer.memo and footer.length * COPY_FOOTER_RATIO > (
                    plan.needed_bytes):
                return None
            # A time zone polars cannot parse is read in UTC by the decoders: not copied.
            if foreign_time_zones(pa.schema([footer.arrow_schema.field(c)
                                             for c in plan.columns])):
                return None
            layout = copy_layout(footer, plan, obj.uri, order=analysis.columns)
        if layout is None or (codec is not None and layout.codecs != {codec}) or (
                layout.size > s.tmp_free_bytes() * 0.9):
            return None
        file = FileImage(layout.size, s.tmp_dir)
        try:
            with timings.phase("fetch"):
                file.write(0, memoryview(MAGIC))
                # From byte 0 when the first chunk starts at byte 4: the object's magic is
                # checked, and a wrong one fails the read (no decode would mend it).
                ranges, sink = reaching_head(layout.fetch_ranges(s), layout.placing(file.write),
                                             obj.uri)
                self.io.fetch(obj, ranges, footing.etag, sink)
                file.write(layout.footer_at, memoryview(layout.footer))
            with timings.phase("execute"):
                frame = self._checked(file, layout, plan, analysis, obj)
        except BaseException:
            file.close()
            raise
        if frame is None:
            file.close()
            return None
        result = ObjectResult(obj=obj, frame=frame, size=footer.size,
                              row_groups=footer.metadata.num_row_groups,
                              row_groups_read=len(plan.row_groups), rows_in=layout.rows,
                              needed_bytes=plan.needed_bytes, strategy="copy",
                              inputs={"footer": footing.via, "output_bytes": layout.size,
                                      "codecs": sorted(layout.codecs)})
        return Copied(result=result, file=file, rows=layout.rows)

    @staticmethod
    def _checked(file: FileImage, layout: Layout, plan: Plan, analysis: Analysis,
                 obj: ObjectRef) -> pl.DataFrame | None:
        """The copy's empty frame once its chunks are checked; None when they are in doubt."""
        try:
            with file.source() as f:
                check_chunks(layout, lambda at, n: read_at(f, at, n), obj.uri)
            check_decodes(file.path, layout, plan.columns, obj.uri)
        except ObjectFormatError as e:
            # A copy in doubt is never written: the object is read as any other, whose
            # decoders (polars, then pyarrow) answer it or name what is wrong with it.
            logger.warning("the column chunks cannot be copied; decoding",
                           extra={"uri": obj.uri, "error": e.message})
            return None
        return empty(plan, analysis)

    def _plan(self, obj: ObjectRef, footing: Footing, analysis: Analysis, timings: Timings,
              sink: Callable[[pl.DataFrame], None] | None) -> tuple[Job, Strategy]:
        footer = footing.footer
        columns = analysis.needed_columns(footer.schema_names, source=obj.uri)
        predicate = judged(footer, analysis.predicate)
        plan = plan_parquet(footer, columns=columns, predicate=predicate, uri=obj.uri,
                            fields=analysis.fields())
        if analysis.pruned:
            plan = plan.keep(())
        elif analysis.early_limit is not None and analysis.where is None:
            # A limit and no row filter: the leading row groups that hold it are enough.
            plan = plan.keep(first_rows(footer.metadata, plan.row_groups, analysis.early_limit))
        # A whole object is already held: its Bloom filters could save no bytes.
        bloom = None
        if footing.whole is None:
            plan, bloom = self._bloom_prune(obj, footer, plan, predicate, footing.etag)
        check_decoded(plan, decode_limit(self.io.settings), obj.uri)
        job = Job(obj=obj, footer=footer, plan=plan, etag=footing.etag, analysis=analysis,
                  timings=timings, whole=footing.whole, sink=sink)
        strategy = choose(job, self.io.settings)
        job.inputs["footer"] = footing.via
        if bloom is not None:
            job.inputs["bloom_filters"] = bloom
        return job, strategy

    def column_types(self, obj: ObjectRef, names: Sequence[str]) -> dict[str, pl.DataType]:
        """The polars types the decoders give those of ``names`` that ``obj`` has (its
        footer, from the cache when a read has had it)."""
        footing = self.footer(obj)
        if footing.whole is not None:
            footing.whole.close()
        schema = footing.footer.arrow_schema
        have = [n for n in names if n in schema.names]
        if not have:
            return {}
        return dict(to_polars(empty_table(compatible(
            pa.schema([schema.field(n) for n in have])))).schema)

    def footer(self, obj: ObjectRef) -> Footing:
        """The object's footer, its ETag, and (for small objects) the whole object."""
        s, fetcher = self.io.settings, self.io.fetcher
        cached = self.footers.get(obj, obj.etag)
        if cached is not None and (obj.size is None or obj.size == cached.size):
            return Footing(footer=cached, etag=obj.etag, via="cache")
        # An empty object (a Spark _SUCCESS an event names) has no range to GET: its
        # suffix GET learns that it is empty, and parsing it is an ObjectFormatError.
        if obj.size is not None and 0 < obj.size <= s.small_object_size:
            return self._whole(obj, obj.size)
        known = self.footers.newest(obj) if obj.etag is None else None
        got = fetcher.get_tail(obj, s.footer_size, if_none_match=known[0] if known else None)
        if got is None:  # the object is still the one whose footer is cached
            assert known is not None
            if obj.size is None or obj.size == known[1].size:
                return Footing(footer=known[1], etag=known[0], via="cache (revalidated)")
            got = fetcher.get_tail(obj, s.footer_size)
            assert got is not None

        def fetched(start: int, end: int) -> bytes:
            parts: list[tuple[int, bytes]] = []
            fetcher.get_ranges(obj, [(start, end)], etag=got.etag, concurrency=1,
                               sink=lambda at, data: parts.append((at, bytes(data))))
            return b"".join(data for _, data in sorted(parts))
        footer = footer_of(got.data, got.size, fetched, uri=obj.uri, keep_before=s.footer_size)
        self.footers.put(obj, got.etag, footer)
        return Footing(footer=footer, etag=got.etag, via="suffix GET")

    def _whole(self, obj: ObjectRef, size: int) -> Footing:
        """Small and of known size: the whole object in one GET, no footer round trip."""
        footer_size = self.io.settings.footer_size
        image = MemoryImage(size)
        try:
            self.io.fetcher.get_ranges(obj, [(0, size)], etag=obj.etag, concurrency=1,
                                       sink=magic_checked(image.write, obj.uri))
            with image.source() as f:
                tail = read_at(f, max(0, size - footer_size), min(size, footer_size))

            def held(start: int, end: int) -> bytes:
                with image.source() as f:
                    return read_at(f, start, end - start)
            footer = footer_of(tail, size, held, uri=obj.uri, keep_before=0)
        except BaseException:
            image.close()
            raise
        return Footing(footer=footer, etag=obj.etag, via="whole-object GET", whole=image)

    def _bloom_prune(self, obj: ObjectRef, footer: Footer, plan: Plan, predicate: P.Pred,
                     etag: str | None) -> tuple[Plan, dict[str, Any] | None]:
        """The plan less the row groups whose Bloom filters rule out every ``=``/IN value.

        The filters are read (from the suffix read where it holds them, else in one GET)
        only when they come to at most ``bloom.MAX_SHARE`` of the plan's bytes; what was
        decided is returned for ``strategy_inputs``.
        """
        where = _bloom.locate(footer, plan, predicate, uri=obj.uri)
        if not where:
            return plan, None
        filter_bytes = _ranges.total(where.values())
        info: dict[str, Any] = {"filter_bytes": filter_bytes,
                                "row_groups_before": len(plan.row_groups)}
        if filter_bytes > _bloom.MAX_SHARE * plan.needed_bytes:
            return plan, {**info, "used": False}
        held = fetch_metadata(self.io, obj, footer, list(where.values()), etag)
        kept = _bloom.prune(footer, plan, predicate, where, held.read, uri=obj.uri)
        return plan.keep(kept), {**info, "used": True, "row_groups_after": len(kept)}
