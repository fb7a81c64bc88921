"""Page-level pruning from the Parquet page index, and decoding of the pages it keeps.

A file written with a page index (``write_page_index=True`` in pyarrow, the default in
parquet-mr and arrow-rs) records, per column chunk, each data page's min/max and null count
(``ColumnIndex``) and each page's offset, size and first row (``OffsetIndex``). Both live
outside the footer, so they cost one more GET; the footer gives their locations. pyarrow
reports only whether they exist, so the Parquet Thrift IDL (``parquet.thrift``, from
apache/parquet-format) is loaded with thriftpy2 to read them and to frame the kept pages.

Selection, for each kept row group:

1. The row group is cut into segments at every page boundary of the predicate's columns.
   A segment is kept when the predicate may match on the statistics of the pages holding it
   (polars judges every segment of every row group at once, :func:`.predicate.may_match_each`).
2. For each needed column, the pages overlapping a kept segment are fetched, with the
   chunk's dictionary page.

Decoding: the kept pages of one column chunk, behind its dictionary page, form a valid
one-column Parquet file (each page carries its own header and value count); pyarrow decodes
it, and the kept segments' rows are sliced out of each column, so every column holds the
same rows. polars then applies the filter to those rows as it does to whole row groups.

Only flat schemas take this path (a nested column's pages do not start at row boundaries in
a way this reader relies on), and only column types whose page statistics are read here.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from s3slice.core import ranges as _ranges
from s3slice.core.errors import ObjectFormatError
from s3slice.core.ranges import Range
from s3slice.parquet import plan as _plan
from s3slice.parquet import thrift as _thrift
from s3slice.parquet.arrow import empty_table, int96_timestamps
from s3slice.parquet.footer import INT96_UNIT, MAGIC, Footer
from s3slice.query.pruning import predicate as P

#: Index ranges closer than this are read in one GET (whatever ``max_gap`` says).
INDEX_GAP = 1 << 20
#: The page index is used only when the footer is at most this share of the row groups'
#: bytes (see :func:`parse_pays`).
MAX_FOOTER_SHARE = 1 / 256


# --------------------------------------------------------------------------- selection


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChunkPages:
    """The kept pages of one column chunk."""

    column: str
    dictionary: Range | None  # the dictionary page, if the chunk has one
    pages: tuple[Range, ...]  # kept data pages, in file order
    rows: tuple[Range, ...]  # the rows (within the row group) each kept page holds

    @property
    def ranges(self) -> list[Range]:
        return ([self.dictionary] if self.dictionary else []) + list(self.pages)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PagePlan:
    """What to read of one Parquet object, page by page."""

    metadata: Any = dataclasses.field(repr=False)  # the footer as Thrift objects
    row_groups: tuple[int, ...]  # row groups with at least one kept segment
    segments: dict[int, tuple[Range, ...]]  # per row group, the kept rows (half-open)
    chunks: dict[int, tuple[ChunkPages, ...]]  # per row group, one per needed column
    needed_bytes: int
    pages_kept: int
    pages_total: int

    @property
    def rows(self) -> int:
        return sum(b - a for segs in self.segments.values() for a, b in segs)

    def fetch_ranges(self) -> list[Range]:
        return [r for g in self.row_groups for c in self.chunks[g] for r in c.ranges]


@dataclasses.dataclass(frozen=True)
class IndexLocations:
    """Where the page index of the kept row groups lives, per (row group, column name)."""

    metadata: Any = dataclasses.field(repr=False)  # the footer as Thrift objects
    column_index: dict[tuple[int, str], Range]
    offset_index: dict[tuple[int, str], Range]

    def ranges(self) -> list[Range]:
        return [*self.column_index.values(), *self.offset_index.values()]


def _flat(md: pq.FileMetaData) -> bool:
    """Every column is a top-level, non-repeated leaf (so a page starts at a row)."""
    columns = [md.schema.column(i) for i in range(md.num_columns)]
    return all(c.max_repetition_level == 0 and c.max_definition_level <= 1
               and "." not in c.path for c in columns)


def indexed(footer: Footer, plan: _plan.Plan, predicate: P.Pred) -> bool:
    """Whether ``plan`` can be read page by page, from what pyarrow's footer says.

    It cannot when the predicate names no column, the schema is nested, or a kept row group
    lacks an offset index for a needed column or a column index for every predicate column.
    """
    md = footer.metadata
    filters = P.columns_of(predicate)
    if not filters or not plan.row_groups or not _flat(md):
        return False
    names = list(_thrift.column_positions(md))
    if not filters <= set(names):
        return False
    wanted = {*plan.columns, *filters}
    usable = False
    for g in plan.row_groups:
        rg = md.row_group(g)
        for i, name in enumerate(names):
            col = rg.column(i)
            if name in wanted and not col.has_offset_index:
                return False
            usable = usable or (name in filters and col.has_column_index)
    return usable


def parse_pays(footer: Footer, plan: _plan.Plan) -> bool:
    """Whether parsing the footer with thriftpy2 (where the index locations are) may pay.

    Its compact protocol runs in Python: 0.67 to 0.94 µs a footer byte here (2.5 MB of
    footer, 2,000 row groups: 1.7 s). Fetching and decoding a needed byte costs a few ns
    (2.4 ns a byte saved, in the benchmark's sorted-indexed case), so a footer over
    ``MAX_FOOTER_SHARE`` of the needed bytes costs more to parse than the pages could ever
    save. A footer parsed already (kept in the footer cache) costs nothing.
    """
    return "thrift" in footer.memo or footer.length <= MAX_FOOTER_SHARE * plan.needed_bytes


def locate(footer: Footer, plan: _plan.Plan, predicate: P.Pred, *,
           uri: str) -> IndexLocations:
    """The page-index ranges a page-level read of ``plan`` needs (one :func:`indexed`
    accepts)."""
    filters = P.columns_of(predicate)
    needed = set(plan.columns)
    names = list(_thrift.column_positions(footer.metadata))
    fmd = _thrift.thrift_metadata(footer, uri)
    column_index: dict[tuple[int, str], Range] = {}
    offset_index: dict[tuple[int, str], Range] = {}

    def span(offset: int | None, length: int | None) -> Range:
        if offset is None or length is None or offset < 0 or length <= 0 \
                or offset + length > footer.data_end:
            raise ObjectFormatError("corrupt Parquet metadata: a page index lies outside "
                                    f"the data (0-{footer.data_end})", uri=uri)
        return (offset, offset + length)

    for g in plan.row_groups:
        for name, cc in zip(names, fmd.row_groups[g].columns, strict=True):
            if name in filters and cc.column_index_offset is not None:
                column_index[(g, name)] = span(cc.column_index_offset, cc.column_index_length)
            if name in needed or name in filters:
                offset_index[(g, name)] = span(cc.offset_index_offset, cc.offset_index_length)
    return IndexLocations(fmd, column_index, offset_index)


def page_stats(ci: Any, col: pq.ColumnSchema, page_rows: Sequence[int],
               dtype: pl.DataType | None = None) -> list[P.ColumnStats]:
    """Statistics of each page of a column chunk, from its ``ColumnIndex``; the bounds
    are values of ``dtype``, the column's polars type (none without it)."""
    n = len(page_rows)
    nulls = ci.null_counts if ci.null_counts and len(ci.null_counts) == n else [None] * n
    null_pages = ci.null_pages if ci.null_pages and len(ci.null_pages) == n else [False] * n
    lows = _plan.plain_bounds(ci.min_values, col, dtype) if len(ci.min_values or ()) == n else None
    highs = _plan.plain_bounds(ci.max_values, col, dtype) if len(ci.max_values or ()) == n else None
    out: list[P.ColumnStats] = []
    for i in range(n):
        if null_pages[i]:
            out.append(P.ColumnStats(num_rows=page_rows[i], null_count=page_rows[i]))
            continue
        lo = hi = None
        if lows is not None and highs is not None:
            lo, hi = lows[i], highs[i]
        out.append(P.ColumnStats(num_rows=page_rows[i], min=lo, max=hi,
                                 null_count=nulls[i], dtype=dtype))
    return out


def _starts(oi: Any, num_rows: int, where: str, uri: str) -> list[int]:
    """First row of each page, checked to rise from 0 and stay inside the row group."""
    starts = [loc.first_row_index for loc in oi.page_locations or ()]
    if not starts or starts[0] != 0 or any(b <= a for a, b in itertools.pairwise(starts)) \
            or starts[-1] >= num_rows:
        raise ObjectFormatError(f"corrupt Parquet offset index of {where}", uri=uri)
    return starts


def select(footer: Footer, plan: _plan.Plan, predicate: P.Pred, where: IndexLocations,
           index: Callable[[Range], bytes], *, uri: str) -> PagePlan:
    """Keep the segments of each row group whose pages may match, and their pages."""
    md = footer.metadata
    schema = md.schema
    positions = _thrift.column_positions(md)
    filters = P.columns_of(predicate)
    segments: dict[int, tuple[Range, ...]] = {}
    chunks: dict[int, tuple[ChunkPages, ...]] = {}
    kept_pages = all_pages = 0
    indexed = {*plan.columns, *filters}  # each has an offset index in every kept row group
    types = _plan.stats_types(footer)
    offsets_of: dict[int, dict[str, Any]] = {}  # per row group, then as offsets, starts_of
    starts_by_group: dict[int, dict[str, list[int]]] = {}
    units: list[tuple[int, int, int, dict[str, P.ColumnStats]]] = []
    for g in plan.row_groups:
        num_rows = md.row_group(g).num_rows
        offsets = offsets_of[g] = {
            name: _thrift.read_struct("OffsetIndex", index(where.offset_index[(g, name)]), uri)
            for name in indexed}
        starts_of = starts_by_group[g] = {
            name: _starts(oi, num_rows, f"column {name!r} of row group {g}", uri)
            for name, oi in offsets.items()}
        fallback = _plan.row_group_stats(md, g, filters, types)
        per_column: dict[str, tuple[list[int], list[P.ColumnStats]]] = {}
        for name in filters:
            r = where.column_index.get((g, name))
            if r is None:
                continue
            starts = starts_of[name]
            sizes = [b - a for a, b in itertools.pairwise([*starts, num_rows])]
            ci = _thrift.read_struct("ColumnIndex", index(r), uri)
            per_column[name] = (starts, page_stats(ci, schema.column(positions[name]), sizes,
                                                   types.get(name)))
        bounds = sorted({0, num_rows, *(s for starts, _ in per_column.values() for s in starts)})
        for a, b in itertools.pairwise(bounds):
            stats: dict[str, P.ColumnStats] = dict(fallback)
            for name, (starts, pstats) in per_column.items():
                stats[name] = pstats[bisect.bisect_right(starts, a) - 1]
            units.append((g, a, b, stats))
    matches = P.may_match_each(predicate, [u[3] for u in units])
    kept_of: dict[int, list[Range]] = {g: [] for g in plan.row_groups}
    for (g, a, b, _), ok in zip(units, matches, strict=True):
        if ok and kept_of[g] and kept_of[g][-1][1] == a:
            kept_of[g][-1] = (kept_of[g][-1][0], b)
        elif ok:
            kept_of[g].append((a, b))
    for g in plan.row_groups:
        num_rows = md.row_group(g).num_rows
        offsets, starts_of, kept = offsets_of[g], starts_by_group[g], kept_of[g]
        all_pages += sum(len(offsets[name].page_locations or ()) for name in plan.columns)
        if not kept:
            continue
        segments[g] = tuple(kept)
        kept_ends = [b for _, b in kept]  # kept is sorted and disjoint
        cols: list[ChunkPages] = []
        for name in plan.columns:
            oi = offsets[name]
            starts = starts_of[name]
            ends = [*starts[1:], num_rows]
            chunk = _plan.chunk_range(md, g, positions[name], footer=footer, uri=uri)
            locs = oi.page_locations
            pages: list[Range] = []
            rows: list[Range] = []
            for loc, a, b in zip(locs, starts, ends, strict=True):
                lo, hi = loc.offset, loc.offset + loc.compressed_page_size
                if lo < chunk[0] or hi > chunk[1] or loc.compressed_page_size <= 0:
                    raise ObjectFormatError(f"corrupt Parquet offset index of column {name!r} "
                                            f"of row group {g}: a page lies outside its chunk",
                                            uri=uri)
                i = bisect.bisect_right(kept_ends, a)  # the first kept segment ending after a
                if i < len(kept) and kept[i][0] < b:
                    pages.append((lo, hi))
                    rows.append((a, b))
            kept_pages += len(pages)
            first = locs[0].offset
            cols.append(ChunkPages(column=name, pages=tuple(pages), rows=tuple(rows),
                                   dictionary=(chunk[0], first) if first > chunk[0] else None))
        chunks[g] = tuple(cols)
    needed = sum(_ranges.total(c.ranges) for cs in chunks.values() for c in cs)
    return PagePlan(metadata=where.metadata,
                    row_groups=tuple(g for g in plan.row_groups if g in segments),
                    segments=segments, chunks=chunks, needed_bytes=needed,
                    pages_kept=kept_pages, pages_total=all_pages)


# ---------------------------------------------------------------------------- decoding


def _chunk_file(fmd: Any, g: int, position: int, pages: ChunkPages,
                read: Callable[[Range], bytes]) -> bytes:
    """A one-column Parquet file of the kept pages of one column chunk."""
    t = _thrift.thrift()
    pieces = [MAGIC]
    dict_offset = None
    if pages.dictionary is not None:
        dict_offset = len(MAGIC)
        pieces.append(read(pages.dictionary))
    data_offset = sum(map(len, pieces))
    pieces.extend(read(r) for r in pages.pages)
    size = sum(map(len, pieces))
    rows = sum(b - a for a, b in pages.rows)
    cc = fmd.row_groups[g].columns[position]
    element = fmd.schema[1 + position]
    if element.type == t.Type.INT96:  # its 12 bytes, for _arrow.int96_timestamps
        element = t.SchemaElement(name=element.name, repetition_type=element.repetition_type,
                                  type=t.Type.FIXED_LEN_BYTE_ARRAY, type_length=12)
    md = t.ColumnMetaData(
        type=element.type, encodings=cc.meta_data.encodings,
        path_in_schema=cc.meta_data.path_in_schema, codec=cc.meta_data.codec,
        num_values=rows, total_uncompressed_size=cc.meta_data.total_uncompressed_size,
        total_compressed_size=size - len(MAGIC), data_page_offset=data_offset,
        dictionary_page_offset=dict_offset)
    chunk = t.ColumnChunk(file_offset=len(MAGIC), meta_data=md)
    group = t.RowGroup(columns=[chunk], total_byte_size=size, num_rows=rows)
    root = t.SchemaElement(name="schema", num_children=1)
    meta_out = t.FileMetaData(version=fmd.version, schema=[root, element],
                              num_rows=rows, row_groups=[group], created_by=fmd.created_by)
    return b"".join([*pieces, _thrift.file_footer(meta_out)])


def decode(footer: Footer, pages: PagePlan, read: Callable[[Range], bytes],
           schema: pa.Schema, *, uri: str) -> pa.Table:
    """The kept rows of the needed columns (``schema``'s fields), in file order."""
    md = footer.metadata
    fmd = pages.metadata
    positions = _thrift.column_positions(md)
    tables: list[pa.Table] = []
    for g in pages.row_groups:
        keep = pages.segments[g]
        arrays: list[pa.ChunkedArray[Any]] = []
        for cp in pages.chunks[g]:
            data = _chunk_file(fmd, g, positions[cp.column], cp, read)
            try:
                column = _rows(pq.read_table(
                    pa.BufferReader(data), coerce_int96_timestamp_unit=INT96_UNIT,
                ).column(0), cp.rows, keep)
                typ = schema.field(cp.column).type
                if column.type == pa.binary(12) and pa.types.is_timestamp(typ):
                    column = int96_timestamps(column, typ)  # INT96, exactly
            except (OSError, pa.ArrowException, ValueError) as e:
                raise ObjectFormatError(f"corrupt Parquet data in column {cp.column!r} of "
                                        f"row group {g}: {e}", uri=uri) from e
            arrays.append(_cast(column, typ))
        tables.append(pa.Table.from_arrays(arrays, schema=schema))
    if not tables:
        return empty_table(schema)
    return pa.concat_tables(tables)


def _rows(column: pa.ChunkedArray[Any], held: Iterable[Range], keep: Sequence[Range]
          ) -> pa.ChunkedArray[Any]:
    """The ``keep`` rows of a column that holds the rows ``held`` (concatenated)."""
    starts: list[int] = []  # row-group row where each held run begins
    at: list[int] = []  # where it begins in ``column``
    pos = 0
    for a, b in held:
        starts.append(a)
        at.append(pos)
        pos += b - a
    if pos != len(column):
        raise ValueError(f"decoded {len(column)} rows where the offset index says {pos}")
    pieces = []
    for a, b in keep:
        k = bisect.bisect_right(starts, a) - 1
        pieces.append(column.slice(at[k] + a - starts[k], b - a))
    return pa.chunked_array([c for p in pieces for c in p.chunks], type=column.type)


def _cast(column: pa.ChunkedArray[Any], typ: pa.DataType) -> pa.ChunkedArray[Any]:
    return column if column.type == typ else column.cast(typ)
