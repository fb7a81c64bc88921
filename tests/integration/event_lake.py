"""The lake the nothing-lost tests read: a data bucket holding a good object and one whose
footer claims more rows than its pages hold (polars panics on it), a results bucket, the
handler's environment pointing at both, and the events (S3, SQS, Distributed Map) that
name objects in it with their current size and ETag."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

from tests import malformed
from tests.support import EVENTS, S3Env, forget_warm_state

DATA, RESULTS = "lost-data", "lost-results"
GOOD = pa.table({"id": pa.array(range(1_000), pa.int64()),
                 "v": pa.array([float(i % 97) for i in range(1_000)])})


def load(name: str) -> Any:
    return json.loads((EVENTS / name).read_text())


def open_lake(s3: S3Env, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Env]:
    """The lake on ``s3`` (a test's fixture), with no warm state before or after."""
    for bucket in (DATA, RESULTS):
        s3.empty_bucket(bucket)
    s3.client.put_object(Bucket=DATA, Key="in/good.parquet", Body=malformed.write(GOOD))
    inflated, _ = malformed.inflated_row_count()
    s3.client.put_object(Bucket=DATA, Key="in/inflated.parquet", Body=inflated)
    monkeypatch.setenv("S3SLICE_QUERY", json.dumps({"columns": ["id", "v"]}))
    monkeypatch.setenv("S3SLICE_OUTPUT_URI", f"s3://{RESULTS}/out/")
    monkeypatch.setenv("S3SLICE_SOURCE_URIS", f"s3://{DATA}/in/")
    forget_warm_state()
    yield s3
    forget_warm_state()


def put(s3: S3Env, key: str, data: bytes) -> str:
    s3.client.put_object(Bucket=DATA, Key=key, Body=data)
    return f"s3://{DATA}/{key}"


def rows_of(s3: S3Env, uri: str) -> pl.DataFrame:
    return pl.read_parquet(s3.get(uri))


def s3_records(s3: S3Env, *keys: str) -> dict[str, Any]:
    event = load("s3-put.json")
    template = event["Records"][0]
    event["Records"] = []
    for key in keys:
        record = copy.deepcopy(template)
        head = s3.client.head_object(Bucket=DATA, Key=key)
        record["s3"]["bucket"]["name"] = DATA
        record["s3"]["object"].update(key=key, size=head["ContentLength"],
                                      eTag=head["ETag"].strip('"'))
        event["Records"].append(record)
    return event


def map_items(s3: S3Env, *keys: str) -> dict[str, Any]:
    event = load("sfn-map-batch.json")
    event["BatchInput"] = {"bucket": DATA}
    event["Items"] = []
    for key in keys:
        head = s3.client.head_object(Bucket=DATA, Key=key)
        event["Items"].append({"Key": key, "Size": head["ContentLength"],
                               "Etag": head["ETag"]})
    return event


def sqs(s3: S3Env, *keys: str) -> dict[str, Any]:
    event = load("sqs-s3-notification.json")
    template = event["Records"][0]
    event["Records"] = [dict(copy.deepcopy(template), messageId=f"msg-{i}",
                             body=json.dumps(s3_records(s3, key)))
                        for i, key in enumerate(keys)]
    return event
