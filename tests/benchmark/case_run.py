"""One benchmark case under one profile: each approach run in its own worker process
(``worker.py``), its record summarized (time, CPU, memory, S3 requests and bytes) and its
answer checked against the oracle. Driven by ``run.py``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import substrate
from .approaches import PEERS, SERVICE
from .cases import Case, query_to_json
from .common import BUCKET, REPO, WORK, client_env
from .metrics import Counters
from .verify import Summary, compare


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "_", text).strip("_")


def run_worker(spec: dict[str, Any], stem: Path, timeout: float) -> tuple[dict[str, Any], int]:
    """Run one worker process; its JSON record and its peak RSS in KiB."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    spec_path = stem.with_suffix(".spec.json")
    out_path = stem.with_suffix(".out.json")
    out_path.unlink(missing_ok=True)
    spec_path.write_text(json.dumps(spec, indent=1))
    with stem.with_suffix(".log").open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.benchmark.worker", str(spec_path), str(out_path)],
            cwd=REPO,
            env=client_env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline and not timed_out:
                timed_out = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(0.05)
    finally:
        if proc.returncode is None:  # interrupted: do not leave it running
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    if timed_out:
        return {
            "ok": False,
            "error": f"timed out after {timeout:.0f} s",
            "runs": [],
        }, usage.ru_maxrss
    if not out_path.exists():
        tail = stem.with_suffix(".log").read_text()[-500:]
        return {
            "ok": False,
            "error": f"worker died ({proc.returncode}): {tail}",
            "runs": [],
        }, usage.ru_maxrss
    return json.loads(out_path.read_text()), usage.ru_maxrss


def summarize_record(
    rec: dict[str, Any], maxrss_kib: int, want: Summary, kind: str
) -> dict[str, Any]:
    # The worker's own VmHWM; wait4's figure (a floor of the harness's RSS at fork, see
    # worker._peak_rss_kib) only when the worker was killed before it could say.
    peak = rec.get("peak_rss_kib") or maxrss_kib
    out: dict[str, Any] = {"kind": kind, "peak_rss_mb": peak * 1024 / 1e6, "notes": []}
    runs = rec.get("runs", [])
    out["runs"] = runs
    out["setup_s"] = rec.get("setup_s")
    out["rss_before_mb"] = rec.get("rss_before_kib", 0) * 1024 / 1e6
    if not rec.get("ok"):
        out["status"] = "failed"
        out["error"] = rec.get("error")
        out["traceback"] = rec.get("traceback")
        return out
    diff = compare(Summary.from_json(rec["summary"]), want)
    if diff is not None:
        out["status"] = "wrong"
        out["error"] = f"answer differs from the oracle: {diff}"
        return out
    timed = [r for r in runs if not r["warmup"]] or runs
    counters = [Counters.from_json(r["counters"]) for r in timed]
    walls = [r["wall_s"] for r in timed]
    # The run whose request count is the median represents the approach.
    mid = sorted(counters, key=lambda c: (c.total_requests, c.minio_sent_bytes))[len(counters) // 2]
    out.update(
        status="ok",
        wall_median_s=statistics.median(walls),
        wall_runs_s=walls,
        requests=mid.requests,
        requests_total=mid.total_requests,
        requests_text=mid.describe(),
        bytes=mid.minio_sent_bytes,
    )
    totals = {(c.total_requests, c.minio_sent_bytes) for c in counters}
    if len(totals) > 1:
        lo = min(counters, key=lambda c: c.minio_sent_bytes)
        hi = max(counters, key=lambda c: c.minio_sent_bytes)
        out["notes"].append(
            f"timed runs vary: {lo.describe()} / {lo.minio_sent_bytes / 1e6:.1f} MB to "
            f"{hi.describe()} / {hi.minio_sent_bytes / 1e6:.1f} MB"
        )
    for r in runs:
        if r["warmup"]:
            w = Counters.from_json(r["counters"])
            if (w.total_requests, w.minio_sent_bytes) != (mid.total_requests, mid.minio_sent_bytes):
                out["notes"].append(f"warm-up: {w.describe()}, {w.minio_sent_bytes / 1e6:.1f} MB")
    stats = [r.get("info", {}).get("service_stats") for r in timed]
    stats = [s for s in stats if isinstance(s, dict)]
    if stats:
        s = stats[len(stats) // 2]
        out["service_stats"] = s
        if "strategy" in s:
            out["notes"].append(f"strategy {s['strategy']}")
        said = []
        if "requests" in s:
            said.append(f"{s['requests']} req")
        if "bytes_fetched" in s:
            said.append(f"{int(s['bytes_fetched']) / 1e6:.1f} MB")
        if said:
            out["notes"].append("engine reports " + ", ".join(said))
    return out


def run_case(
    args: argparse.Namespace,
    sub: substrate.Substrate,
    prof: str,
    case: Case,
    keys: list[str],
    approach_names: list[str],
    want: Summary,
    service_problem: str | None,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    prefix = f"s{args.scale:g}/{case.prefix()}"
    for name in approach_names:
        kind = "service" if name in SERVICE else "peer"
        row: dict[str, Any] = {"profile": prof, "case": case.name, "approach": name, "kind": kind}
        if kind == "service" and service_problem:
            rows.append(
                {**row, "status": "skipped", "error": f"s3slice: {service_problem}", "notes": []}
            )
            continue
        stem = WORK / "runs" / f"scale-{args.scale:g}" / prof / case.name / slug(name)
        spec = {
            "approach": name,
            "endpoint": sub.endpoint,
            "bucket": BUCKET,
            "keys": keys,
            "many": case.many,
            "prefix": prefix,
            "format": case.format,
            "query": query_to_json(case.query),
            "service_query": case.service_query,
            "schema": case.schema,
            "warmup": args.warmup,
            "repeats": args.repeats,
            "minio_metrics_url": sub.minio_metrics_url,
            "frame_path": str(stem.with_suffix(".parquet")),
        }
        rec, maxrss = run_worker(spec, stem, args.timeout)
        row.update(summarize_record(rec, maxrss, want, kind))
        rows.append(row)
        if row["status"] == "ok":
            print(
                f"  {prof:9} {case.name:9} {name:26} {row['wall_median_s']:8.3f} s "
                f"{row['requests_text']:>22} {row['bytes'] / 1e6:9.1f} MB "
                f"{row['peak_rss_mb']:7.0f} MB RSS",
                flush=True,
            )
        else:
            print(
                f"  {prof:9} {case.name:9} {name:26} {row['status'].upper()}: "
                f"{(row.get('error') or '')[:200]}",
                flush=True,
            )
    best = min(
        (r["wall_median_s"] for r in rows if r["approach"] in PEERS and r["status"] == "ok"),
        default=None,
    )
    for r in rows:
        if best and r["status"] == "ok":
            r["ratio_to_best_peer"] = r["wall_median_s"] / best
    return rows
