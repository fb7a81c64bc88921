"""CPU per object: s3slice's handler on the `small` case's 500 objects, in this process.

    .venv/bin/python -m tests.benchmark.per_object --code worktree --code babf450 --runs 4

For each ``--code`` (the working tree's ``functions/``, or a commit's, a ``git archive``
of it under ``.work/``, as ``lambda_size --service-commit`` takes), a fresh interpreter
starts MinIO (unshaped: straight to the server, no toxiproxy, so only s3slice's own work
is timed), imports the handler from that code with the venv's packages, and answers one
request over the prefix (``filter: x >= 0``, a Parquet output per object) ``--runs``
times. ``--code polars`` is the peer doing the same work as a five-line polars function
called once per object: ``scan_parquet`` of the object, the filter, ``write_parquet`` to
S3, one object after another (the keys are known, so it makes no LIST). It prints the
CPU seconds (user + sys, every thread) and the wall time of each run, and CPU per object.
The first run is a cold one (imports done, footers not cached); the later ones read the
same keys, so their footers come from the cache as in a warm function. Writes
``results/<--out-stem>.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .common import (
    ACCESS_KEY,
    BUCKET,
    REGION,
    REPO,
    RESULTS,
    SECRET_KEY,
    cpu_seconds,
    polars_storage_options,
    snapshot_service,
)
from .datasets import ensure_data

SCALE = 1.0
#: ``--code`` value naming the polars peer, not s3slice's code.
POLARS = "polars"


def _code_dir(code: str) -> Path:
    if code in ("worktree", POLARS):  # the polars peer imports nothing from functions/
        return REPO / "functions"
    rev = subprocess.run(["git", "rev-parse", code], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.strip()
    return Path(snapshot_service(rev))


def measure(code_dir: Path, runs: int, *, polars_peer: bool = False
            ) -> list[dict[str, float]]:
    """In this process: MinIO up, the small objects there, the handler from code_dir (or
    the polars peer)."""
    from . import substrate
    from .run import ensure_bucket, upload

    keys = ensure_data("small", SCALE)
    with substrate.running() as sub:
        ensure_bucket(sub)
        uploaded = upload(sub, SCALE, "small", keys)
        prefix = uploaded[0].rsplit("/", 1)[0] + "/"
        os.environ.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                          AWS_REGION=REGION, AWS_ENDPOINT_URL_S3=sub.direct_endpoint,
                          AWS_LAMBDA_FUNCTION_MEMORY_SIZE="1769")
        if polars_peer:
            return _measure_polars(sub.direct_endpoint, uploaded, runs)
        sys.path.insert(0, str(code_dir))
        from s3slice.cli.invoke import LambdaContext
        from s3slice.handler import lambda_handler

        out: list[dict[str, float]] = []
        for i in range(runs):
            request = {"source": f"s3://{BUCKET}/{prefix}", "filter": "x >= 0",
                       "output": {"uri": f"s3://{BUCKET}/per-object-out/{time.time_ns()}-{i}/",
                                  "format": "parquet"}}
            c, t = cpu_seconds(), time.perf_counter()
            response = lambda_handler(request, LambdaContext())
            cpu, wall = cpu_seconds() - c, time.perf_counter() - t
            objects = int(response["stats"]["objects"])
            out.append({"cpu_s": cpu, "wall_s": wall, "objects": objects,
                        "outputs": len(response["outputs"]),
                        "cpu_ms_per_object": 1000 * cpu / objects})
            print(json.dumps(out[-1]), flush=True)
        return out


def _measure_polars(endpoint: str, keys: list[str], runs: int) -> list[dict[str, float]]:
    """The polars peer: each object scanned, filtered and written to S3 on its own."""
    import polars as pl

    so = polars_storage_options(endpoint)
    out: list[dict[str, float]] = []
    for i in range(runs):
        prefix = f"s3://{BUCKET}/per-object-out/{time.time_ns()}-{i}/"
        c, t = cpu_seconds(), time.perf_counter()
        for key in keys:
            frame = pl.scan_parquet(f"s3://{BUCKET}/{key}", storage_options=so).filter(
                pl.col("x") >= 0).collect()
            frame.write_parquet(f"{prefix}{key}.parquet", storage_options=so)
        cpu, wall = cpu_seconds() - c, time.perf_counter() - t
        out.append({"cpu_s": cpu, "wall_s": wall, "objects": len(keys), "outputs": len(keys),
                    "cpu_ms_per_object": 1000 * cpu / len(keys)})
        print(json.dumps(out[-1]), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.benchmark.per_object")
    p.add_argument("--code", action="append",
                   help=f"worktree, a revision or {POLARS} (the peer; repeatable)")
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--out-stem", default="per-object")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--polars-peer", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print("RESULT " + json.dumps(measure(Path(args.worker), args.runs,
                                             polars_peer=args.polars_peer)))
        return 0
    lines = ["# CPU per object: the `small` case's 500 objects through the handler", "",
             f"Written by `python -m tests.benchmark.per_object {' '.join(sys.argv[1:])}` "
             "(see its docstring): one request over the prefix (`filter: x >= 0`, a Parquet "
             "output per object), answered in a fresh interpreter with the venv's packages, "
             "MinIO unshaped on loopback, `AWS_LAMBDA_FUNCTION_MEMORY_SIZE=1769`; the whole "
             "machine's CPU (no cgroup). CPU = user + sys of every thread. `polars` is the peer: "
             "each object scanned, filtered and written to S3 by polars on its own, one "
             "after another.", "",
             "| code | runs: CPU s (wall s) | median CPU ms per object |", "|---|---|---:|"]
    for code in args.code or ["worktree"]:
        code_dir = _code_dir(code)
        proc = subprocess.run([sys.executable, "-m", "tests.benchmark.per_object", "--worker",
                               str(code_dir), "--runs", str(args.runs),
                               *(["--polars-peer"] if code == POLARS else [])], cwd=REPO,
                              capture_output=True, text=True, check=False)
        result = next((line for line in proc.stdout.splitlines()
                       if line.startswith("RESULT ")), None)
        if result is None:
            print(proc.stdout + proc.stderr, file=sys.stderr)
            return 1
        runs = json.loads(result.removeprefix("RESULT "))
        cells = ", ".join(f"{r['cpu_s']:.2f} ({r['wall_s']:.2f})" for r in runs) + (
            f"; {runs[0]['objects']} objects, {runs[0]['outputs']} outputs")
        per = statistics.median(r["cpu_ms_per_object"] for r in runs)
        lines.append(f"| {code} | {cells} | {per:.1f} |")
        print(lines[-1], flush=True)
    path = RESULTS / f"{args.out_stem}.md"
    path.write_text("\n".join(lines) + "\n")
    print(f"[report] {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
