"""Pipelines' SQS messages through lambda_handler: each message carries its pipeline's
query and output (``s3slice`` field, as ``s3slice_cdk.Pipeline``'s EventBridge rule puts
it), so one function serves several pipelines with no query or output configured."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import polars as pl
import pytest
from aws_lambda_powertools.utilities.data_classes import SQSRecord

from s3slice import FOOTER_CACHE
from s3slice.cli.demo import sample_table
from s3slice.cli.invoke import LambdaContext
from s3slice.core.errors import ConfigurationError, RequestError
from s3slice.entry import dispatch as _entry
from s3slice.entry import events as _events
from s3slice.handler import lambda_handler
from tests.support import EVENTS, S3Env

pytestmark = pytest.mark.integration

SOURCE, OUT_A, OUT_B = "pipes-src", "pipes-out-a", "pipes-out-b"
QUERY_A = {"columns": ["col_1", "region"], "filter": "col_1 <= 400000"}
QUERY_B = {"sql": "SELECT region, col_1 FROM s3object WHERE col_1 > 700000"}


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return sample_table(4_000, seed=11)


@pytest.fixture
def world(s3: S3Env, table: pl.DataFrame, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Env]:
    for bucket in (SOURCE, OUT_A, OUT_B):
        s3.empty_bucket(bucket)
    s3.put_frame(SOURCE, "a/one.parquet", table.head(3_000))
    s3.put_frame(SOURCE, "b/two.parquet", table.tail(2_500))
    # No configured query or output: each message must bring its own.
    for name in ("S3SLICE_QUERY", "S3SLICE_OUTPUT_URI", "S3SLICE_SOURCE_URIS"):
        monkeypatch.delenv(name, raising=False)
    _entry.reset()
    FOOTER_CACHE.clear()
    yield s3
    _entry.reset()


def message(key: str, pipeline: Any, message_id: str) -> dict[str, Any]:
    """An SQS record whose body is what a pipeline's rule sends for ``key``: the
    EventBridge event's fields with ``s3slice`` added."""
    event = json.loads((EVENTS / "eventbridge-object-created.json").read_text())
    event["detail"]["bucket"]["name"] = SOURCE
    event["detail"]["object"].update(key=key)
    del event["detail"]["object"]["size"], event["detail"]["object"]["etag"]
    body = {"source": "aws.s3", "detail-type": event["detail-type"], "id": event["id"],
            "time": event["time"], "detail": event["detail"], "s3slice": pipeline}
    [record] = json.loads((EVENTS / "sqs-s3-notification.json").read_text())["Records"][:1]
    return {**record, "messageId": message_id, "body": json.dumps(body)}


def pipeline(query: Any, output: str, fmt: str = "parquet") -> dict[str, Any]:
    return {"pipeline": "App/Stack/P", "query": query,
            "output": {"uri": output, "format": fmt}}


def only_output(s3: S3Env, bucket: str) -> pl.DataFrame:
    [key] = s3.keys(bucket)
    return pl.read_parquet(s3.get(f"s3://{bucket}/{key}"))


def test_each_message_runs_its_own_pipelines_query_into_its_output(
        world: S3Env, table: pl.DataFrame) -> None:
    event = {"Records": [
        message("a/one.parquet", pipeline(QUERY_A, f"s3://{OUT_A}/sliced/"), "m-a"),
        message("b/two.parquet", pipeline(QUERY_B, f"s3://{OUT_B}/big/"), "m-b"),
    ]}
    response = lambda_handler(event, LambdaContext())
    assert response["batchItemFailures"] == []
    expected_a = table.head(3_000).filter(pl.col("col_1") <= 400_000).select(
        "col_1", "region")
    expected_b = table.tail(2_500).filter(pl.col("col_1") > 700_000).select("region", "col_1")
    got_a, got_b = only_output(world, OUT_A), only_output(world, OUT_B)
    assert got_a.height > 0 and got_b.height > 0
    assert got_a.equals(expected_a)
    assert got_b.equals(expected_b)
    assert all(k.startswith("sliced/") for k in world.keys(OUT_A))
    assert all(k.startswith("big/") for k in world.keys(OUT_B))


def test_an_object_under_its_pipelines_output_is_skipped(world: S3Env,
                                                        table: pl.DataFrame) -> None:
    world.put_frame(SOURCE, "out/looped.parquet", table.head(10))
    event = {"Records": [message("out/looped.parquet",
                                 pipeline(QUERY_A, f"s3://{SOURCE}/out/"), "m-loop")]}
    world.log.clear()
    response = lambda_handler(event, LambdaContext())
    assert response["batchItemFailures"] == []
    assert world.keys(SOURCE, "out/") == ["out/looped.parquet"]  # nothing written
    assert world.log.gets() == []  # and nothing read


@pytest.mark.parametrize(("bad", "why"), [
    ({"query": {"nope": 1}, "output": {"uri": f"s3://{OUT_A}/x/"}}, "unknown"),
    ({"query": QUERY_A}, "expected an output"),
    ({"query": QUERY_A, "output": {"uri": f"s3://{OUT_A}/x/one.parquet"}}, "one object"),
    ({"query": QUERY_A, "output": {"uri": f"s3://{OUT_A}/x/"}, "extra": 1}, "extra"),
    ("SELECT 1", "expected an object"),
])
def test_a_malformed_pipeline_fails_only_its_message(world: S3Env, table: pl.DataFrame,
                                                     bad: Any, why: str) -> None:
    event = {"Records": [
        message("a/one.parquet", bad, "m-bad"),
        message("b/two.parquet", pipeline(QUERY_B, f"s3://{OUT_B}/big/"), "m-good"),
    ]}
    response = lambda_handler(event, LambdaContext())
    assert response["batchItemFailures"] == [{"itemIdentifier": "m-bad"}]
    assert only_output(world, OUT_B).equals(
        table.tail(2_500).filter(pl.col("col_1") > 700_000).select("region", "col_1"))
    assert world.keys(OUT_A) == []
    # ... and why: the message's pipeline is refused as a request error naming it.
    with pytest.raises(RequestError, match=why):
        _events.sqs_body_pipeline(SQSRecord(event["Records"][0]))


def test_a_message_without_a_pipeline_still_needs_the_configuration(world: S3Env) -> None:
    record = message("a/one.parquet", None, "m-plain")
    body = json.loads(record["body"])
    del body["s3slice"]
    record["body"] = json.dumps(body)
    with pytest.raises(ConfigurationError, match="S3SLICE_QUERY"):
        lambda_handler({"Records": [record]}, LambdaContext())
