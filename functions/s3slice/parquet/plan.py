"""The read planner: a pure function of (footer, query, settings) to the bytes to fetch.

Nothing here touches the network. Given the footer (parsed by pyarrow), the pruning
predicate and the needed columns, it keeps the row groups that could hold a matching row,
lists the byte ranges of their needed column chunks (dictionary pages included), coalesces
neighbours closer than ``max_gap`` and splits what is at least twice ``part_size`` into
parallel parts. The plan knows ``needed_bytes`` before any data moves.
"""

from __future__ import annotations

import dataclasses
import re
import struct
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from s3slice.core import ranges as _ranges
from s3slice.core.errors import ObjectFormatError, is_native_panic
from s3slice.core.ranges import Range
from s3slice.core.settings import Settings
from s3slice.parquet import thrift as _thrift
from s3slice.parquet.arrow import compatible, empty_table, to_polars
from s3slice.parquet.footer import MAGIC, Footer, leaf_tops, under, under_any
from s3slice.query.pruning import predicate as P

# ------------------------------------------------------------------------ statistics


def stats_types(footer: Footer) -> dict[str, pl.DataType]:
    """The polars type of each top-level column as the decoders give it (what the filter
    compares), once per footer."""
    types = footer.memo.get("stats_types")
    if types is None:
        types = footer.memo.setdefault("stats_types", polars_types(footer.arrow_schema))
    return types  # type: ignore[no-any-return]


def polars_types(schema: pa.Schema) -> dict[str, pl.DataType]:
    """The polars type of each column of ``schema`` (none when polars cannot hold it: an
    error, or a panic, as polars' import of a ``month_day_nano_interval`` is)."""
    whole = _types_of(compatible(schema))
    if whole is not None:
        return whole
    out: dict[str, pl.DataType] = {}
    for field in compatible(schema):  # one at a time: the others still prune
        out.update(_types_of(pa.schema([field])) or {})
    return out


def _types_of(schema: pa.Schema) -> dict[str, pl.DataType] | None:
    try:
        return dict(to_polars(empty_table(schema)).schema)
    except BaseException as e:
        if isinstance(e, (pa.ArrowException, pl.exceptions.PolarsError, ValueError,
                          TypeError)) or is_native_panic(e):
            return None
        raise


_UNIT_NAMES = {"milliseconds": "ms", "microseconds": "us", "nanoseconds": "ns"}


def bounds_type(col: pq.ColumnSchema, dtype: pl.DataType | None) -> pl.DataType | None:
    """``dtype`` when a column's Parquet statistics are values of it exactly (a timestamp's
    physical integers when the units agree); None when they are not judged."""
    if dtype is None or col.physical_type == "INT96" or (
            col.physical_type == "FIXED_LEN_BYTE_ARRAY" and col.logical_type.type != "DECIMAL"):
        return None
    if isinstance(dtype, pl.Datetime):
        text = str(col.logical_type)
        unit = next((u for name, u in _UNIT_NAMES.items() if name in text), None)
        if col.logical_type.type != "TIMESTAMP" or unit != dtype.time_unit:
            return None
    if isinstance(dtype, pl.Date) and col.logical_type.type != "DATE":
        return None
    return dtype


def plain_bounds(raw: Sequence[bytes], col: pq.ColumnSchema, dtype: pl.DataType | None
                 ) -> list[Any] | None:
    """Minimums or maximums in plain encoding (a page index's) as values of ``dtype`` (a
    timestamp's physical integers), or None when they are not judged."""
    dtype = bounds_type(col, dtype)
    if dtype is None:
        return None
    logical = col.logical_type.type
    try:
        if col.physical_type == "BYTE_ARRAY":
            if _thrift.is_text(col):
                return [b.decode() for b in raw]
            return list(raw) if logical == "NONE" else None
        if col.physical_type not in _thrift.PLAIN:
            return None
        fmt, width = _thrift.PLAIN[col.physical_type]
        if any(len(b) != width for b in raw):
            return None
        if _thrift.is_unsigned(col):
            fmt = fmt.upper()  # unsigned: compared as unsigned (TypeDefinedOrder)
        numbers = [struct.unpack(fmt, b)[0] for b in raw]
        if logical in ("NONE", "INT", "TIMESTAMP"):
            return numbers
        if logical == "DATE":
            # the plain bytes as the date32 they are (pa.array of a list imports
            # pandas where it is installed)
            days = pa.Array.from_buffers(pa.date32(), len(raw), [None, pa.py_buffer(b"".join(raw))])
            return days.to_pylist()
    except (UnicodeDecodeError, struct.error, ValueError, pa.ArrowException):
        return None
    return None


def row_group_stats(md: pq.FileMetaData, index: int, columns: Iterable[str],
                    types: Mapping[str, pl.DataType] | None = None
                    ) -> dict[str, P.ColumnStats]:
    """Statistics of the named top-level columns of one row group, their bounds typed by
    ``types`` (:func:`stats_types`; a column not there has none)."""
    wanted = set(columns)
    rg = md.row_group(index)
    out: dict[str, P.ColumnStats] = {}
    for i in range(rg.num_columns):
        col = rg.column(i)
        name = col.path_in_schema
        if name not in wanted:
            continue
        s = col.statistics
        if s is None:
            out[name] = P.ColumnStats(num_rows=rg.num_rows)
            continue
        dtype = bounds_type(md.schema.column(i), (types or {}).get(name))
        lo = hi = None
        if s.has_min_max and dtype is not None:
            try:
                if isinstance(dtype, pl.Datetime):
                    lo, hi = s.min_raw, s.max_raw
                else:
                    lo, hi = s.min, s.max
            except (ValueError, pa.ArrowException, UnicodeDecodeError):
                lo = hi = None
        out[name] = P.ColumnStats(
            num_rows=rg.num_rows, min=lo, max=hi, dtype=dtype,
            null_count=s.null_count if getattr(s, "has_null_count", True) else None)
    return out


def prune(md: pq.FileMetaData, predicate: P.Pred,
          types: Mapping[str, pl.DataType] | None = None) -> list[int]:
    """Indexes of the row groups that could hold a row satisfying ``predicate``."""
    columns = P.columns_of(predicate)
    if types is None:
        types = polars_types(md.schema.to_arrow_schema())
    groups = [i for i in range(md.num_row_groups) if md.row_group(i).num_rows > 0]
    if not columns:
        return groups
    units = [row_group_stats(md, i, columns, types) for i in groups]
    return [g for g, ok in zip(groups, P.may_match_each(predicate, units), strict=True) if ok]


# ------------------------------------------------------------------------------ ranges


#: pyarrow reads up to this many bytes past each column chunk of a file written by
#: parquet-mr before 1.2.9 (PARQUET-816: its sizes left out the dictionary page's header),
#: which then belong to the chunk: the plan fetches them too, or the decoder would read
#: bytes never fetched.
PARQUET_816_PADDING = 100
_PARQUET_816_FIXED = (1, 2, 9)
_CREATED_BY = re.compile(r"^(.*?)\s+version\s*([^(]*)")


def pads_chunks(footer: Footer) -> bool:
    """Whether pyarrow reads :data:`PARQUET_816_PADDING` bytes past each chunk of this
    object (its writer is parquet-mr before 1.2.9, as pyarrow parses ``created_by``; a
    version it cannot parse counts as old: a few bytes more are fetched, never fewer)."""
    pads = footer.memo.get("pads_chunks")
    if pads is None:
        m = _CREATED_BY.match((footer.metadata.created_by or "").strip().lower())
        old = False
        if m is not None and m.group(1).strip() == "parquet-mr":
            numbers = [int(n) for n in re.findall(r"\d+", m.group(2))[:3]]
            old = tuple(numbers + [0] * (3 - len(numbers))) < _PARQUET_816_FIXED
        pads = footer.memo.setdefault("pads_chunks", old)
    return bool(pads)


def chunk_range(md: pq.FileMetaData, rg: int, column: int, *, footer: Footer,
                uri: str, exact: bool = False) -> Range:
    """Bytes of one column chunk, its dictionary page included (half-open), as pyarrow
    reads them: with :data:`PARQUET_816_PADDING` more where it reads more (not when
    ``exact``: the chunk's own bytes by its metadata)."""
    return _extent(md.row_group(rg).column(column), rg, footer=footer, uri=uri, exact=exact)


def _extent(col: pq.ColumnChunkMetaData, rg: int, *, footer: Footer, uri: str,
            exact: bool = False) -> Range:
    start = col.data_page_offset
    dict_offset = col.dictionary_page_offset
    if col.has_dictionary_page and dict_offset is not None and 0 < dict_offset < start:
        start = dict_offset
    end = start + col.total_compressed_size
    if start < len(MAGIC) or end > footer.data_end or col.total_compressed_size < 0:
        raise ObjectFormatError(
            f"corrupt Parquet metadata: column {col.path_in_schema!r} of row group {rg} "
            f"spans bytes {start}-{end} outside the data (0-{footer.data_end})", uri=uri)
    if not exact and pads_chunks(footer):
        end = min(end + PARQUET_816_PADDING, footer.size)
    return (start, end)


def polars_range(md: pq.FileMetaData, rg: int, column: int) -> Range:
    """Bytes of one column chunk as polars' reader reads them: from the dictionary page's
    offset whenever the footer sets one (pyarrow: only where it lies before the data
    page), ``total_compressed_size`` long."""
    col = md.row_group(rg).column(column)
    start = col.dictionary_page_offset
    if start is None:
        start = col.data_page_offset
    return (start, start + col.total_compressed_size)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    """What to read of one Parquet object."""

    footer: Footer
    row_groups: tuple[int, ...]  # kept row groups, in file order
    columns: tuple[str, ...]  # top-level columns to decode, in schema order
    chunks: dict[int, tuple[Range, ...]]  # per kept row group, its column-chunk ranges
    needed_bytes: int  # sum of the needed column chunks
    #: Struct columns read only in part: each with the dotted fields it needs (``b`` →
    #: ``("b.c",)``); the chunks of its other fields are never fetched.
    fields: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    #: Per kept row group, what its needed chunks decode to, at least (:func:`decoded_size`).
    decoded: dict[int, int] = dataclasses.field(default_factory=dict)

    @property
    def read_columns(self) -> list[str]:
        """The columns as a Parquet reader selects them: ``b.c`` for a part of ``b``."""
        return [f for c in self.columns for f in self.fields.get(c, (c,))]

    def fetch_ranges(self, settings: Settings, *, row_groups: Sequence[int] | None = None,
                     held: Range | None = None, fill: bool = True) -> list[Range]:
        """Coalesced and split ranges for ``row_groups`` (all kept ones by default); with
        ``fill``, cut further until there are ``fill_parts`` (:func:`s3slice.core.ranges.split`)."""
        groups = self.row_groups if row_groups is None else row_groups
        merged = _ranges.coalesce((r for g in groups for r in self.chunks[g]), settings.max_gap)
        if held is not None:
            merged = _ranges.subtract(merged, held)
        if not fill:
            return _ranges.split(merged, settings.part_size)
        return _ranges.parts(merged, settings)

    def group_bytes(self, group: int) -> int:
        return _ranges.total(self.chunks[group])

    def keep(self, groups: Sequence[int]) -> Plan:
        """The same plan for only ``groups`` of its row groups."""
        chosen = set(groups)
        kept = tuple(g for g in self.row_groups if g in chosen)
        return dataclasses.replace(self, row_groups=kept,
                                   chunks={g: self.chunks[g] for g in kept},
                                   decoded={g: self.decoded[g] for g in kept
                                            if g in self.decoded},
                                   needed_bytes=sum(self.group_bytes(g) for g in kept))


def first_rows(md: pq.FileMetaData, groups: Sequence[int], rows: int) -> tuple[int, ...]:
    """The fewest leading ``groups`` that hold ``rows`` rows (all of them when they hold
    fewer): a limit with no filter needs no later row group."""
    taken: list[int] = []
    held = 0
    for g in groups:
        if held >= rows:
            break
        taken.append(g)
        held += md.row_group(g).num_rows
    return tuple(taken)


def cheapest_column(md: pq.FileMetaData, names: Sequence[str]) -> str:
    """The column with the fewest compressed bytes: what a row count needs to read."""
    sizes = dict.fromkeys(names, 0)
    tops = leaf_tops(md)  # a top-level name may hold a dot: never split a path
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        for i in range(rg.num_columns):
            top = tops[i]
            if top in sizes:
                sizes[top] += rg.column(i).total_compressed_size
    return min(names, key=lambda n: (sizes[n], names.index(n)))


def plan_parquet(footer: Footer, *, columns: Sequence[str], predicate: P.Pred,
                 uri: str, fields: Mapping[str, Iterable[str]] | None = None) -> Plan:
    """Plan the read of ``columns`` for rows that may satisfy ``predicate``; of a struct
    column in ``fields``, only the leaves under those dotted fields (``b.c``)."""
    md = footer.metadata
    names = footer.schema_names
    repeated = {n: k for n, k in Counter(names).items() if k > 1}
    if not columns and names:
        columns = [cheapest_column(md, [n for n in names if n not in repeated] or names)]
    wanted = set(columns)
    for name in sorted(wanted & repeated.keys()):
        raise ObjectFormatError(
            f"the object's schema names {repeated[name]} columns {name!r}: pyarrow and polars "
            "refuse to read such a column, and no name tells them apart (the object's other "
            "columns can be read)", uri=uri)
    leaves = [md.schema.column(i).path for i in range(md.num_columns)]
    parts_of = _struct_parts(leaves, {c: f for c, f in (fields or {}).items() if c in wanted})
    reads = {f for c in names if c in wanted for f in parts_of.get(c, (c,))}
    tops = footer.leaf_tops
    needed_leaves = {i for i, path in enumerate(leaves)
                     if _needed(path, tops[i], wanted, parts_of, reads)}
    kept = prune(md, predicate, stats_types(footer))
    chunks: dict[int, tuple[Range, ...]] = {}
    decoded: dict[int, int] = {}
    ordered = sorted(needed_leaves)
    for g in kept:
        rg = md.row_group(g)
        cols = [(i, rg.column(i)) for i in ordered if i < rg.num_columns]
        chunks[g] = tuple(_extent(col, g, footer=footer, uri=uri) for _, col in cols)
        decoded[g] = sum(_decoded(md, col, i) for i, col in cols)
    needed = sum(_ranges.total(r) for r in chunks.values())
    return Plan(footer=footer, row_groups=tuple(kept),
                columns=tuple(c for c in names if c in wanted), chunks=chunks,
                needed_bytes=needed, fields=parts_of, decoded=decoded)


#: Bytes a decoded value of each physical type takes, at least (a string: its offset).
_WIDTH = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8,
          "BYTE_ARRAY": 8}


def decoded_size(md: pq.FileMetaData, rg: int, column: int) -> int:
    """What one column chunk decodes to, at least, by its footer: its pages' uncompressed
    size, and its values at their type's width (run-length and dictionary encodings hold
    many values in few bytes: a chunk of a billion nulls is a few bytes). A dictionary-
    encoded string is at least as long as the shorter of its statistics' bounds (a single
    long value repeated holds a few bytes of indexes). Compression bombs and such chunks
    are judged by it before any byte is decoded."""
    return _decoded(md, md.row_group(rg).column(column), column)


def _decoded(md: pq.FileMetaData, col: pq.ColumnChunkMetaData, column: int) -> int:
    physical = col.physical_type
    width = (md.schema.column(column).length or 1 if physical == "FIXED_LEN_BYTE_ARRAY"
             else _WIDTH.get(physical, 8))
    values = max(0, col.num_values)
    size = max(col.total_uncompressed_size, values * width)
    if physical == "BYTE_ARRAY" and col.has_dictionary_page:
        s = col.statistics
        try:
            lo, hi = (s.min_raw, s.max_raw) if s is not None and s.has_min_max else (None, None)
            if isinstance(lo, bytes | str) and isinstance(hi, bytes | str):
                size = max(size, values * (width + min(len(lo), len(hi))))
        except (ValueError, TypeError, pa.ArrowException):
            pass
    return size


def _struct_parts(leaves: Sequence[str], fields: Mapping[str, Iterable[str]]
                  ) -> dict[str, tuple[str, ...]]:
    """The columns that can be read in part: each field names at least one leaf (else the
    whole column is read, so that a missing attribute is reported with all the others)."""
    out: dict[str, tuple[str, ...]] = {}
    for column, wanted in fields.items():
        chosen = tuple(sorted(set(wanted)))
        if chosen and all(any(under(leaf, f) for leaf in leaves) for f in chosen):
            out[column] = chosen
    return out


def _needed(path: str, top: str, wanted: set[str], parts_of: Mapping[str, tuple[str, ...]],
            reads: AbstractSet[str]) -> bool:
    """A leaf of a needed column (``top``, its top-level column: a name may hold a dot, so
    a path is never split), or one pyarrow's reader selects for a read name (it matches
    dotted paths: ``user.id`` selects the ``id`` of a struct ``user`` too)."""
    if under_any(path, reads):
        return True
    return top in wanted and (top not in parts_of or any(under(path, f) for f in parts_of[top]))
