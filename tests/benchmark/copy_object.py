"""`full` (every column, every row) beside what a user does for it: S3 CopyObject.

A query that keeps every column and every row of one Parquet object writes the same rows
back; S3 does that with one CopyObject request, without a function. So wherever the
Lambda-size mode runs `full`, it also copies the same two objects (the cold job's and the
warm job's) on the same substrate: through the same proxy (so the same +25 ms before the
response), timed by the harness around the request alone (the client is made and its
connection opened before the clock starts, as a warm function's would be), counted by
MinIO's own metrics (``{"CopyObject": 1}`` expected), and checked like every job's output
(row count and columns from the copy's Parquet footer; then deleted).

Priced the same way as the functions: what AWS bills for it. A function's job is billed
GB-s (memory x duration) plus its invocation; a CopyObject is billed one request, no
GB-s. The prices are AWS's us-east-1 list prices (S3 Standard, Lambda on x86), quoted
below; the functions' own S3 requests (their GETs and the PUT of the result) would come
on top of their figure and are left out, so their $ is a floor.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from . import selfcheck
from .common import BUCKET
from .metrics import snapshot

APPROACH = "S3 CopyObject (no function)"
#: Cases whose answer is the object itself: every column, every row.
CASES = frozenset({"full"})

#: us-east-1 list prices (aws.amazon.com/lambda/pricing, aws.amazon.com/s3/pricing)
USD_PER_GB_S = 0.0000166667  # Lambda, x86, first 6 billion GB-s a month
USD_PER_INVOKE = 0.20 / 1_000_000  # Lambda requests
USD_PER_COPY = 0.005 / 1_000  # S3 Standard PUT, COPY, POST, LIST requests


def run(
    endpoint: str,
    metrics_url: str,
    keys: list[str],
    out_prefix: str,
    check: Any,
) -> dict[str, Any]:
    """CopyObject of each key to ``out_prefix/job<n>/result.parquet`` through
    ``endpoint``; ``check(prefix) -> (problem | None, bytes)`` checks and deletes the copy.
    The record has the same ``job<n>_s`` fields as a worker's, and the requests MinIO
    counted for each copy."""
    s3 = selfcheck.s3_client(endpoint)
    s3.head_bucket(Bucket=BUCKET)  # the connection is opened before the clock starts
    row: dict[str, Any] = {"approach": APPROACH, "status": "ok"}
    for n, key in enumerate(keys, 1):
        prefix = f"{out_prefix}job{n}/"
        before = snapshot(metrics_url)
        t0 = time.perf_counter()
        s3.copy_object(
            Bucket=BUCKET, Key=f"{prefix}result.parquet", CopySource={"Bucket": BUCKET, "Key": key}
        )
        row[f"job{n}_s"] = time.perf_counter() - t0
        counted = snapshot(metrics_url) - before
        row[f"job{n}_requests"] = counted.requests
        row[f"job{n}_usd"] = USD_PER_COPY * counted.requests.get("CopyObject", 0)
        problem, nbytes = check(prefix)
        row[f"job{n}_output_bytes"] = nbytes
        if problem and row["status"] == "ok":
            row["status"], row["error"] = "wrong", f"job {n}: {problem}"
    return row


def function_usd(gbs: float) -> float:
    """A function's job: its GB-s and one invocation (its S3 requests left out)."""
    return gbs * USD_PER_GB_S + USD_PER_INVOKE


def markdown(case: str, copies: list[dict[str, Any]], aggs: list[dict[str, Any]]) -> str:
    """The case's functions, each at its cheapest warm size, beside CopyObject."""
    done = [c for c in copies if c.get("status") == "ok"]
    if not done:
        return ""
    warm_s = statistics.median(c["job2_s"] for c in done)
    cold_s = statistics.median(c["job1_s"] for c in done)
    copy_usd = statistics.median(c["job2_usd"] for c in done)
    requests = sorted({", ".join(f"{k}: {v}" for k, v in c["job2_requests"].items())
                       for c in done})
    lines = [
        f"## {case} beside S3 CopyObject",
        "",
        "Every column and every row of one object is, for a user, S3 CopyObject: one request "
        "and no function. The copy ran on the same substrate and through the same proxy as "
        "the functions (timed around the request alone; the copy checked like their outputs). "
        "Priced as AWS bills each (us-east-1 list prices): a function's warm job at its "
        f"cheapest size = GB-s x ${USD_PER_GB_S:.10f} + one invocation (${USD_PER_INVOKE:.7f}); "
        "its own S3 requests are left out, so its $ is a floor. CopyObject = one COPY "
        f"request (${USD_PER_COPY:.6f}), no GB-s. Copies of each object: {len(done)}; "
        f"requests MinIO counted per copy: {'; '.join(requests)}.",
        "",
        "| approach | cheapest warm size | warm job s | GB-s warm | $ per warm job "
        "| x CopyObject |",
        "|---|---:|---:|---:|---:|---:|",
        f"| {APPROACH} | none | {warm_s:.2f} (cold {cold_s:.2f}) | 0 (none billed) | "
        f"{copy_usd:.7f} | 1 |",
    ]
    best: dict[str, dict[str, Any]] = {}
    for a in aggs:
        if a["case"] != case or a["ok"] != a["runs"] or not a["ok"] or a["gbs_warm"] is None:
            continue
        cur = best.get(a["approach"])
        if cur is None or a["gbs_warm"] < cur["gbs_warm"]:
            best[a["approach"]] = a
    for name, a in sorted(best.items(), key=lambda kv: kv[1]["gbs_warm"]):
        usd = function_usd(a["gbs_warm"])
        times = f"{usd / copy_usd:.1f}" if copy_usd else ""
        lines.append(
            f"| {name} | {a['size_mb']} MB | {a['job2_s']:.2f} | {a['gbs_warm']:.2f} | "
            f"{usd:.7f} | {times} |"
        )
    return "\n".join(lines)
