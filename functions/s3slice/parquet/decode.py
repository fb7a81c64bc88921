"""Decoding the needed columns of a Parquet object's row groups, held in an image, into
a polars frame with the query's row filter applied; no result from fewer rows than the
footer declares."""

from __future__ import annotations

import base64
import functools
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from s3slice.core.errors import ObjectFormatError, first_line, is_native_panic
from s3slice.core.model import ObjectRef
from s3slice.fetch.image import Image, Unwritten
from s3slice.parquet import thrift as _thrift
from s3slice.parquet.arrow import (
    compatible,
    empty_table,
    foreign_time_zones,
    int96_timestamps,
    to_polars,
)
from s3slice.parquet.footer import FOOTER_TRAILER, INT96_UNIT, MAGIC, Footer, nested_columns
from s3slice.parquet.plan import Plan, polars_range
from s3slice.query.analysis import Analysis, collect

logger = logging.getLogger("s3slice")


def empty(plan: Plan, analysis: Analysis) -> pl.DataFrame:
    """No rows, in the columns and types a read of ``plan`` gives."""
    table = empty_table(plan.footer.arrow_schema).select(list(plan.columns))
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
    # INT96 columns are decoded from their bytes (int96_timestamps), by pyarrow's read.
    int96 = int96_metadata(plan.footer, obj.uri)
    exact96 = sorted(int96[1] & set(columns)) if int96 is not None else []
    # polars reads a struct column whole: one read in part is pyarrow's.
    polars_may = (whole or rows is not None) and not plan.fields and not exact96 and (
        not foreign_time_zones(pa.schema([schema.field(c) for c in columns]))) and (
        polars_held(image, plan, groups))
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
        pf = pq.ParquetFile(image.source(), metadata=int96[0] if int96 and exact96 else md,
                            coerce_int96_timestamp_unit=INT96_UNIT)
        # One row group at a time (as fast), so each one's rows are counted.
        pieces = [pf.read_row_group(g, columns=plan.read_columns, use_threads=True)
                  for g in groups]
    except Unwritten as e:
        raise ObjectFormatError(
            f"corrupt Parquet metadata: pyarrow's reader reached {e}, outside the column "
            "chunks' extents in the footer; nothing unfetched is decoded", uri=obj.uri) from e
    except (OSError, pa.ArrowException, ValueError) as e:
        # What pyarrow cannot decode (DuckDB's DELTA_BINARY_PACKED, for one) polars may:
        # unfiltered, counted, then filtered, as where pyarrow's count is wrong.
        frame = None if polars_rows is not None else _polars_instead(
            obj, image, plan, groups, rows, whole=whole, exact96=bool(exact96))
        if frame is not None and frame.height == expected:
            return collect(analysis.prefilter(frame.lazy())), "polars"
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
    for name in exact96:
        try:
            exact = int96_timestamps(table[name], schema.field(name).type)
        except ValueError as e:
            raise ObjectFormatError(f"column {name!r}: {e}", uri=obj.uri) from e
        table = table.set_column(table.schema.get_field_index(name), name, exact)
    # The row groups stay separate chunks: rechunking would copy the whole decoded table
    # once more, at twice its memory for a moment.
    return collect(analysis.prefilter(to_polars(table).lazy())), "pyarrow"


def _polars_instead(obj: ObjectRef, image: Image, plan: Plan, groups: Sequence[int],
                    rows: tuple[int, int] | None, *, whole: bool, exact96: bool
                    ) -> pl.DataFrame | None:
    """polars' unfiltered decode of the plan's columns in ``groups`` where pyarrow failed,
    when polars may read them (None otherwise, or when it fails too): a struct column
    read in part by pyarrow is read whole, when the image holds all of it."""
    columns = list(plan.columns)
    schema = plan.footer.arrow_schema
    if not (whole or rows is not None) or exact96 or foreign_time_zones(
            pa.schema([schema.field(c) for c in columns])) or not polars_held(
            image, plan, groups):
        return None
    return _try_polars(obj, image, columns, schema, None, rows=rows)


def polars_held(image: Image, plan: Plan, groups: Sequence[int]) -> bool:
    """Whether ``image`` holds every byte polars' reader reads for the plan's columns in
    ``groups`` (each leaf of each column: :func:`~s3slice.parquet.plan.polars_range`, which
    a footer whose offsets disagree may put outside what pyarrow reads and the plan
    fetched). polars reads a ``bytes`` image in place, unguarded: where it does not hold
    them, polars is not used, and pyarrow's guarded read decodes or refuses."""
    if image.holds(0, image.size):
        return True
    md = plan.footer.metadata
    wanted = set(plan.columns)
    leaves = [i for i, top in enumerate(plan.footer.leaf_tops) if top in wanted]
    return all(image.holds(*polars_range(md, g, i)) for g in groups for i in leaves)


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
    want = polars_schema(schema, tuple(columns))
    try:
        lf = pl.scan_parquet(image.reader_source(), glob=False,
                             hive_partitioning=False).select(columns)
        if rows is not None:
            lf = lf.slice(*rows)
        have = lf.collect_schema()
        casts = [pl.col(c).cast(t) for c, t in want.items() if have[c] != t]
        if casts:
            lf = lf.with_columns(casts)
        # A scan prunes by statistics: it is handed only what they judge exactly.
        return analysis.scanned(lf) if analysis is not None else lf.collect()
    except BaseException as e:
        if not (isinstance(e, Exception) or is_native_panic(e)):
            raise
        logger.debug("polars could not decode; pyarrow decodes",
                     extra={"uri": obj.uri, "error": first_line(e)})
        return None


@functools.lru_cache(maxsize=64)
def polars_schema(schema: pa.Schema, columns: tuple[str, ...]) -> pl.Schema:
    """The polars types the pyarrow path gives ``columns`` of ``schema``: once per schema
    (the objects of a prefix share theirs; building it costs about 0.25 ms an object)."""
    return to_polars(empty_table(compatible(schema)).select(list(columns))).schema


def ranges_text(groups: Iterable[int]) -> str:
    """Row group indexes as ``0-3, 7``."""
    runs: list[list[int]] = []
    for g in groups:
        if runs and g == runs[-1][1] + 1:
            runs[-1][1] = g
        else:
            runs.append([g, g])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def int96_metadata(footer: Footer, uri: str) -> tuple[pq.FileMetaData, frozenset[str]] | None:
    """The footer with each INT96 leaf retyped FIXED_LEN_BYTE_ARRAY(12) (the same PLAIN
    and dictionary bytes), so pyarrow hands over its 12 bytes for
    :func:`~s3slice.parquet.arrow.int96_timestamps`, and the top-level columns holding such a
    leaf (at the top, or inside structs, lists and maps); None when there is none. Once
    per footer."""
    memo = footer.memo.get("int96")
    if memo is None:
        memo = footer.memo.setdefault("int96", (_int96_as_bytes(footer, uri),))
    return memo[0]  # type: ignore[no-any-return]


def _int96_as_bytes(footer: Footer, uri: str) -> tuple[pq.FileMetaData, frozenset[str]] | None:
    t = _thrift.thrift()
    # A fresh parse: the footer's own Thrift objects are shared (footer cache, page index).
    fmd = _thrift.read_struct("FileMetaData", footer.raw[:-FOOTER_TRAILER], uri)
    paths: set[tuple[str, ...]] = set()

    def walk(i: int, path: tuple[str, ...]) -> int:
        """Retype the INT96 leaves of element ``i``'s subtree; the index after it."""
        element = fmd.schema[i]
        if not element.num_children:
            if element.type == t.Type.INT96:
                element.type, element.type_length = t.Type.FIXED_LEN_BYTE_ARRAY, 12
                paths.add(path)
            return i + 1
        j = i + 1
        for _ in range(element.num_children):
            j = walk(j, (*path, fmd.schema[j].name))
        return j
    i = 1
    for _ in range(fmd.schema[0].num_children or 0):
        i = walk(i, (fmd.schema[i].name,))
    if not paths:
        return None
    for group in fmd.row_groups or []:
        for chunk in group.columns or []:
            meta = chunk.meta_data
            if meta is not None and tuple(meta.path_in_schema) in paths:
                meta.type, meta.statistics = t.Type.FIXED_LEN_BYTE_ARRAY, None
    names = {p[0] for p in paths}
    stored = fmd.key_value_metadata
    fmd.key_value_metadata = [kv for kv in stored or [] if kv.key != "ARROW:schema"] or None
    try:
        bare = pq.read_metadata(pa.BufferReader(MAGIC + _thrift.file_footer(fmd)))
        if stored:
            fmd.key_value_metadata = _arrow_schema_as_bytes(
                stored, bare.schema.to_arrow_schema(), names)
        md = pq.read_metadata(pa.BufferReader(MAGIC + _thrift.file_footer(fmd)))
    except (OSError, pa.ArrowException, ValueError) as e:
        raise ObjectFormatError(f"corrupt Parquet footer: {e}", uri=uri) from e
    return md, frozenset(names)


def _arrow_schema_as_bytes(items: list[Any], bare: pa.Schema, names: set[str]) -> list[Any]:
    """The key-value metadata, its stored Arrow schema (pyarrow's) typing each INT96 leaf
    of ``names`` as ``fixed_size_binary(12)`` (where ``bare``, the schema read without it,
    has one), or dropped when it cannot be read."""
    out = []
    for kv in items:
        if kv.key == "ARROW:schema":
            try:
                schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(kv.value)))
                for name in names:
                    i, j = schema.get_field_index(name), bare.get_field_index(name)
                    if i >= 0 and j >= 0:
                        schema = schema.set(i, schema.field(i).with_type(
                            _with_bytes(schema.field(i).type, bare.field(j).type)))
                kv = _thrift.thrift().KeyValue(key=kv.key, value=base64.b64encode(
                    schema.serialize().to_pybytes()).decode())
            except (ValueError, KeyError, pa.ArrowException):
                continue
        out.append(kv)
    return out


def _with_bytes(stored: Any, bare: Any) -> Any:
    """``stored`` with ``fixed_size_binary(12)`` wherever ``bare`` has it for a timestamp."""
    if bare == pa.binary(12):
        return bare if pa.types.is_timestamp(stored) else stored
    if pa.types.is_struct(stored) and pa.types.is_struct(bare):
        return pa.struct([
            f if bare.get_field_index(f.name) < 0 else f.with_type(_with_bytes(
                f.type, bare.field(bare.get_field_index(f.name)).type)) for f in stored])
    if (pa.types.is_list(stored) or pa.types.is_large_list(stored)) and (
            pa.types.is_list(bare) or pa.types.is_large_list(bare)):
        item = stored.value_field.with_type(_with_bytes(stored.value_type, bare.value_type))
        return pa.large_list(item) if pa.types.is_large_list(stored) else pa.list_(item)
    if pa.types.is_map(stored) and pa.types.is_map(bare):
        return pa.map_(stored.key_field.with_type(_with_bytes(stored.key_type, bare.key_type)),
                       stored.item_field.with_type(_with_bytes(stored.item_type,
                                                               bare.item_type)))
    return stored
