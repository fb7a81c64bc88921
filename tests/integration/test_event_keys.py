"""Object keys holding ``+``, ``%``, spaces, ``:`` and non-ASCII, through every event kind.

S3 event notifications carry keys URL-encoded (a space as ``+``); EventBridge carries them
as they are (AWS's sample events hold ``:`` raw); an SQS- or SNS-wrapped event is read as
its inner kind. Each event names one object; the answer must be that object's, read from
exactly its key."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import polars as pl
import pytest

from s3slice import FOOTER_CACHE
from s3slice.cli.demo import sample_table
from s3slice.cli.invoke import LambdaContext
from s3slice.entry import dispatch as _entry
from s3slice.handler import lambda_handler
from tests.support import EVENTS, S3Env

pytestmark = pytest.mark.integration

SOURCE, OUTPUT = "event-keys", "event-keys-out"
QUERY = {"columns": ["col_1", "region"], "filter": "col_1 <= 500000"}
KEYS = ("eb/c++ 100%.parquet", "in/a+b%20c d.parquet", "in/t=2024-01-01T10:00:00Z.parquet",
        "in/naïve €/ünïcode 日本.parquet", "in/percent%2Bplus+.parquet")


def load(name: str) -> Any:
    return json.loads((EVENTS / name).read_text())


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return sample_table(5_000, seed=7)


@pytest.fixture
def world(s3: S3Env, table: pl.DataFrame, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Env]:
    s3.bucket(SOURCE)
    s3.empty_bucket(OUTPUT)
    for i, key in enumerate(KEYS):  # each object distinct, so a wrong key is a wrong answer
        s3.put_frame(SOURCE, key, table.head(1_000 * (i + 1)))
    monkeypatch.setenv("S3SLICE_QUERY", json.dumps(QUERY))
    monkeypatch.setenv("S3SLICE_OUTPUT_URI", f"s3://{OUTPUT}/results/")
    monkeypatch.setenv("S3SLICE_SOURCE_URIS", f"s3://{SOURCE}/")
    _entry.reset()
    FOOTER_CACHE.clear()
    yield s3
    _entry.reset()


def s3_notification(key: str) -> dict[str, Any]:
    event = load("s3-put.json")
    record = event["Records"][0]
    record["s3"]["bucket"]["name"] = SOURCE
    # As S3 encodes keys in notifications: URL-encoded, a space as '+'.
    record["s3"]["object"].update(key=urllib.parse.quote_plus(key, safe="/"), size=None,
                                  eTag=None)
    return event


def eventbridge(key: str) -> dict[str, Any]:
    event = load("eventbridge-object-created.json")
    event["detail"]["bucket"]["name"] = SOURCE
    event["detail"]["object"].update(key=key)  # EventBridge: the key as it is
    del event["detail"]["object"]["size"], event["detail"]["object"]["etag"]
    return event


def sqs(body: dict[str, Any]) -> dict[str, Any]:
    event = load("sqs-s3-notification.json")
    record = event["Records"][0]
    record["body"] = json.dumps(body)
    event["Records"] = [record]
    return event


def sns(body: dict[str, Any]) -> dict[str, Any]:
    return {"Type": "Notification", "MessageId": "m-1", "TopicArn": "arn:aws:sns:x",
            "Message": json.dumps(body)}


SHAPES: dict[str, Callable[[str], dict[str, Any]]] = {
    "s3": s3_notification,
    "eventbridge": eventbridge,
    "sqs(s3)": lambda key: sqs(s3_notification(key)),
    "sqs(eventbridge)": lambda key: sqs(eventbridge(key)),
    "sqs(sns(s3))": lambda key: sqs(sns(s3_notification(key))),
    "sqs(sns(eventbridge))": lambda key: sqs(sns(eventbridge(key))),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("index", range(len(KEYS)))
def test_every_event_kind_reads_exactly_the_key_it_names(world: S3Env, table: pl.DataFrame,
                                                         shape: str, index: int) -> None:
    key = KEYS[index]
    world.log.clear()
    response = lambda_handler(SHAPES[shape](key), LambdaContext())
    assert "batchItemFailures" not in response or response["batchItemFailures"] == []
    [output] = world.keys(OUTPUT)
    expected = table.head(1_000 * (index + 1)).filter(pl.col("col_1") <= 500_000)
    got = pl.read_parquet(world.get(f"s3://{OUTPUT}/{output}"))
    assert got.equals(expected.select(QUERY["columns"]))
    assert got.height > 0
    # Every GET of the source went to the key itself, never to a decoded variant (the
    # server's PATH_INFO is URL-decoded once, its bytes as latin-1, as WSGI defines).
    source_paths = {r.path.encode("latin-1").decode() for r in world.log.gets()
                    if r.path.startswith(f"/{SOURCE}/")}
    assert source_paths == {f"/{SOURCE}/{key}"}
