"""Parsing a Parquet footer, 10 to 2,000 columns by 1 to 500 row groups: pyarrow (the
service's :func:`s3slice.parquet.footer.parse_footer`) against thriftpy2's compact protocol
(:func:`s3slice.parquet.thrift.read_struct` of ``FileMetaData``, what ``thrift_metadata``
does), the question of issue 39: if the project's own footer model were the Thrift
structures, what would a wide footer cost?

    PYTHONPATH=functions .venv/bin/python -m tests.benchmark.footer_parse

Each object is written in memory by pyarrow.parquet (statistics on, snappy, int64 and
string columns alternating, 2 rows per row group); only its footer is parsed. CPU seconds
(``time.process_time``), the median of as many repeats as fit in ``--budget`` seconds
(at least 1, at most 9). Writes the table to ``tests/benchmark/results/footer-parse.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import io
import os
import platform
import statistics
import struct
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

COLUMNS = (10, 100, 500, 2000)
ROW_GROUPS = (1, 10, 100, 500)
ROWS_PER_GROUP = 2
OUT = Path(__file__).parent / "results" / "footer-parse.md"
COMMAND = "PYTHONPATH=functions .venv/bin/python -m tests.benchmark.footer_parse"
URI = "s3://bench/footer.parquet"


@dataclasses.dataclass
class Cell:
    """One object of the grid and what parsing its footer cost."""

    columns: int
    row_groups: int
    write_s: float = 0.0
    object_bytes: int = 0
    footer_bytes: int = 0
    pyarrow_s: float = 0.0
    derive_s: float = 0.0
    thrift_s: float = 0.0
    repeats: tuple[int, int] = (0, 0)
    pyarrow_rss: int = 0
    thrift_rss: int = 0
    thrift_peak: int | None = None
    skipped: str = ""

    @property
    def chunks(self) -> int:
        return self.columns * self.row_groups


def parquet_object(columns: int, row_groups: int) -> bytes:
    """A Parquet object of ``columns`` columns (int64 and string alternating) in
    ``row_groups`` row groups of :data:`ROWS_PER_GROUP` rows, written as the service's
    writers write it (pyarrow, statistics, snappy). The columns share their values: the
    footer's size does not depend on them."""
    n = row_groups * ROWS_PER_GROUP
    ints = pa.array(range(n), pa.int64())
    texts = pa.array([f"value-{i:06d}" for i in range(n)], pa.string())
    table = pa.table({f"c{c:04d}": ints if c % 2 == 0 else texts for c in range(columns)})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=ROWS_PER_GROUP, compression="snappy",
                   write_statistics=True)
    return buf.getvalue()


def footer_tail(data: bytes) -> bytes:
    """The footer with its 8-byte trailer (length + ``PAR1``): what the service's suffix
    read brings when it holds the footer exactly."""
    (length,) = struct.unpack("<I", data[-8:-4])
    return data[len(data) - length - 8:]


def rss() -> int:
    """This process's resident set, in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def timed(parse: Callable[..., Any], budget: float, *, prepare: Callable[[], Any] | None = None
          ) -> tuple[float, int, Any, int]:
    """The median CPU seconds of ``parse()`` over as many repeats as ``budget`` allows
    (1 to 9), the repeats, the first result and the RSS growth while making it (the
    first repeat's; later ones reuse memory already freed). ``prepare`` runs untimed
    before each repeat, its result passed to ``parse``."""
    times: list[float] = []
    first: Any = None
    grew = 0
    while True:
        arg = prepare() if prepare is not None else None
        gc.collect()
        before = rss()
        started = time.process_time()
        result = parse() if prepare is None else parse(arg)
        times.append(time.process_time() - started)
        if first is None:
            first, grew = result, rss() - before
        del result
        if len(times) >= 9 or sum(times) + times[0] > budget:
            return statistics.median(times), len(times), first, grew


def derive(footer: Any) -> int:
    """What the service derives from a fresh footer once, proportional to it: the Arrow
    schema it reads as, each leaf's top-level column, the columns' positions, the row
    counts' check."""
    from s3slice.parquet import footer as _footer
    from s3slice.parquet import thrift as _thrift

    _footer._DERIVED.clear()  # cached by metadata identity: each repeat derives anew
    schema = footer.arrow_schema
    tops = footer.leaf_tops
    positions = _thrift.column_positions(footer.metadata)
    return len(schema) + len(tops) + len(positions) + int(footer.counts_agree)


def measure(cell: Cell, *, budget: float, max_chunks: int, peak_chunks: int) -> None:
    """Write ``cell``'s object and time both parsers on its footer; both must agree on
    the footer's row groups, columns and rows."""
    from s3slice.parquet import footer as _footer
    from s3slice.parquet import thrift as _thrift

    if cell.chunks > max_chunks:
        cell.skipped = f"{cell.chunks:,} column chunks > --max-chunks {max_chunks:,}"
        return
    started = time.perf_counter()
    data = parquet_object(cell.columns, cell.row_groups)
    cell.write_s = time.perf_counter() - started
    tail = footer_tail(data)
    cell.object_bytes, cell.footer_bytes = len(data), len(tail)
    del data
    size = cell.object_bytes
    gc.collect()

    def by_pyarrow() -> Any:
        return _footer.parse_footer(tail, size=size, uri=URI)

    cell.pyarrow_s, n_pa, footer, cell.pyarrow_rss = timed(by_pyarrow, budget)
    cell.derive_s, _, _, _ = timed(derive, budget, prepare=by_pyarrow)
    body = tail[:-_footer.FOOTER_TRAILER]

    def by_thrift() -> Any:
        return _thrift.read_struct("FileMetaData", body, URI)

    cell.thrift_s, n_th, fmd, cell.thrift_rss = timed(by_thrift, budget)
    cell.repeats = (n_pa, n_th)
    md = footer.metadata
    agree = (len(fmd.row_groups) == md.num_row_groups == cell.row_groups
             and len(fmd.row_groups[0].columns) == md.num_columns == cell.columns
             and fmd.num_rows == md.num_rows == cell.row_groups * ROWS_PER_GROUP
             and fmd.row_groups[-1].columns[-1].meta_data.data_page_offset
             == md.row_group(md.num_row_groups - 1).column(md.num_columns - 1)
             .data_page_offset)
    if not agree:
        raise SystemExit(f"{cell.columns} x {cell.row_groups}: pyarrow and thriftpy2 "
                         "disagree on the footer's shape")
    del footer, fmd, md
    if cell.chunks <= peak_chunks:
        gc.collect()
        tracemalloc.start()
        kept = by_thrift()
        cell.thrift_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        del kept
    gc.collect()


def idl_load() -> tuple[float, float]:
    """CPU seconds of importing thriftpy2 and of loading the Parquet IDL, once (the first
    call in this process; ``thrift()`` keeps the module)."""
    from s3slice.parquet import thrift as _thrift

    started = time.process_time()
    __import__("thriftpy2.protocol")
    imported = time.process_time() - started
    started = time.process_time()
    _thrift.thrift()
    return imported, time.process_time() - started


def mb(n: int | None) -> str:
    return "—" if n is None else f"{n / 2**20:,.1f}"


def ms(s: float) -> str:
    return f"{s * 1e3:,.1f}" if s < 10 else f"{s * 1e3:,.0f}"


def table(cells: Sequence[Cell]) -> list[str]:
    lines = [
        "| columns | row groups | column chunks | footer bytes | pyarrow parse ms | "
        "+ derivations ms | thriftpy2 parse ms | thriftpy2 / pyarrow | thriftpy2 µs a chunk"
        " | RSS growth pyarrow / thriftpy2 MB | thriftpy2 tracemalloc peak MB | repeats "
        "pa / thrift | write s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for c in cells:
        if c.skipped:
            lines.append(f"| {c.columns:,} | {c.row_groups:,} | {c.chunks:,} | skipped: "
                         f"{c.skipped} ||||||||||")
            continue
        lines.append(
            f"| {c.columns:,} | {c.row_groups:,} | {c.chunks:,} | {c.footer_bytes:,} | "
            f"{ms(c.pyarrow_s)} | {ms(c.derive_s)} | {ms(c.thrift_s)} | "
            f"{c.thrift_s / c.pyarrow_s:,.0f}x | {c.thrift_s / c.chunks * 1e6:,.1f} | "
            f"{mb(c.pyarrow_rss)} / {mb(c.thrift_rss)} | {mb(c.thrift_peak)} | "
            f"{c.repeats[0]} / {c.repeats[1]} | {c.write_s:,.1f} |")
    return lines


def report(cells: Sequence[Cell], idl: tuple[float, float], args: argparse.Namespace,
           wall: float) -> str:
    import thriftpy2

    head = [
        f"# Footer parsing: pyarrow against thriftpy2 ({time.strftime('%Y-%m-%d', time.gmtime())})",
        "",
        f"`{COMMAND}`" + (f" `--max-chunks {args.max_chunks}`" if args.max_chunks < 10**9
                          else "") + f" (budget {args.budget:g} s a parser a cell), one run.",
        "",
        f"Machine: 2 cores shared (other sessions' measurements ran beside it), "
        f"Python {platform.python_version()}, pyarrow {pa.__version__}, "
        f"thriftpy2 {thriftpy2.__version__} (its compact protocol is pure Python: only "
        f"the binary protocol has a Cython version). Whole run {wall:,.0f} s wall.",
        "",
        f"Each object: pyarrow.parquet, statistics on, snappy, int64 and string columns "
        f"alternating, {ROWS_PER_GROUP} rows a row group; the footer as the service's suffix "
        f"read brings it. CPU (`time.process_time`), median of the repeats shown.",
        "",
        "- **pyarrow parse**: `s3slice.parquet.footer.parse_footer` (the service's call: "
        "`pq.read_metadata(pa.BufferReader(b\"PAR1\" + footer))` with its checks).",
        "- **+ derivations**: what the service then derives once per footer, on a fresh "
        "one: `Footer.arrow_schema` (a `pq.ParquetFile` over the metadata), `leaf_tops`, "
        "`column_positions`, `counts_agree` (every row group's row count).",
        "- **thriftpy2 parse**: `s3slice.parquet.thrift.read_struct(\"FileMetaData\", ...)`, "
        "as `thrift_metadata` calls it: the whole footer into thriftpy2 objects.",
        "- **RSS growth**: the process's resident set across the first parse, the result "
        "still held (a lower bound where earlier cells left freed memory to reuse); "
        f"**tracemalloc peak**: the Python allocations of one thriftpy2 parse, taken up to "
        f"{args.peak_chunks:,} column chunks (tracemalloc slows the parse severalfold).",
        "- Both parsers are checked to agree on row groups, columns, rows and the last "
        "chunk's data page offset.",
        "",
        f"Once per process: `import thriftpy2.protocol` {ms(idl[0])} ms CPU, loading the "
        f"Parquet IDL (`s3slice.parquet.thrift.thrift()`) {ms(idl[1])} ms CPU.",
        "",
    ]
    return "\n".join([*head, *table(cells), ""])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--columns", type=int, nargs="+", default=list(COLUMNS))
    parser.add_argument("--row-groups", type=int, nargs="+", default=list(ROW_GROUPS))
    parser.add_argument("--budget", type=float, default=2.0,
                        help="CPU seconds of repeats a parser a cell (at least one runs)")
    parser.add_argument("--max-chunks", type=int, default=10**9,
                        help="skip objects of more column chunks than this")
    parser.add_argument("--peak-chunks", type=int, default=200_000,
                        help="take thriftpy2's tracemalloc peak up to this many chunks")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    idl = idl_load()
    cells = sorted((Cell(c, g) for c in args.columns for g in args.row_groups),
                   key=lambda c: (c.chunks, c.columns))
    for cell in cells:
        measure(cell, budget=args.budget, max_chunks=args.max_chunks,
                peak_chunks=args.peak_chunks)
        print(table([cell])[-1], flush=True)
    cells.sort(key=lambda c: (c.columns, c.row_groups))
    text = report(cells, idl, args, time.perf_counter() - started)
    print(text)
    args.out.write_text(text)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
