"""Where s3slice's warm job spends CPU: phases from a CPU-clock cProfile and from py-spy.

    .venv/bin/python -m tests.benchmark.cpu_breakdown PSTATS [PY_SPY_RAW] [--jobs N]

Both files come from ``python -m tests.benchmark.lambda_size --cpu-profile`` (in
``.work/lambda-runs/``): N warm handler jobs, each on a new copy of the object.

cProfile runs on ``time.process_time``, the CPU time of *every* thread of the process,
charged to whatever the main thread is in at that moment, and it sees the main thread's
calls only. s3slice's GETs run on threads (one per part in flight; a streamed read's
windows are fetched by read-ahead threads while the main thread decodes), so the phases
are what the main thread was doing: waiting for fetched bytes (``get_ranges`` on the main
thread, or a read-ahead ``take``), with the CPU the GET threads burn meanwhile; decoding,
with whatever GETs run beside it (a streamed read's next windows); and so on. py-spy
(``--native --threads``, busy samples only) shows the threads that run Python from their
own stacks (the GET threads' per-chunk loop and image writes among them), and splits
polars' decode from its filter.
"""

from __future__ import annotations

import argparse
import pstats
import sys
from collections import Counter
from pathlib import Path
from typing import Any


def _find(stats: dict[Any, Any], file_end: str, func: str) -> tuple[float, float, int]:
    """(tottime, cumtime, calls) summed over functions named func in files ending so."""
    tt = ct = 0.0
    n = 0
    for (file, _line, name), (_cc, nc, t, c, _callers) in stats.items():
        if name == func and file.endswith(file_end):
            tt += t
            ct += c
            n += nc
    return tt, ct, n


def cprofile_phases(path: Path, jobs: int) -> list[tuple[str, float, str]]:
    """[(phase, CPU s per job, how it is computed)]."""
    st = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    total = _find(st, "lambda_worker.py", "job")[1]
    handler = _find(st, "handler.py", "lambda_handler")[1]
    # The package's layout since the restructure (engine/, parquet/, fetch/).
    read = _find(st, "engine/engine.py", "read")[1]
    parquet = _find(st, "parquet/reader.py", "read")[1]
    fetch = _find(st, "fetch/s3.py", "get_ranges")[1] + _find(st, "read_ahead.py", "take")[1]
    image = _find(st, "fetch/image.py", "write")[1]
    decode = _find(st, "parquet/decode.py", "decode")[1]
    write = _find(st, "answer/write.py", "write_outputs")[1]
    encode = _find(st, "answer/write.py", "serialize")[1]
    put = _find(st, "fetch/s3.py", "put")[1]
    tail = _find(st, "fetch/s3.py", "get_tail")[1]
    rows = [
        ("whole job (handler + harness call)", total, "cumulative of the worker's job()"),
        (
            "  request, SQL analysis, logging, metrics",
            handler - read - write,
            "lambda_handler - Engine.read - write_outputs",
        ),
        (
            "  footer GET + parse + plan",
            parquet - fetch - decode - image - _close(st),
            f"ParquetReader.read - waits for GETs - decode - image writes (the footer GET "
            f"alone: {tail / jobs:.3f})",
        ),
        (
            "  fetch: waiting for the GETs (their threads' CPU meanwhile)",
            fetch,
            "get_ranges and read-ahead take() on the main thread",
        ),
        ("  fetch: image writes on the main thread", image, "_image.write (the footer's)"),
        (
            "  decode + filter (and the GETs running beside it)",
            decode,
            "parquet/decode.py decode",
        ),
        ("  write: encode Parquet", encode, "answer.write.serialize"),
        ("  write: PUT", put, "S3Fetcher.put"),
        ("  write: rest", write - encode - put, "write_outputs - serialize - put"),
        ("  engine, rest", read - parquet, "Engine.read - ParquetReader.read"),
    ]
    return [(name, v / jobs, how) for name, v, how in rows]


def _close(st: dict[Any, Any]) -> float:
    return _find(st, "fetch/image.py", "close")[1]


PYSPY_CLASSES: list[tuple[str, tuple[str, ...]]] = [
    # (class, substrings of a frame; the first class with a match in the stack wins,
    # searched from the leaf up)
    ("image writes (copy into the image, page faults)", ("image.py",)),
    (
        "write: encode Parquet",
        ("polars_parquet::arrow::write", "parquet::write", "zstd", "serialize (s3slice"),
    ),
    (
        "decode (parquet pages)",
        (
            "polars_parquet::arrow::read",
            "polars_parquet::parquet",
            "snap::",
            "decompress",
            "polars_io::parquet",
        ),
    ),
    ("filter", ("filter", "polars_compute::filter", "polars_expr")),
    (
        "fetch: obstore / HTTP",
        (
            "obstore",
            "object_store",
            "hyper",
            "reqwest",
            "tokio",
            "h2::",
            "rustls",
            "pyo3_async",
            "futures_util",
        ),
    ),
    ("Python: the GET threads' per-chunk loop", ("fetch/s3.py", "concurrent/futures")),
    ("footer parse + plan", ("_plan.py", "_predicate.py", "libparquet", "thrift", "_bloom.py")),
    ("decode + filter (main thread's share)", ("_decode", "_try_polars", "polars")),
    ("Python: handler, logging, metrics", ("aws_lambda_powertools", "logging", "_observe.py")),
    ("write", ("answer/write.py", "answer/run.py")),
]


def pyspy_classes(path: Path) -> tuple[Counter[str], int, Counter[str]]:
    """Busy samples per class, the total, and the hottest leaf frames."""
    by: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_s = line.rpartition(" ")
        if not stack or not count_s.isdigit():
            continue
        count = int(count_s)
        frames = stack.split(";")
        total += count
        leaves[frames[-1][:110]] += count
        cls = "other"
        for frame in reversed(frames):
            hit = next((c for c, keys in PYSPY_CLASSES if any(k in frame for k in keys)), None)
            if hit:
                cls = hit
                break
        by[cls] += count
    return by, total, leaves


def markdown(pstats_path: Path | None, pyspy_path: Path | None, jobs: int, meta: str = "") -> str:
    lines = (
        ["## CPU of s3slice's warm job (seed-004)", "", meta, ""]
        if meta
        else ["## CPU of s3slice's warm job (seed-004)", ""]
    )
    if pstats_path and pstats_path.exists():
        rows = cprofile_phases(pstats_path, jobs)
        total = rows[0][1] or 1.0
        lines += [
            f"cProfile on the process's CPU clock, {jobs} warm jobs; CPU s per job:",
            "",
            "| phase | CPU s / job | share | from |",
            "|---|---:|---:|---|",
            *[f"| {n} | {v:.3f} | {v / total:.0%} | {how} |" for n, v, how in rows],
            "",
        ]
    if pyspy_path and pyspy_path.exists():
        by, total, leaves = pyspy_classes(pyspy_path)
        lines += [
            f"py-spy (`--native --threads`, busy samples, {total} over {jobs} warm jobs). "
            "py-spy samples only threads that run Python: the main thread and the GET "
            "threads; obstore's tokio threads and polars' worker threads are not in it (the "
            "cProfile table above has their CPU); an unresolved `libc.so.6` leaf under "
            "`_image.write` is the copy into the image:",
            "",
            "| class (innermost matching frame) | samples | share |",
            "|---|---:|---:|",
            *[f"| {c} | {n} | {n / max(total, 1):.0%} |" for c, n in by.most_common()],
            "",
            "<details><summary>hottest leaf frames</summary>",
            "",
            "| leaf frame | samples |",
            "|---|---:|",
            *[f"| `{f.replace('|', '/')}` | {n} |" for f, n in leaves.most_common(25)],
            "",
            "</details>",
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.benchmark.cpu_breakdown")
    p.add_argument("pstats", type=Path)
    p.add_argument("pyspy", type=Path, nargs="?")
    p.add_argument("--jobs", type=int, default=5)
    args = p.parse_args(argv)
    print(markdown(args.pstats, args.pyspy, args.jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
