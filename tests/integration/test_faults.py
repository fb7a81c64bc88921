"""Faults injected by the local S3 server: transient ones end in success after retries,
the rest in a typed error; never a partial output, never a hang past the timeouts."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import polars as pl
import pytest

from s3slice import (
    FOOTER_CACHE,
    AccessDeniedError,
    ObjectFormatError,
    ObjectNotFoundError,
    OutputError,
    S3SliceError,
    S3SliceThrottledError,
    S3SliceTransientError,
)
from s3slice.cli.demo import sample_table
from s3slice.cli.invoke import LambdaContext
from s3slice.entry import dispatch as _entry
from s3slice.handler import lambda_handler
from tests.support import Fault, S3Env

pytestmark = pytest.mark.integration

BUCKET, OUTPUT = "fault-data", "fault-results"
KEY = "t.parquet"
QUERY = {"columns": ["col_1", "col_2"], "filter": "col_1 <= 20000"}
#: Every case ends well within this (retries back off for a few seconds at most).
BOUND_S = 45.0


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return sample_table(100_000)


@pytest.fixture
def world(s3: S3Env, table: pl.DataFrame, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Env]:
    s3.bucket(BUCKET)
    s3.empty_bucket(OUTPUT)
    s3.put_frame(BUCKET, KEY, table, row_group_size=20_000)
    monkeypatch.setenv("S3SLICE_REQUEST_TIMEOUT_S", "2")
    monkeypatch.setenv("S3SLICE_PART_SIZE", str(256 * 1024))  # several ranged GETs
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    _entry.reset()
    FOOTER_CACHE.clear()
    s3.log.clear()
    yield s3
    s3.faults.clear()
    _entry.reset()


def oracle(table: pl.DataFrame) -> pl.DataFrame:
    return table.filter(pl.col("col_1") <= 20000).select(QUERY["columns"])


def invoke(output: bool = True) -> tuple[dict[str, Any] | S3SliceError, float]:
    request: dict[str, Any] = {"source": f"s3://{BUCKET}/{KEY}", **QUERY}
    if output:
        request["output"] = {"uri": f"s3://{OUTPUT}/r/"}
    started = time.monotonic()
    try:
        response: dict[str, Any] | S3SliceError = lambda_handler(request, LambdaContext())
    except S3SliceError as e:
        response = e
    return response, time.monotonic() - started


def assert_success(world: S3Env, table: pl.DataFrame, response: Any) -> None:
    assert isinstance(response, dict), response
    (written,) = response["outputs"]
    assert pl.read_parquet(world.get(written["uri"])).sort("col_1", "col_2").equals(
        oracle(table).sort("col_1", "col_2"))


TRANSIENT = [
    pytest.param(Fault("503", times=2), id="503 SlowDown on the footer, twice"),
    pytest.param(Fault("500", times=2, ranged_only=True), id="500 on column chunks, twice"),
    pytest.param(Fault("reset", times=1, ranged_only=True), id="connection reset mid-range"),
    pytest.param(Fault("stall", times=1, seconds=4, ranged_only=True),
                 id="a response stalled past the request timeout"),
    pytest.param(Fault("stall", times=3, seconds=0.5), id="latency spikes"),
    pytest.param(Fault("503", method="PUT", times=2), id="503 on the output write"),
]


@pytest.mark.parametrize("fault", TRANSIENT)
def test_transient_faults_end_in_success(world: S3Env, table: pl.DataFrame,
                                         fault: Fault) -> None:
    world.faults.add(fault)
    response, elapsed = invoke()
    assert fault.hits == fault.times, "the fault was not exercised"
    assert_success(world, table, response)
    assert elapsed < BOUND_S


PERMANENT = [
    pytest.param(Fault("503", times=1_000), S3SliceThrottledError, "SlowDown",
                 id="SlowDown past the retries"),
    pytest.param(Fault("500", times=1_000, ranged_only=True), S3SliceTransientError, "",
                 id="500 past the retries"),
    pytest.param(Fault("403", times=1), AccessDeniedError, "access denied",
                 id="denied read"),
    pytest.param(Fault("delete", times=1, ranged_only=True), ObjectNotFoundError, KEY,
                 id="object deleted mid-read"),
    pytest.param(Fault("403", method="PUT", times=1), OutputError, OUTPUT,
                 id="denied write"),
]


@pytest.mark.parametrize(("fault", "error", "message"), PERMANENT)
def test_permanent_faults_end_in_a_typed_error_and_no_output(
        world: S3Env, fault: Fault, error: type[S3SliceError], message: str) -> None:
    world.faults.add(fault)
    response, elapsed = invoke()
    assert isinstance(response, error), response
    assert message in str(response)
    assert response.retryable is isinstance(response, S3SliceTransientError)
    assert world.keys(OUTPUT) == []
    assert elapsed < BOUND_S


def test_a_missing_output_bucket_is_an_output_error(world: S3Env) -> None:
    request = {"source": f"s3://{BUCKET}/{KEY}", **QUERY,
               "output": {"uri": "s3://no-such-bucket-here/r/"}}
    with pytest.raises(OutputError,
                       match="the output bucket no-such-bucket-here does not exist"):
        lambda_handler(request, LambdaContext())


def test_replaced_mid_read_restarts_on_the_new_object(world: S3Env,
                                                      table: pl.DataFrame) -> None:
    """The first ranged GET finds a new ETag (the object was rewritten after the footer was
    read): the read restarts once, on the new object, and answers for it alone."""
    replacement = sample_table(50_000, seed=9)
    rewrite = world.faults.add(Fault("delete", times=1, ranged_only=True))
    world.faults.on_delete, deleter = None, world.faults.on_delete

    def replace(path: str) -> None:
        world.put_frame(BUCKET, KEY, replacement, row_group_size=10_000)
    world.faults.on_delete = replace
    try:
        response, _ = invoke()
    finally:
        world.faults.on_delete = deleter
    assert rewrite.hits == 1
    assert_success(world, replacement, response)


def test_empty_objects_over_s3(world: S3Env) -> None:
    """A range of an empty object cannot be satisfied; the object is still read as what it
    is: no Parquet (a format error, not a retryable one), or a CSV with no rows."""
    world.client.put_object(Bucket=BUCKET, Key="empty.parquet", Body=b"")
    world.client.put_object(Bucket=BUCKET, Key="empty.csv", Body=b"")
    with pytest.raises(ObjectFormatError, match="empty.parquet: not a Parquet object: 0 bytes"):
        lambda_handler({"source": f"s3://{BUCKET}/empty.parquet"}, LambdaContext())
    response = lambda_handler({"source": f"s3://{BUCKET}/empty.csv"}, LambdaContext())
    assert response["rows"] == []


def test_a_500_on_a_key_holding_503_is_transient_not_throttling(world: S3Env) -> None:
    """Throttling is told by the response's status and error code, never by the text of
    the key or URL in the message."""
    key = "part-503.parquet"
    world.put_frame(BUCKET, key, sample_table(1_000, seed=3))
    world.faults.add(Fault("500", times=1_000))
    with pytest.raises(S3SliceTransientError) as info:
        lambda_handler({"source": f"s3://{BUCKET}/{key}", **QUERY}, LambdaContext())
    assert not isinstance(info.value, S3SliceThrottledError)
    assert "part-503" in str(info.value)
