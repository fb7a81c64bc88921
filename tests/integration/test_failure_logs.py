"""When an SQS message fails, its log says why: one structured line per failed record
(``message failed``: errorType, errorMessage, retryable, object, pipeline) and a
``FailedMessages`` metric by error type, through lambda_handler on a real (moto) S3."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import polars as pl
import pytest

from s3slice import FOOTER_CACHE
from s3slice.cli.demo import sample_table
from s3slice.cli.invoke import LambdaContext
from s3slice.entry import dispatch as _entry
from s3slice.entry.observe import logger, metrics
from s3slice.handler import lambda_handler
from tests.integration.test_pipeline_messages import SOURCE, message, pipeline
from tests.support import S3Env

pytestmark = pytest.mark.integration

OUT = "pipes-out-a"


@pytest.fixture
def world(s3: S3Env, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Env]:
    for bucket in (SOURCE, OUT):
        s3.empty_bucket(bucket)
    s3.put_frame(SOURCE, "a/one.parquet", sample_table(500, seed=3))
    for name in ("S3SLICE_QUERY", "S3SLICE_OUTPUT_URI", "S3SLICE_SOURCE_URIS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    metrics.clear_metrics()
    _entry.reset()
    FOOTER_CACHE.clear()
    yield s3
    metrics.clear_metrics()
    _entry.reset()


@pytest.fixture
def log_lines(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """The function's structured log, as its handler writes it."""
    stream = io.StringIO()
    monkeypatch.setattr(logger.registered_handler, "stream", stream)
    return stream


def failed_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    return [line for line in lines if line.get("message") == "message failed"]


def test_each_failed_record_logs_its_error_object_and_pipeline(
        world: S3Env, log_lines: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"s3://{SOURCE}/a/one.parquet"
    missing = f"s3://{SOURCE}/a/gone.parquet"
    event = {"Records": [
        # A column the data does not have: permanent.
        message("a/one.parquet", pipeline({"columns": ["nope"]}, f"s3://{OUT}/x/"), "m1"),
        # An object that is not there.
        message("a/gone.parquet", pipeline({}, f"s3://{OUT}/y/"), "m2"),
        # A body that is not the function's: refused before any object is named.
        {**message("a/one.parquet", pipeline({}, f"s3://{OUT}/z/"), "m3"), "body": "{oops"},
        # A good one, untouched by the others.
        message("a/one.parquet", pipeline({"columns": ["col_1"]}, f"s3://{OUT}/ok/"), "m4"),
    ]}
    response = lambda_handler(event, LambdaContext())
    assert sorted(f["itemIdentifier"] for f in response["batchItemFailures"]) == [
        "m1", "m2", "m3"]
    lines = {line["messageId"]: line for line in failed_lines(log_lines)}
    assert sorted(lines) == ["m1", "m2", "m3"]

    m1 = lines["m1"]
    assert m1["errorType"] == "UnknownColumnError" and m1["retryable"] is False
    assert "nope" in m1["errorMessage"]
    assert m1["object"] == uri and m1["objects"] == [uri]
    assert m1["pipeline"] == "App/Stack/P" and m1["level"] == "ERROR"

    m2 = lines["m2"]
    assert m2["errorType"] == "ObjectNotFoundError" and m2["object"] == missing
    assert m2["pipeline"] == "App/Stack/P"

    m3 = lines["m3"]
    assert m3["errorType"] == "RequestError" and m3["retryable"] is False
    # Powertools leaves out a key whose value is None: no object, no pipeline named.
    assert m3["objects"] == [] and "object" not in m3 and "pipeline" not in m3
    assert "not JSON" in m3["errorMessage"]

    got = pl.read_parquet(world.get(f"s3://{OUT}/{world.keys(OUT)[0]}"))
    assert got.columns == ["col_1"] and got.height == 500

    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines()
           if '"FailedMessages"' in line]
    assert sorted(b["ErrorType"] for b in emf) == [
        "ObjectNotFoundError", "RequestError", "UnknownColumnError"]
    assert all(b["FailedMessages"] == [1.0] for b in emf)


def test_a_query_the_function_refuses_is_logged_as_permanent(
        world: S3Env, log_lines: io.StringIO) -> None:
    event = {"Records": [message("a/one.parquet", pipeline(
        {"sql": "SELECT * FROM read_parquet('s3://elsewhere/x.parquet')"},
        f"s3://{OUT}/x/"), "m1")]}
    response = lambda_handler(event, LambdaContext())
    assert response["batchItemFailures"] == [{"itemIdentifier": "m1"}]
    [line] = failed_lines(log_lines)
    assert line["errorType"] == "ForbiddenQueryError" and line["retryable"] is False
    assert line["object"] == f"s3://{SOURCE}/a/one.parquet"
    assert "read_parquet" in line["errorMessage"]
    assert world.keys(OUT) == []
