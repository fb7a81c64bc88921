"""A projection written without decoding: the needed column chunks of the kept row groups,
copied as they are (compressed pages, dictionaries, statistics) into a new Parquet file
with a new footer. No row is decoded, filtered or encoded again, so a column-selection
job costs its bytes, not its values.

Only what can be copied exactly is: a flat schema (every column a top-level leaf), no
encryption, and (checked by the caller) a query with no row filter, limit, path or
partition column. The output's columns are in the request's order (its schema and each
row group's list of chunks), but the chunks' bytes keep their own offsets' order: a run of
chunks that lie next to each other in the source lies next to each other in the output,
so each run is one range fetched straight into its place (:meth:`Layout.runs`).

Nothing lost: before the file is written out, every copied chunk is walked page header
by page header (:func:`check_chunks`); its pages must fill it exactly and hold as many
values as its metadata says, and (a column that is not repeated) as its row group has
rows (checked when the layout is made: such a chunk is decoded instead). Then pyarrow
opens the file's footer, and the file is decoded once by polars' streaming reader, which
keeps nothing but, per column, the number of values it decoded
(:func:`check_decodes`): a page that does not decompress or decode, or a column of another
length than the file's rows, is an :class:`ObjectFormatError`, and nothing is written. So
the file is decoded to be checked, never encoded again.
"""

from __future__ import annotations

import base64
import bisect
import copy
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, cast

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from s3slice.core import ranges as _ranges
from s3slice.core.errors import ObjectFormatError, contained
from s3slice.core.ranges import Range
from s3slice.core.settings import Settings
from s3slice.parquet.arrow import plain
from s3slice.parquet.footer import MAGIC, Footer
from s3slice.parquet.plan import Plan, chunk_range
from s3slice.parquet.thrift import file_footer, thrift, thrift_metadata

#: The key a Parquet file's Arrow schema is kept under (pyarrow's and polars' writers).
ARROW_SCHEMA = "ARROW:schema"
_DATA_PAGES = (0, 3)  # DATA_PAGE, DATA_PAGE_V2
_DICTIONARY_PAGE = 2
#: Bytes read for a page header (tens of bytes; a page's statistics may add some), then,
#: when they do not hold it, enough for any.
_HEADER_READS = (1024, 64 * 1024)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Chunk:
    """One copied column chunk: where it is in the source and in the output."""

    source: Range
    at: int  # its offset in the output
    num_values: int
    column: str
    row_group: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class Layout:
    """The output file: the copied chunks in order, then ``footer`` at ``footer_at``."""

    chunks: tuple[Chunk, ...]
    footer: bytes  # the new footer, its length and the closing magic included
    footer_at: int
    rows: int
    codecs: frozenset[str]  # the chunks' compression codecs (``SNAPPY``, ``ZSTD``, …)

    @property
    def size(self) -> int:
        return self.footer_at + len(self.footer)

    def runs(self) -> list[tuple[Range, int]]:
        """Source ranges that are contiguous in both files, each with its output offset."""
        out: list[tuple[Range, int]] = []
        for c in self.chunks:
            if out and out[-1][0][1] == c.source[0]:
                (start, _), at = out[-1]
                out[-1] = ((start, c.source[1]), at)
            else:
                out.append((c.source, c.at))
        return out

    def fetch_ranges(self, settings: Settings) -> list[Range]:
        """The runs, split into parts for parallel GETs."""
        return _ranges.parts([r for r, _ in self.runs()], settings)

    def placing(self, write: Callable[[int, memoryview], None]
                ) -> Callable[[int, memoryview], None]:
        """A fetch sink that writes source bytes at their offsets in the output."""
        runs = self.runs()
        starts = [r[0] for r, _ in runs]

        def place(start: int, data: memoryview) -> None:
            (run_start, run_end), at = runs[bisect.bisect_right(starts, start) - 1]
            if not (run_start <= start and start + len(data) <= run_end):
                raise ValueError(f"bytes {start}-{start + len(data)} were not asked for")
            write(at + start - run_start, data)
        return place


def copy_layout(footer: Footer, plan: Plan, uri: str,
                order: Sequence[str] | None = None) -> Layout | None:
    """The output of ``plan``'s columns and row groups copied as they are, its columns in
    ``order`` (the request's; the plan's, in the file's order, when not given); None when
    the object cannot be copied exactly (nested or repeated columns, encryption)."""
    fmd = thrift_metadata(footer, uri)
    if fmd.encryption_algorithm is not None or not plan.columns or not plan.row_groups:
        return None
    leaves = fmd.schema[1:]
    if fmd.schema[0].num_children != len(leaves) or any(e.num_children for e in leaves):
        return None  # not flat: a column has more than one leaf, or a group
    names = [e.name for e in leaves]
    if len(set(names)) != len(names) or plan.fields:
        return None
    if order is None or sorted(order) != sorted(plan.columns):
        order = plan.columns
    # The output's schema (and each row group's list of chunks) in the requested order;
    # the chunks' bytes stay in the file's order, so that neighbours stay runs.
    chosen = [names.index(c) for c in order]
    if any(leaves[i].type == thrift().Type.INT96 for i in chosen):
        return None  # decoded instead, exactly (decode.int96_metadata), or refused typed
    md = footer.metadata
    chunks: list[Chunk] = []
    groups = []
    at = len(MAGIC)
    for k, g in enumerate(plan.row_groups):
        source_group = fmd.row_groups[g]
        placed: dict[int, Any] = {}
        for i in sorted(chosen):
            cc = source_group.columns[i]
            if cc.crypto_metadata is not None or cc.encrypted_column_metadata is not None or (
                    cc.file_path is not None or cc.meta_data is None):
                return None
            # A column that is not repeated holds one value a row: a chunk that says
            # otherwise is decoded (and its rows counted), never copied as it is.
            if leaves[i].repetition_type != thrift().FieldRepetitionType.REPEATED and (
                    cc.meta_data.num_values != source_group.num_rows):
                return None
            source = chunk_range(md, g, i, footer=footer, uri=uri, exact=True)
            placed[i] = _moved(cc, at - source[0], at)
            chunks.append(Chunk(source=source, at=at, num_values=cc.meta_data.num_values,
                                column=names[i], row_group=g))
            at += source[1] - source[0]
        columns = [placed[i] for i in chosen]
        groups.append(thrift().RowGroup(
            columns=columns, num_rows=source_group.num_rows, ordinal=k,
            total_byte_size=sum(c.meta_data.total_uncompressed_size for c in columns),
            total_compressed_size=sum(c.meta_data.total_compressed_size for c in columns),
            file_offset=min(c.file_offset for c in columns)))
    root = copy.copy(fmd.schema[0])
    root.num_children = len(chosen)
    new = thrift().FileMetaData(
        version=fmd.version, schema=[root, *(leaves[i] for i in chosen)],
        num_rows=sum(g.num_rows for g in groups), row_groups=groups,
        key_value_metadata=_key_values(fmd.key_value_metadata, [names[i] for i in chosen]),
        created_by=fmd.created_by,  # the chunks are that writer's: readers' fixes apply
        column_orders=None if fmd.column_orders is None else [
            fmd.column_orders[i] for i in chosen])
    return Layout(chunks=tuple(chunks), footer=file_footer(new),
                  footer_at=at, rows=new.num_rows,
                  codecs=frozenset(md.row_group(c.row_group).column(names.index(c.column))
                                   .compression for c in chunks))


def _moved(cc: Any, delta: int, at: int) -> Any:
    """A copy of column chunk ``cc``'s metadata for its new place; what points elsewhere
    in the source (page index, Bloom filter) is dropped."""
    out = copy.deepcopy(cc)
    meta = out.meta_data
    meta.data_page_offset += delta
    if meta.dictionary_page_offset is not None:
        meta.dictionary_page_offset += delta
    if meta.index_page_offset is not None:
        meta.index_page_offset += delta
    meta.bloom_filter_offset = None
    out.file_offset = at
    out.offset_index_offset = out.offset_index_length = None
    out.column_index_offset = out.column_index_length = None
    return out


def _key_values(items: Sequence[Any] | None, columns: list[str]) -> list[Any] | None:
    """The file's key-value metadata, its Arrow schema cut to ``columns``, in their order,
    each dictionary type its value type (dropped when it cannot be read; a reader then
    types the columns from the Parquet schema alone)."""
    if items is None:
        return None
    out = []
    for kv in items:
        if kv.key == ARROW_SCHEMA:
            try:
                schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(kv.value)))
                # A dictionary is typed as its values, as the decoded answers are.
                cut = pa.schema([schema.field(c).with_type(plain(schema.field(c).type))
                                 for c in columns],
                                metadata=cast(Any, schema.metadata))
                value = base64.b64encode(cut.serialize().to_pybytes()).decode()
            except (ValueError, KeyError, pa.ArrowException):
                continue
            out.append(thrift().KeyValue(key=kv.key, value=value))
        elif kv.key != "pandas":  # pandas' metadata names every column
            out.append(kv)
    return out


def check_chunks(layout: Layout, read: Callable[[int, int], bytes], uri: str) -> None:
    """Each copied chunk's pages, read back from the output by ``read(offset, n)``, fill
    it exactly and hold the number of values its metadata declares."""
    from thriftpy2.protocol.compact import TCompactProtocol

    header_type = thrift().PageHeader
    for c in layout.chunks:
        end = c.at + c.source[1] - c.source[0]
        pos, values = c.at, 0
        while pos < end:
            for n in _HEADER_READS:
                buffer = _Bytes(read(pos, min(n, end - pos)))
                header = header_type()
                try:
                    header.read(TCompactProtocol(buffer))  # type: ignore[no-untyped-call]
                    break
                except Exception as e:  # any Thrift failure: not a page header
                    if n == _HEADER_READS[-1] or n >= end - pos:
                        raise _broken(c, f"no page header at byte {pos - c.at}: {e}",
                                      uri) from e
            size = header.compressed_page_size
            if size is None or size < 0:
                raise _broken(c, f"a page of {size} bytes", uri)
            if header.type in _DATA_PAGES:
                page = header.data_page_header or header.data_page_header_v2
                if page is None:
                    raise _broken(c, "a data page without its header", uri)
                values += page.num_values
            elif header.type != _DICTIONARY_PAGE:
                raise _broken(c, f"a page of type {header.type}", uri)
            pos += buffer.pos + size
        if pos != end or values != c.num_values:
            raise _broken(c, f"its pages hold {values} values in {pos - c.at} bytes, its "
                          f"metadata {c.num_values} values in {end - c.at}", uri)


def check_decodes(path: str, layout: Layout, columns: Sequence[str], uri: str) -> None:
    """The file at ``path`` opens in pyarrow too (its footer, as pyarrow's reader parses
    it, declares ``layout.rows``), decodes, and every column to ``layout.rows`` values."""
    try:
        rows = pq.read_metadata(path).num_rows
    except (OSError, ValueError, pa.ArrowException) as e:
        raise ObjectFormatError(f"the copied file does not open: {e}", uri=uri) from e
    if rows != layout.rows:
        raise ObjectFormatError(f"the copied file declares {rows} rows, its row groups "
                                f"{layout.rows}", uri=uri)
    counted = [(pl.col(c).is_null().sum() + pl.col(c).is_not_null().sum()).alias(c)
               for c in columns]
    with contained(lambda text: ObjectFormatError(
            f"a copied column chunk does not decode: {text}", uri=uri), native=(Exception,)):
        counts = pl.scan_parquet(path, glob=False, hive_partitioning=False).select(
            counted).collect(engine="streaming")
    wrong = {c: n for c, n in counts.row(0, named=True).items() if n != layout.rows}
    if wrong:
        raise ObjectFormatError(f"copied columns decode to {wrong} values, the row groups "
                                f"hold {layout.rows} rows; no result is built from fewer rows",
                                uri=uri)


class _Bytes:
    """A Thrift transport over bytes that tells how many it has given out."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def read(self, n: int) -> bytes:
        out = self.data[self.pos:self.pos + n]
        self.pos += len(out)
        return out


def _broken(c: Chunk, text: str, uri: str) -> ObjectFormatError:
    return ObjectFormatError(f"column {c.column!r} of row group {c.row_group}: {text}",
                             uri=uri)
