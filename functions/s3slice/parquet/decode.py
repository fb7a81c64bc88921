"""Decoding the needed columns of a Parquet object's row groups, held in an image, into
a polars frame with the query's row filter applied; no result from fewer rows than the
footer declares."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Sequence

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from s3slice._arrow import compatible, foreign_time_zones, to_polars
from s3slice._errors import ObjectFormatError, first_line, is_native_panic
from s3slice._model import ObjectRef
from s3slice.fetch.image import Image
from s3slice.parquet.footer import INT96_UNIT, nested_columns
from s3slice.parquet.plan import Plan
from s3slice.query.analysis import Analysis, collect

logger = logging.getLogger("s3slice")


def empty(plan: Plan, analysis: Analysis) -> pl.DataFrame:
    """No rows, in the columns and types a read of ``plan`` gives."""
    table = plan.footer.arrow_schema.empty_table().select(list(plan.columns))
    return collect(analysis.prefilter(to_polars(table).lazy()))


def decode(obj: ObjectRef, image: Image | None, plan: Plan, groups: Sequence[int],
           analysis: Analysis, *, complete: bool = False) -> tuple[pl.DataFrame, str]:
    """The needed columns of ``groups``, filtered, and which reader decoded them.

    polars' reader decodes them when it may: it applies the filter while decoding and
    reads only the columns the query uses. It picks row groups by their statistics, not
    by this plan, so for every group of the object it is used only when the image holds
    every group it could read (the whole object, or a plan that keeps every group). For
    some of the groups, it is used when they are consecutive: polars then reads the slice
    of rows they hold, and only their row groups, so the image need hold no others (a
    streamed read's window holds only its own). Otherwise, or when polars fails, pyarrow
    decodes exactly ``groups`` and polars filters after. The image holds ``groups``.

    No result is built from fewer rows than the footer declares: a decoder that returns
    another number of rows has failed, and the other decoder is tried. polars' filter
    while decoding hides the count, so it is used with a filter only on columns of flat
    types (the decoders differ on nested ones: legacy two-level lists, for one). A slice
    is placed by the row groups' counts and cut short at the file's: where a damaged
    footer's counts disagree, a filtered slice would silently start in another group's
    rows or end early, so such a slice is decoded unfiltered, counted, then filtered. When
    both decoders disagree with the footer the object is an :class:`ObjectFormatError`.
    """
    md = plan.footer.metadata
    columns = list(plan.columns)
    schema = plan.footer.arrow_schema
    if image is None or not groups:
        return empty(plan, analysis), "pyarrow"
    expected = sum(md.row_group(g).num_rows for g in groups)
    # polars reads the whole image for every group, or for the plan's groups of a whole
    # object (its filter finds no row in the groups the plan pruned); for some groups of
    # it, the slice of rows they hold.
    whole = len(groups) == md.num_row_groups or (
        complete and list(groups) == list(plan.row_groups))
    rows = None if whole else _slice_of(md, groups, expected)
    counted = analysis.where is None and analysis.early_limit is None
    # polars reads a struct column whole: one read in part is pyarrow's.
    polars_may = (whole or rows is not None) and not plan.fields and (
        not foreign_time_zones(pa.schema([schema.field(c) for c in columns])))
    polars_rows: int | None = None  # what polars decoded, unfiltered, when it was tried
    # polars filters while decoding, uncounted: for a slice, only where the footer's
    # counts agree with each other.
    filtered = not counted and (rows is None or plan.footer.counts_agree)
    if polars_may and (not filtered or not nested_columns(md) & set(columns)):
        frame = _try_polars(obj, image, columns, schema, analysis if filtered else None,
                            rows=rows)
        if frame is not None and filtered:
            return frame, "polars"
        if frame is not None and frame.height == expected:
            return collect(analysis.prefilter(frame.lazy())), "polars"
        polars_rows = None if frame is None else frame.height
    try:
        pf = pq.ParquetFile(image.source(), metadata=md, coerce_int96_timestamp_unit=INT96_UNIT)
        # One row group at a time (as fast), so each one's rows are counted.
        pieces = [pf.read_row_group(g, columns=plan.read_columns, use_threads=True)
                  for g in groups]
    except (OSError, pa.ArrowException, ValueError) as e:
        raise ObjectFormatError(f"corrupt Parquet data: {e}", uri=obj.uri) from e
    wrong = next(((g, t.num_rows) for g, t in zip(groups, pieces, strict=True)
                  if t.num_rows != md.row_group(g).num_rows), None)
    if wrong is not None and polars_may and polars_rows is None:
        frame = _try_polars(obj, image, columns, schema, None, rows=rows)
        if frame is not None and frame.height == expected:
            return collect(analysis.prefilter(frame.lazy())), "polars"
        polars_rows = None if frame is None else frame.height
    if wrong is not None:
        g, n = wrong
        also = ("" if polars_rows is None else f", and polars {polars_rows} of the "
                f"{expected} in row groups {ranges_text(groups)}")
        raise ObjectFormatError(
            f"row group {g} holds {md.row_group(g).num_rows} rows by the footer, but "
            f"pyarrow decoded {n}{also}; no result is built from fewer rows", uri=obj.uri)
    table = pa.concat_tables(pieces)
    # The row groups stay separate chunks: rechunking would copy the whole decoded table
    # once more, at twice its memory for a moment.
    return collect(analysis.prefilter(to_polars(table).lazy())), "pyarrow"


def _slice_of(md: pq.FileMetaData, groups: Sequence[int],
              rows: int) -> tuple[int, int] | None:
    """(first row, ``rows``) of ``groups``, which hold ``rows``, when they are consecutive,
    else None."""
    if list(groups) != list(range(groups[0], groups[0] + len(groups))):
        return None
    return sum(md.row_group(g).num_rows for g in range(groups[0])), rows


def _try_polars(obj: ObjectRef, image: Image, columns: list[str], schema: pa.Schema,
                analysis: Analysis | None, *, rows: tuple[int, int] | None = None
                ) -> pl.DataFrame | None:
    """polars' decode of the image (of its ``rows``, a slice, when given), filtered by
    ``analysis`` when given, as the pyarrow path types it; None when polars fails or
    panics."""
    want = _polars_schema(schema, tuple(columns))
    try:
        lf = pl.scan_parquet(image.reader_source(), glob=False,
                             hive_partitioning=False).select(columns)
        if rows is not None:
            lf = lf.slice(*rows)
        have = lf.collect_schema()
        casts = [pl.col(c).cast(t) for c, t in want.items() if have[c] != t]
        if casts:
            lf = lf.with_columns(casts)
        return (analysis.prefilter(lf) if analysis is not None else lf).collect()
    except BaseException as e:
        if not (isinstance(e, Exception) or is_native_panic(e)):
            raise
        logger.debug("polars could not decode; pyarrow decodes",
                     extra={"uri": obj.uri, "error": first_line(e)})
        return None


@functools.lru_cache(maxsize=64)
def _polars_schema(schema: pa.Schema, columns: tuple[str, ...]) -> pl.Schema:
    """The polars types the pyarrow path gives ``columns`` of ``schema``: once per schema
    (the objects of a prefix share theirs; building it costs about 0.25 ms an object)."""
    return to_polars(compatible(schema).empty_table().select(list(columns))).schema


def ranges_text(groups: Iterable[int]) -> str:
    """Row group indexes as ``0-3, 7``."""
    runs: list[list[int]] = []
    for g in groups:
        if runs and g == runs[-1][1] + 1:
            runs[-1][1] = g
        else:
            runs.append([g, g])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
