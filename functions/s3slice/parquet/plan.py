"""The read planner: a pure function of (footer, query, settings) to the bytes to fetch.

Nothing here touches the network. Given the footer (parsed by pyarrow), the pruning
predicate and the needed columns, it keeps the row groups that could hold a matching row,
lists the byte ranges of their needed column chunks (dictionary pages included), coalesces
neighbours closer than ``max_gap`` and splits what is at least twice ``part_size`` into
parallel parts. The plan knows ``needed_bytes`` before any data moves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from s3slice import _ranges
from s3slice._errors import ObjectFormatError
from s3slice._ranges import Range
from s3slice._settings import Settings
from s3slice.parquet.footer import MAGIC, Footer, leaf_tops
from s3slice.query import predicate as P

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
                     held: Range | None = None, fill: bool = True) -> list[Range]:
        """Coalesced and split ranges for ``row_groups`` (all kept ones by default); with
        ``fill``, cut further until there are ``fill_parts`` (:func:`s3slice._ranges.split`)."""
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
                                   needed_bytes=sum(self.group_bytes(g) for g in kept))


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
    if not columns and names:
        columns = [cheapest_column(md, names)]
    wanted = set(columns)
    leaves = [md.schema.column(i).path for i in range(md.num_columns)]
    parts_of = _struct_parts(leaves, {c: f for c, f in (fields or {}).items() if c in wanted})
    reads = [f for c in names if c in wanted for f in parts_of.get(c, (c,))]
    tops = footer.leaf_tops
    needed_leaves = {i for i, path in enumerate(leaves)
                     if _needed(path, tops[i], wanted, parts_of, reads)}
    kept = prune(md, predicate)
    chunks: dict[int, tuple[Range, ...]] = {}
    for g in kept:
        rg = md.row_group(g)
        chunks[g] = tuple(
            chunk_range(md, g, i, footer=footer, uri=uri) for i in range(rg.num_columns)
            if i in needed_leaves)
    needed = sum(_ranges.total(r) for r in chunks.values())
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


def _needed(path: str, top: str, wanted: set[str], parts_of: Mapping[str, tuple[str, ...]],
            reads: Sequence[str]) -> bool:
    """A leaf of a needed column (``top``, its top-level column: a name may hold a dot, so
    a path is never split), or one pyarrow's reader selects for a read name (it matches
    dotted paths: ``user.id`` selects the ``id`` of a struct ``user`` too)."""
    if any(_under(path, r) for r in reads):
        return True
    return top in wanted and (top not in parts_of or any(_under(path, f) for f in parts_of[top]))
