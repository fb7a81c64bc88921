"""Lambda-size mode's jobs: the second object of each case, one run of an approach at a
memory size in its own worker and cgroup (cold and warm job, outputs checked and deleted),
and the cProfile runs of s3slice's warm jobs (``--cpu-profile``)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from . import selfcheck, substrate
from .cases import Case, query_to_json
from .cgroup import LambdaCgroup
from .common import (
    ACCESS_KEY,
    BUCKET,
    REGION,
    REPO,
    SECRET_KEY,
    WORK,
)
from .lambda_python import interpreter_for
from .lambda_worker import SERVICE_APPROACH

COPY_PREFIX = "lambda-copy"  # the second object of each case: same bytes, another key
OUT_PREFIX = "lambda-out"
DUCKDB_MEMORY_FRACTION = 0.75


# --------------------------------------------------------------------------- objects


def second_copy(sub: substrate.Substrate, key: str, n: int = 1) -> str:
    """A server-side copy of key under COPY_PREFIX (skipped when already there)."""
    s3 = selfcheck.s3_client(sub.direct_endpoint)
    dest = f"{COPY_PREFIX}/{key}" if n == 1 else f"{COPY_PREFIX}-{n}/{key}"
    size = s3.head_object(Bucket=BUCKET, Key=key)["ContentLength"]
    with contextlib.suppress(Exception):
        if s3.head_object(Bucket=BUCKET, Key=dest)["ContentLength"] == size:
            return dest
    s3.copy_object(Bucket=BUCKET, Key=dest, CopySource={"Bucket": BUCKET, "Key": key})
    return dest


def check_and_delete_outputs(
    sub: substrate.Substrate, prefix: str, want_rows: int, want_cols: list[str]
) -> tuple[str | None, int]:
    """Every Parquet object under prefix: total rows and columns vs the oracle; then gone."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    s3 = selfcheck.s3_client(sub.direct_endpoint)
    keys: list[tuple[str, int]] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        keys += [(o["Key"], o["Size"]) for o in page.get("Contents", [])]
    fs = pafs.S3FileSystem(
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        region=REGION,
        endpoint_override=sub.direct_endpoint.removeprefix("http://"),
        scheme="http",
    )
    rows = 0
    problem = None
    try:
        if not keys:
            return f"no output under {prefix}", 0
        for key, _ in keys:
            md = pq.read_metadata(f"{BUCKET}/{key}", filesystem=fs)
            rows += md.num_rows
            cols = sorted(md.schema.to_arrow_schema().names)
            if cols != sorted(want_cols):
                problem = f"{key}: columns {cols}, expected {sorted(want_cols)}"
        if problem is None and rows != want_rows:
            problem = f"{rows} rows written, oracle has {want_rows}"
        return problem, sum(s for _, s in keys)
    finally:
        for key, _ in keys:
            s3.delete_object(Bucket=BUCKET, Key=key)


def expected_rows(case: Case, path: Path) -> int:
    import polars as pl

    from .translate import polars_query

    lf = pl.scan_csv(path) if case.format == "csv" else pl.scan_parquet(path)
    return int(polars_query(lf, case.query).select(pl.len()).collect().item())


# --------------------------------------------------------------------------- one run


def run_one(
    sub: substrate.Substrate,
    approach: str,
    case: Case,
    size: int,
    keys: list[str],
    run_id: str,
    timeout: float,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    stem = WORK / "lambda-runs" / run_id
    stem.parent.mkdir(parents=True, exist_ok=True)
    spec_path, out_path, log_path = (
        stem.with_suffix(s) for s in (".spec.json", ".out.json", ".log")
    )
    out_path.unlink(missing_ok=True)
    spec = {
        "approach": approach,
        "endpoint": sub.endpoint,
        "bucket": BUCKET,
        "access_key": ACCESS_KEY,
        "secret_key": SECRET_KEY,
        "region": REGION,
        "keys": keys,
        "outputs": [f"{OUT_PREFIX}/{run_id}/job{n}/" for n in (1, 2)],
        "format": case.format,
        "query": query_to_json(case.query),
        "service_query": case.service_query,
        "duckdb_memory_fraction": DUCKDB_MEMORY_FRACTION,
        **(extra or {}),
    }
    spec_path.write_text(json.dumps(spec, indent=1))
    interp = interpreter_for(approach)
    env = interp.env()
    env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] = str(size)
    env["AWS_ENDPOINT_URL_S3"] = sub.endpoint
    timed_out = False
    with LambdaCgroup(size) as cg, log_path.open("w") as log:
        env["S3SLICE_BENCH_T0"] = repr(time.time())
        proc = subprocess.Popen(
            interp.argv("-m", "tests.benchmark.lambda_worker", str(spec_path), str(out_path)),
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=cg.enter,  # the harness has no threads at this point
        )
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        cgs = cg.stats()
    rec: dict[str, Any] = {}
    if out_path.exists():
        rec = json.loads(out_path.read_text())
    row: dict[str, Any] = {
        "approach": approach,
        "case": case.name,
        "size_mb": size,
        "run_id": run_id,
        "returncode": proc.returncode,
        "timed_out": timed_out,
        **{
            k: rec.get(k)
            for k in (
                "init_s",
                "init_cpu_s",
                "job1_s",
                "job1_cpu_s",
                "job2_s",
                "job2_cpu_s",
                "job1_info",
                "job2_info",
                "job1_usage",
                "job2_usage",
                "phase",
                "error",
                "numpy_imported",
                "interpreter",
            )
        },
        "peak_rss_mb": (rec.get("peak_rss_kib") or 0) / 1024 or None,
        "rss_after_init_mb": (rec.get("rss_after_init_kib") or 0) / 1024 or None,
        **cgs,
    }
    ok = bool(rec.get("ok")) and proc.returncode == 0 and not timed_out
    if cgs.get("oom_kill"):
        row["status"] = "oom"
        ok = False
    elif timed_out:
        row["status"] = "timeout"
    elif not ok:
        row["status"] = "failed"
        if not row.get("error"):
            row["error"] = f"exit {proc.returncode}: " + log_path.read_text()[-300:]
    else:
        row["status"] = "ok"
    if ok:
        cpu = [row["init_cpu_s"], row["job1_cpu_s"], row["job2_cpu_s"]]
        row["cpu_s"] = sum(cpu)
        row["gbs_cold"] = size / 1024 * (row["init_s"] + row["job1_s"])
        row["gbs_warm"] = size / 1024 * row["job2_s"]
        # What the same CPU would bill if the job only ever waited for its CPU share (no
        # network waits, no other work on the machine): a floor that machine noise cannot
        # inflate. Below 1769 MB it does not depend on M.
        row["gbs_cold_cpu_floor"] = size / 1024 * (cpu[0] + cpu[1]) / row["cpus"]
        row["gbs_warm_cpu_floor"] = size / 1024 * cpu[2] / row["cpus"]
    return row


PROFILED_WARM_JOBS = 5
PROFILE_SIZE_MB = 3008


def cpu_profiles(
    sub: substrate.Substrate,
    case: Case,
    pair: dict[str, list[str]],
    want: dict[str, tuple[int, list[str]]],
    args: argparse.Namespace,
) -> list[dict[str, Any]]:
    """s3slice's handler: a cold job, then PROFILED_WARM_JOBS warm jobs on distinct copies
    of the object (no footer cache hit), profiled: once with cProfile on a CPU clock, once
    with py-spy (native frames). At PROFILE_SIZE_MB, so the profiler has CPU to spare."""
    first = pair[case.data_key][0]
    keys = [first] + [second_copy(sub, first, n) for n in range(1, PROFILED_WARM_JOBS + 1)]
    rows = []
    for profiler, suffix in (("cprofile", "pstats"), ("py-spy", "py-spy.txt")):
        path = WORK / "lambda-runs" / f"cpu-profile-{case.name}.{suffix}"
        path.unlink(missing_ok=True)
        run_id = f"cpu-profile-{profiler}-{case.name}-{time.time_ns()}"
        extra = {
            "keys": keys,
            "outputs": [f"{OUT_PREFIX}/{run_id}/job{n}/" for n in range(1, len(keys) + 1)],
            "profiler": profiler,
            "profile_jobs": list(range(2, len(keys) + 1)),
            "profile_path": str(path),
        }
        row = run_one(
            sub, SERVICE_APPROACH, case, PROFILE_SIZE_MB, keys, run_id, args.timeout, extra
        )
        row["profiler"], row["profile_path"] = profiler, str(path)
        out = WORK / "lambda-runs" / f"{run_id}.out.json"
        rec = json.loads(out.read_text()) if out.exists() else {}
        row["warm_jobs"] = [
            {
                "s": rec.get(f"job{n}_s"),
                "cpu_s": rec.get(f"job{n}_cpu_s"),
                "stats": (rec.get(f"job{n}_info") or {}).get("stats"),
            }
            for n in range(2, len(keys) + 1)
        ]
        row["py_spy_output"] = rec.get("py_spy")
        check_and_delete_outputs(sub, f"{OUT_PREFIX}/{run_id}/", *want[case.name])
        done = [j for j in row["warm_jobs"] if j["s"] is not None]
        print(
            f"[cpu-profile] {profiler}: {row['status']} -> {path}; warm jobs "
            + ", ".join(f"{j['s']:.2f} s/{j['cpu_s']:.2f} cpu" for j in done),
            flush=True,
        )
        rows.append(row)
    return rows
