"""A warm container: 1,000 invocations of the handler in one process, against the local
S3 server, leak no threads, file descriptors, temporary files or memory."""

from __future__ import annotations

import gc
import io
import threading
from pathlib import Path
from typing import Any

import polars as pl
import psutil
import pytest

from s3slice import FOOTER_CACHE, ObjectNotFoundError
from s3slice.cli.demo import sample_table
from s3slice.cli.invoke import LambdaContext
from s3slice.entry import dispatch as _entry
from s3slice.handler import lambda_handler
from tests.support import S3Env

#: 1,050 invocations against the in-process S3 server take 5 minutes on an idle 2-core
#: machine and more than 10 on a busy one; the budget is for a hang, not for speed.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

BUCKET, OUTPUT = "warm-data", "warm-results"
INVOCATIONS = 1_000
WARMUP = 50
#: RSS may settle (allocator arenas, caches filling to their bounds) but not grow with
#: the number of invocations: 1,000 leaked footers or frames would be far more.
RSS_GROWTH_LIMIT = 64 * 1024 * 1024


def own_threads() -> list[str]:
    """Threads of the service (the server's per-request threads come and go)."""
    return sorted(t.name for t in threading.enumerate()
                  if "process_request_thread" not in t.name)


def snapshot(tmp: Path) -> dict[str, Any]:
    gc.collect()
    proc = psutil.Process()
    return {"threads": own_threads(), "fds": proc.num_fds(),
            "tmp": sorted(p.name for p in tmp.iterdir()), "rss": proc.memory_info().rss}


def test_a_thousand_warm_invocations_leak_nothing(s3: S3Env, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    s3.bucket(BUCKET)
    s3.bucket(OUTPUT)
    s3.put_frame(BUCKET, "t.parquet", sample_table(8_000), row_group_size=2_000)
    csv = io.BytesIO()
    sample_table(4_000, seed=3).write_csv(csv)
    s3.client.put_object(Bucket=BUCKET, Key="t.csv", Body=csv.getvalue())
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("S3SLICE_TMP_DIR", str(scratch))
    monkeypatch.setenv("S3SLICE_FOOTER_SIZE", "4096")  # the CSV takes the /tmp path
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    _entry.reset()
    FOOTER_CACHE.clear()

    requests: list[dict[str, Any]] = [
        # ranges, written to S3
        {"source": f"s3://{BUCKET}/t.parquet", "columns": ["col_1", "region"],
         "filter": "col_1 <= 50000", "output": {"uri": f"s3://{OUTPUT}/r/"}},
        # the whole object, inline rows
        {"source": f"s3://{BUCKET}/t.parquet", "sql": "SELECT region, COUNT(*) AS n "
         "FROM s3object GROUP BY region"},
        # CSV, scanned lazily
        {"source": f"s3://{BUCKET}/t.csv", "filter": "col_2 < 1000", "columns": ["col_2"]},
        # a failure: the typed error, nothing kept
        {"source": f"s3://{BUCKET}/missing.parquet"},
    ]

    def invoke(i: int) -> None:
        request = requests[i % len(requests)]
        try:
            response = lambda_handler(request, LambdaContext())
        except ObjectNotFoundError:
            assert "missing" in request["source"]
            return
        assert response["status"] == "ok", response
        if i % len(requests) == 2:
            assert response["stats"]["strategy_inputs"]["streamed"] is True

    for i in range(WARMUP):
        invoke(i)
    before = snapshot(scratch)
    for i in range(INVOCATIONS):
        invoke(i)
    after = snapshot(scratch)

    assert after["threads"] == before["threads"]
    assert after["fds"] <= before["fds"]
    assert after["tmp"] == before["tmp"] == []
    assert after["rss"] - before["rss"] < RSS_GROWTH_LIMIT, (before["rss"], after["rss"])
    # The outputs are one object per query, rewritten in place, not one per invocation.
    assert len(s3.keys(OUTPUT)) == 1
    assert pl.read_parquet(s3.get(f"s3://{OUTPUT}/{s3.keys(OUTPUT)[0]}")).height > 0
