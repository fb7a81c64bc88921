"""The command line in real subprocesses against a real S3 server on loopback: the
documented exit code every time, JSON on stdout, no traceback, and no abort after the
JSON was printed."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import polars as pl
import pytest

from s3slice._demo import sample_table
from s3slice._local_s3 import LOCAL_CREDENTIALS, LocalS3

pytestmark = pytest.mark.integration

BUCKET, KEY = "cli-data", "t.parquet"
SOURCE = f"s3://{BUCKET}/{KEY}"
#: The failed-range path, run this many times (it aborted in 4 of 48 runs before the fix).
RUNS = 50
#: Subprocesses at a time: each mostly waits on the client's retry back-off.
PARALLEL = 5
_SPAN = re.compile(r"bytes=\d+-\d+$")


class RangeFaults:
    """WSGI middleware: while ``status`` is set, every GET of an explicit byte span
    (``bytes=a-b``, the column chunks) is answered with it; the footer's suffix GET
    (``bytes=-n``) is served, so a read fails in its ranged phase, with GETs in flight."""

    def __init__(self) -> None:
        self.status: str | None = None
        self.hits = 0
        self._lock = threading.Lock()

    def __call__(self, app: Any) -> Any:
        def wrapped(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            status = self.status
            if (status is None or environ["REQUEST_METHOD"] != "GET"
                    or not _SPAN.match(environ.get("HTTP_RANGE") or "")):
                return app(environ, start_response)  # type: ignore[no-any-return]
            with self._lock:
                self.hits += 1
            body = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>InternalError"
                    b"</Code><Message>We encountered an error.</Message></Error>")
            start_response(status, [("Content-Type", "application/xml"),
                                    ("Content-Length", str(len(body)))])
            return [body]
        return wrapped


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return sample_table(100_000)


@pytest.fixture(scope="module")
def server(table: pl.DataFrame) -> Iterator[tuple[str, RangeFaults]]:
    """An S3 server of this module's own (the shared one's faults match by path, and the
    footer and the column chunks share one), with one object of 5 row groups."""
    faults = RangeFaults()
    with LocalS3(middleware=faults) as s3:
        client = boto3.client("s3", endpoint_url=s3.endpoint_url,
                              aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                              region_name=LOCAL_CREDENTIALS["AWS_REGION"])
        client.create_bucket(Bucket=BUCKET)
        buf = io.BytesIO()
        table.write_parquet(buf, row_group_size=20_000)
        client.put_object(Bucket=BUCKET, Key=KEY, Body=buf.getvalue())
        yield s3.endpoint_url, faults
        faults.status = None


@pytest.fixture
def faults(server: tuple[str, RangeFaults]) -> Iterator[RangeFaults]:
    _, rules = server
    rules.status, rules.hits = None, 0
    yield rules
    rules.status = None


def cli_run(endpoint: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m s3slice ARGS`` with the local credentials; a native abort would name
    itself on stderr (the fault handler is on)."""
    env = {**os.environ, **LOCAL_CREDENTIALS,
           "S3SLICE_PART_SIZE": str(256 * 1024),  # several ranged GETs in flight
           "S3SLICE_REQUEST_TIMEOUT_S": "2",
           "POWERTOOLS_METRICS_DISABLED": "true",
           "PYTHONFAULTHANDLER": "1"}
    env.pop("AWS_ENDPOINT_URL_S3", None)
    return subprocess.run([sys.executable, "-m", "s3slice", *args, "--endpoint-url", endpoint],
                          capture_output=True, text=True, timeout=timeout, env=env, check=False)


def describe(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\nstdout: {proc.stdout[-500:]}\nstderr: {proc.stderr[-1500:]}"


@pytest.mark.slow
def test_a_failed_range_read_exits_2_every_time(server: tuple[str, RangeFaults],
                                                faults: RangeFaults) -> None:
    """Every column-chunk GET fails past the client's retries: each of the runs prints the
    typed error and exits 2. Before the fix some aborted (134) or died of a bus error (135)
    after printing, when obstore's tokio threads called into a finalizing interpreter."""
    endpoint, _ = server
    faults.status = "500 Internal Server Error"
    query = ("query", "--source", SOURCE, "--columns", "col_1,col_2", "--filter", "col_1 <= 20000")
    with ThreadPoolExecutor(PARALLEL) as pool:
        runs = list(pool.map(lambda _: cli_run(endpoint, *query), range(RUNS)))
    assert faults.hits >= RUNS, "the fault was not exercised"
    failed = [p for p in runs if p.returncode != 2 or "Fatal Python error" in p.stderr
              or "Traceback" in p.stderr]
    assert not failed, (f"{len(failed)} of {RUNS} runs did not end as documented; the "
                        f"first:\n{describe(failed[0])}")
    for proc in runs:
        response = json.loads(proc.stdout)
        assert response["status"] == "error"
        assert response["errorType"] == "S3SliceTransientError"
        assert response["retryable"] is True
        assert SOURCE in response["errorMessage"] and "500" in response["errorMessage"]


def test_a_successful_query_exits_0(server: tuple[str, RangeFaults], faults: RangeFaults,
                                    table: pl.DataFrame) -> None:
    endpoint, _ = server
    proc = cli_run(endpoint, "query", "--source", SOURCE, "--columns", "col_1",
                   "--filter", "col_1 <= 50", "--return-rows")
    assert proc.returncode == 0, describe(proc)
    rows = pl.DataFrame(json.loads(proc.stdout)["rows"])
    assert rows.sort("col_1").equals(table.filter(pl.col("col_1") <= 50).select("col_1")
                                     .sort("col_1"))


def test_usage_errors_exit_2_before_any_request(server: tuple[str, RangeFaults],
                                                faults: RangeFaults) -> None:
    endpoint, _ = server
    proc = cli_run(endpoint, "query", "--source", SOURCE, "--sql", "SELECT col_1 FROM s3object",
                   "--filter", "col_1 <= 50", "--limit", "3")
    assert proc.returncode == 2, describe(proc)
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert "s3slice query: error: --filter and --limit cannot be combined with --sql" \
        in proc.stderr


def test_a_closed_stdout_is_reported_not_a_traceback(server: tuple[str, RangeFaults],
                                                     faults: RangeFaults) -> None:
    """``s3slice query ... | head -c 0``: the response cannot be delivered: exit 1, one line
    on stderr."""
    endpoint, _ = server
    env = {**os.environ, **LOCAL_CREDENTIALS, "POWERTOOLS_METRICS_DISABLED": "true"}
    with subprocess.Popen([sys.executable, "-m", "s3slice", "query", "--source", SOURCE,
                           "--columns", "col_1", "--return-rows", "--endpoint-url", endpoint],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        err = proc.stderr.read()
        code = proc.wait(timeout=120)
    assert code == 1, err[-1500:]
    assert "s3slice: stdout was closed before the response was written" in err
    assert "Traceback" not in err


def test_a_huge_limit_is_no_traceback(server: tuple[str, RangeFaults], faults: RangeFaults,
                                      table: pl.DataFrame) -> None:
    """The command line passes the limit to the request as given; the JSON API decides what
    it means (all the rows, as no limit, or a RequestError naming ``limit``), never a raw
    OverflowError."""
    endpoint, _ = server
    limits = [2**32 - 1, 2**32, 2**63, 2**64 + 1]
    with ThreadPoolExecutor(len(limits)) as pool:
        runs = list(pool.map(lambda n: cli_run(endpoint, "query", "--source", SOURCE,
                                               "--columns", "col_1", "--limit", str(n),
                                               "--return-rows"), limits))
    for limit, proc in zip(limits, runs, strict=True):
        assert "Traceback" not in proc.stderr, (limit, describe(proc))
        response = json.loads(proc.stdout)
        if proc.returncode == 0:
            assert len(response["rows"]) == table.height, limit
        else:
            assert proc.returncode == 2, (limit, describe(proc))
            assert response["errorType"] == "RequestError", limit
            assert "limit" in response["errorMessage"], limit
