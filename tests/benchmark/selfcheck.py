"""Proof that the counters the benchmark reports are exact, and that the profile is on.

Counters: known requests go through the proxy (3 range GETs of known sizes, then 1 HEAD
and 1 LIST) and the server-side diffs must match them exactly in count, and in bytes up
to the response headers. Scraping alone must move nothing.

Profile: the time to the first byte of a 1-byte range GET and the rate of one 16 MiB GET
on one connection, to show the toxics are what the profile says.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from .common import ACCESS_KEY, BUCKET, REGION, SECRET_KEY
from .metrics import snapshot
from .substrate import Substrate

BLOB_KEY = "selfcheck/blob.bin"
BLOB_SIZE = 16 * (1 << 20)
RANGES = [(0, 1_000), (1_000_000, 1_100_000), (4_000_000, 5_000_000)]  # half-open
HEADER_ALLOWANCE = 1_000  # bytes of response headers tolerated per request


def s3_client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def ensure_blob(sub: Substrate) -> None:
    direct = s3_client(sub.direct_endpoint)
    try:
        if direct.head_object(Bucket=BUCKET, Key=BLOB_KEY)["ContentLength"] == BLOB_SIZE:
            return
    except direct.exceptions.ClientError:
        pass
    direct.put_object(Bucket=BUCKET, Key=BLOB_KEY, Body=os.urandom(BLOB_SIZE))


def counters(sub: Substrate) -> dict[str, Any]:
    ensure_blob(sub)
    s3 = s3_client(sub.endpoint)
    s3.head_bucket(Bucket=BUCKET)  # open the connection outside the measured window
    checks: dict[str, Any] = {}
    ok = True

    a = snapshot(sub.minio_metrics_url)
    time.sleep(1.0)
    b = snapshot(sub.minio_metrics_url)
    idle = b - a
    checks["idle"] = idle.to_json()
    ok &= idle.total_requests == 0 and idle.minio_sent_bytes == 0

    body = 0
    for lo, hi in RANGES:
        got = s3.get_object(Bucket=BUCKET, Key=BLOB_KEY, Range=f"bytes={lo}-{hi - 1}")
        body += len(got["Body"].read())
    c = snapshot(sub.minio_metrics_url)
    gets = c - b
    expected = sum(hi - lo for lo, hi in RANGES)
    checks["range_gets"] = {
        **gets.to_json(),
        "expected_requests": {"GetObject": len(RANGES)},
        "expected_body_bytes": expected,
        "client_body_bytes": body,
        "minio_overhead_bytes": gets.minio_sent_bytes - expected,
    }
    ok &= gets.requests == {"GetObject": len(RANGES)} and body == expected
    ok &= expected <= gets.minio_sent_bytes <= expected + HEADER_ALLOWANCE * len(RANGES)

    s3.head_object(Bucket=BUCKET, Key=BLOB_KEY)
    s3.list_objects_v2(Bucket=BUCKET, Prefix="selfcheck/")
    d = snapshot(sub.minio_metrics_url)
    meta = d - c
    checks["head_list"] = {
        **meta.to_json(),
        "expected_requests": {"HeadObject": 1, "ListObjectsV2": 1},
    }
    ok &= meta.requests == {"HeadObject": 1, "ListObjectsV2": 1}
    checks["ok"] = bool(ok)
    return checks


def profile(sub: Substrate) -> dict[str, Any]:
    ensure_blob(sub)
    s3 = s3_client(sub.endpoint)
    s3.head_bucket(Bucket=BUCKET)
    ttfb = []
    for _ in range(5):
        t0 = time.perf_counter()
        s3.get_object(Bucket=BUCKET, Key=BLOB_KEY, Range="bytes=0-0")["Body"].read()
        ttfb.append(time.perf_counter() - t0)
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        n = len(s3.get_object(Bucket=BUCKET, Key=BLOB_KEY)["Body"].read())
        walls.append(time.perf_counter() - t0)
    one_byte = statistics.median(ttfb)
    whole = statistics.median(walls)
    return {
        "profile": sub.profile,
        "one_byte_get_ms": round(one_byte * 1000, 1),
        "get_16MiB_s": round(whole, 3),
        "one_connection_MB_per_s": round(n / max(whole - one_byte, 1e-9) / 1e6, 1),
    }
