"""Reading one Parquet object for a query: its footer (cached across warm invocations),
the plan, Bloom-filter pruning, then the strategy that fetches and decodes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import polars as pl

from s3slice import _ranges
from s3slice._model import ObjectRef
from s3slice._read import Io, ObjectResult, Timings
from s3slice.fetch.image import Image, MemoryImage, read_at
from s3slice.parquet import bloom as _bloom
from s3slice.parquet.footer import Footer, footer_of, magic_checked
from s3slice.parquet.footer_cache import FooterCache
from s3slice.parquet.plan import Plan, plan_parquet
from s3slice.parquet.strategies import Job, Strategy, choose, fetch_metadata
from s3slice.query.analysis import Analysis


@dataclasses.dataclass(frozen=True, kw_only=True)
class Footing:
    """An object's footer, how it was had, and what came with it."""

    footer: Footer
    etag: str | None
    via: str
    #: The whole object, when it came in the footer's GET.
    whole: Image | None = None


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

    def _plan(self, obj: ObjectRef, footing: Footing, analysis: Analysis, timings: Timings,
              sink: Callable[[pl.DataFrame], None] | None) -> tuple[Job, Strategy]:
        footer = footing.footer
        columns = analysis.needed_columns(footer.schema_names, source=obj.uri)
        plan = plan_parquet(footer, columns=columns, predicate=analysis.predicate, uri=obj.uri,
                            fields=analysis.fields())
        if analysis.pruned:
            plan = plan.keep(())
        # A whole object is already held: its Bloom filters could save no bytes.
        bloom = None
        if footing.whole is None:
            plan, bloom = self._bloom_prune(obj, footer, plan, analysis, footing.etag)
        job = Job(obj=obj, footer=footer, plan=plan, etag=footing.etag, analysis=analysis,
                  timings=timings, whole=footing.whole, sink=sink)
        strategy = choose(job, self.io.settings)
        job.inputs["footer"] = footing.via
        if bloom is not None:
            job.inputs["bloom_filters"] = bloom
        return job, strategy

    def footer(self, obj: ObjectRef) -> Footing:
        """The object's footer, its ETag, and (for small objects) the whole object."""
        s, fetcher = self.io.settings, self.io.fetcher
        cached = self.footers.get(obj, obj.etag)
        if cached is not None and (obj.size is None or obj.size == cached.size):
            return Footing(footer=cached, etag=obj.etag, via="cache")
        if obj.size is not None and obj.size <= s.small_object_size:
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

    def _bloom_prune(self, obj: ObjectRef, footer: Footer, plan: Plan, analysis: Analysis,
                     etag: str | None) -> tuple[Plan, dict[str, Any] | None]:
        """The plan less the row groups whose Bloom filters rule out every ``=``/IN value.

        The filters are read (from the suffix read where it holds them, else in one GET)
        only when they come to at most ``bloom.MAX_SHARE`` of the plan's bytes; what was
        decided is returned for ``strategy_inputs``.
        """
        where = _bloom.locate(footer, plan, analysis.predicate, uri=obj.uri)
        if not where:
            return plan, None
        filter_bytes = _ranges.total(where.values())
        info: dict[str, Any] = {"filter_bytes": filter_bytes,
                                "row_groups_before": len(plan.row_groups)}
        if filter_bytes > _bloom.MAX_SHARE * plan.needed_bytes:
            return plan, {**info, "used": False}
        held = fetch_metadata(self.io, obj, footer, list(where.values()), etag)
        kept = _bloom.prune(footer, plan, analysis.predicate, where, held.read, uri=obj.uri)
        return plan.keep(kept), {**info, "used": True, "row_groups_after": len(kept)}
