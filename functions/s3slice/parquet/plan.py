"""The read planner: a pure function of (footer, query, settings) to the bytes to fetch.

Nothing here touches the network. Given the footer (parsed by pyarrow), the pruning
predicate and the needed columns, it keeps the row groups that could hold a matching row,
lists the byte ranges of their needed column chunks (dictionary pages included), coalesces
neighbours closer than ``max_gap`` and splits what is at least twice ``part_size`` into
parallel parts. The plan knows ``needed_bytes`` before any data moves.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from s3slice._errors import ObjectFormatError
from s3slice._settings import Settings
from s3slice.query import predicate as P

Range = tuple[int, int]
MAGIC = b"PAR1"
FOOTER_TRAILER = 8  # 4-byte little-endian footer length + magic


class FooterTooLarge(Exception):
    """The tail read holds only part of the footer; ``needed`` bytes from the end will do."""

    def __init__(self, needed: int) -> None:
        super().__init__(needed)
        self.needed = needed


@dataclasses.dataclass(frozen=True, kw_only=True)
class Footer:
    metadata: pq.FileMetaData
    size: int  # object size
    length: int  # footer length, trailer included
    raw: bytes = dataclasses.field(repr=False)  # the last ``length`` bytes of the object
    #: The bytes just before the footer that its suffix read brought too: where writers put
    #: the page index and Bloom filters, which then cost no request.
    before: bytes = dataclasses.field(default=b"", repr=False)
    #: What readers derive from the footer once (the Thrift form of it), kept with it in
    #: the footer cache across warm invocations.
    memo: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @property
    def data_end(self) -> int:
        return self.size - self.length

    @property
    def before_range(self) -> Range:
        """The bytes of the object ``before`` holds."""
        return (self.data_end - len(self.before), self.data_end)

    @property
    def nbytes(self) -> int:
        """What keeping this footer costs (for the cache's bound)."""
        return self.length + len(self.before)

    @property
    def schema_names(self) -> list[str]:
        return list(self.arrow_schema.names)

    @property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema the service reads the object as (see :func:`arrow_schema`)."""
        schema = self.memo.get("arrow_schema")
        if schema is None:
            schema = self.memo.setdefault("arrow_schema", arrow_schema(self))
        return schema  # type: ignore[no-any-return]


#: INT96 timestamps (Spark's) are read at microseconds, as Spark reads them: at
#: nanoseconds, pyarrow's default, dates past 2262-04-11 overflow.
INT96_UNIT = "us"


def arrow_schema(footer: Footer) -> pa.Schema:
    """The Arrow schema of the object as its readers decode it, INT96 at :data:`INT96_UNIT`."""
    reader = pq.ParquetFile(pa.BufferReader(MAGIC + footer.raw), metadata=footer.metadata,
                            coerce_int96_timestamp_unit=INT96_UNIT)
    return reader.schema_arrow


def nested_columns(md: pq.FileMetaData) -> set[str]:
    """Top-level columns that are structs, lists or maps (their leaves have a path)."""
    return {md.schema.column(i).path.split(".")[0] for i in range(md.num_columns)
            if "." in md.schema.column(i).path or md.schema.column(i).max_repetition_level}


def parse_footer(tail: bytes, *, size: int, uri: str, keep_before: int = 0) -> Footer:
    """Parse the footer held by the last ``len(tail)`` bytes of an object of ``size`` bytes.

    pyarrow does the parsing; only the eight-byte trailer that frames it is read here. Up to
    ``keep_before`` bytes of ``tail`` before the footer are kept (``Footer.before``).
    """
    if size < len(MAGIC) + FOOTER_TRAILER:
        raise ObjectFormatError(f"not a Parquet object: {size} bytes is too small", uri=uri)
    if len(tail) < FOOTER_TRAILER or tail[-4:] != MAGIC:
        raise ObjectFormatError("not a Parquet object: no PAR1 magic at its end", uri=uri)
    (footer_len,) = struct.unpack("<I", tail[-8:-4])
    total = footer_len + FOOTER_TRAILER
    if total + len(MAGIC) > size:
        raise ObjectFormatError(f"corrupt Parquet footer: it claims {footer_len} bytes in a "
                                f"{size}-byte object", uri=uri)
    if total > len(tail):
        raise FooterTooLarge(total)
    framed = MAGIC + tail[len(tail) - total:]
    try:
        metadata = pq.read_metadata(pa.BufferReader(framed))
    except (OSError, ValueError, pa.ArrowException) as e:
        raise ObjectFormatError(f"corrupt Parquet footer: {e}", uri=uri) from e
    kept = min(keep_before, len(tail) - total)
    return Footer(metadata=metadata, size=size, length=total, raw=framed[len(MAGIC):],
                  before=bytes(tail[len(tail) - total - kept:len(tail) - total]))


# ------------------------------------------------------------------------ statistics


def row_group_stats(md: pq.FileMetaData, index: int,
                    columns: Iterable[str]) -> dict[str, P.ColumnStats]:
    """Statistics of the named top-level columns of one row group."""
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
        lo = hi = None
        if s.has_min_max:
            try:
                lo, hi = s.min, s.max
            except (ValueError, pa.ArrowException, UnicodeDecodeError):
                lo = hi = None
        out[name] = P.ColumnStats(
            num_rows=rg.num_rows, min=lo, max=hi,
            null_count=s.null_count if getattr(s, "has_null_count", True) else None,
            is_float=s.physical_type in ("FLOAT", "DOUBLE"))
    return out


def prune(md: pq.FileMetaData, predicate: P.Pred) -> list[int]:
    """Indexes of the row groups that could hold a row satisfying ``predicate``."""
    columns = P.columns_of(predicate)
    if not columns:
        return [i for i in range(md.num_row_groups) if md.row_group(i).num_rows > 0]
    return [i for i in range(md.num_row_groups)
            if md.row_group(i).num_rows > 0
            and P.may_match(predicate, row_group_stats(md, i, columns))]


# ------------------------------------------------------------------------------ ranges


def chunk_range(md: pq.FileMetaData, rg: int, column: int, *, footer: Footer,
                uri: str) -> Range:
    """Bytes of one column chunk, its dictionary page included (half-open)."""
    col = md.row_group(rg).column(column)
    start = col.data_page_offset
    dict_offset = col.dictionary_page_offset
    if col.has_dictionary_page and dict_offset is not None and 0 < dict_offset < start:
        start = dict_offset
    end = start + col.total_compressed_size
    if start < len(MAGIC) or end > footer.data_end or col.total_compressed_size < 0:
        raise ObjectFormatError(
            f"corrupt Parquet metadata: column {col.path_in_schema!r} of row group {rg} "
            f"spans bytes {start}-{end} outside the data (0-{footer.data_end})", uri=uri)
    return (start, end)


def coalesce(ranges: Iterable[Range], max_gap: int) -> list[Range]:
    """Sorted ranges with overlaps merged and neighbours closer than ``max_gap`` joined."""
    out: list[Range] = []
    for start, end in sorted(r for r in ranges if r[1] > r[0]):
        if out and start - out[-1][1] <= max_gap:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def split(ranges: Iterable[Range], part_size: int, *, fill: int = 1) -> list[Range]:
    """Each range cut into equal parts of at least ``part_size`` bytes (and under twice that).

    A range shorter than twice ``part_size`` stays one request: a whole row group's column
    chunks are one GET, as in polars' own reader, and only larger ranges are spread over
    parallel connections. When that gives fewer than ``fill`` parts (a read of one or two
    large ranges), the ranges with the longest parts are cut further, into parts of no less
    than ``part_size // 8``, until there are ``fill``: one connection's bandwidth no longer
    bounds such a read.
    """
    spans = [(start, end) for start, end in ranges]
    counts = [max(1, (end - start) // part_size) for start, end in spans]
    floor = max(1, part_size // 8)
    while sum(counts) < fill:
        can = [k for k, (a, b) in enumerate(spans) if (b - a) // (counts[k] + 1) >= floor]
        if not can:
            break
        counts[max(can, key=lambda k: (spans[k][1] - spans[k][0]) / counts[k])] += 1
    out: list[Range] = []
    for (start, end), parts in zip(spans, counts, strict=True):
        step, longer = divmod(end - start, parts)
        a = start
        for i in range(parts):
            b = a + step + (1 if i < longer else 0)
            out.append((a, b))
            a = b
    return out


def parts(ranges: Iterable[Range], settings: Settings) -> list[Range]:
    """``ranges`` split as the settings' knobs say (``part_size``, ``fill_parts``)."""
    return split(ranges, settings.part_size, fill=settings.fill_parts)


def subtract(ranges: Iterable[Range], held: Range) -> list[Range]:
    """``ranges`` less the bytes already ``held``."""
    lo, hi = held
    out: list[Range] = []
    for start, end in ranges:
        if end <= lo or start >= hi:
            out.append((start, end))
            continue
        if start < lo:
            out.append((start, lo))
        if end > hi:
            out.append((hi, end))
    return out


def total(ranges: Iterable[Range]) -> int:
    return sum(end - start for start, end in ranges)


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

    @property
    def read_columns(self) -> list[str]:
        """The columns as a Parquet reader selects them: ``b.c`` for a part of ``b``."""
        return [f for c in self.columns for f in self.fields.get(c, (c,))]

    def fetch_ranges(self, settings: Settings, *, row_groups: Sequence[int] | None = None,
                     held: Range | None = None) -> list[Range]:
        """Coalesced and split ranges for ``row_groups`` (all kept ones by default)."""
        groups = self.row_groups if row_groups is None else row_groups
        merged = coalesce((r for g in groups for r in self.chunks[g]), settings.max_gap)
        if held is not None:
            merged = subtract(merged, held)
        return parts(merged, settings)

    def group_bytes(self, group: int) -> int:
        return total(self.chunks[group])

    def keep(self, groups: Sequence[int]) -> Plan:
        """The same plan for only ``groups`` of its row groups."""
        chosen = set(groups)
        kept = tuple(g for g in self.row_groups if g in chosen)
        return dataclasses.replace(self, row_groups=kept,
                                   chunks={g: self.chunks[g] for g in kept},
                                   needed_bytes=sum(self.group_bytes(g) for g in kept))


def cheapest_column(md: pq.FileMetaData, names: Sequence[str]) -> str:
    """The column with the fewest compressed bytes: what a row count needs to read."""
    sizes = dict.fromkeys(names, 0)
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        for i in range(rg.num_columns):
            col = rg.column(i)
            top = col.path_in_schema.split(".")[0]
            if top in sizes:
                sizes[top] += col.total_compressed_size
    return min(names, key=lambda n: (sizes[n], names.index(n)))


def plan_parquet(footer: Footer, *, columns: Sequence[str], predicate: P.Pred,
                 uri: str, fields: Mapping[str, Iterable[str]] | None = None) -> Plan:
    """Plan the read of ``columns`` for rows that may satisfy ``predicate``; of a struct
    column in ``fields``, only the leaves under those dotted fields (``b.c``)."""
    md = footer.metadata
    names = footer.schema_names
    if not columns and names:
        columns = [cheapest_column(md, names)]
    wanted = set(columns)
    leaves = [md.schema.column(i).path for i in range(md.num_columns)]
    parts_of = _struct_parts(leaves, {c: f for c, f in (fields or {}).items() if c in wanted})
    kept = prune(md, predicate)
    chunks: dict[int, tuple[Range, ...]] = {}
    for g in kept:
        rg = md.row_group(g)
        chunks[g] = tuple(
            chunk_range(md, g, i, footer=footer, uri=uri) for i in range(rg.num_columns)
            if _needed(rg.column(i).path_in_schema, wanted, parts_of))
    needed = sum(total(r) for r in chunks.values())
    return Plan(footer=footer, row_groups=tuple(kept),
                columns=tuple(c for c in names if c in wanted), chunks=chunks,
                needed_bytes=needed, fields=parts_of)


def _under(path: str, field: str) -> bool:
    return path == field or path.startswith(field + ".")


def _struct_parts(leaves: Sequence[str], fields: Mapping[str, Iterable[str]]
                  ) -> dict[str, tuple[str, ...]]:
    """The columns that can be read in part: each field names at least one leaf (else the
    whole column is read, so that a missing attribute is reported with all the others)."""
    out: dict[str, tuple[str, ...]] = {}
    for column, wanted in fields.items():
        chosen = tuple(sorted(set(wanted)))
        if chosen and all(any(_under(leaf, f) for leaf in leaves) for f in chosen):
            out[column] = chosen
    return out


def _needed(path: str, wanted: set[str], parts_of: Mapping[str, tuple[str, ...]]) -> bool:
    top = path.split(".")[0]
    if top not in wanted:
        return False
    return top not in parts_of or any(_under(path, f) for f in parts_of[top])
