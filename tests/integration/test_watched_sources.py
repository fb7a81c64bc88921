"""Only what was named: an object a trigger names outside the watched sources is refused.

An S3 notification, an EventBridge ``Object Created`` event or an SQS message (its body an
S3 notification or EventBridge event, possibly wrapped by SNS, or a pipeline's message)
naming an object outside every watched source (``S3SLICE_SOURCE_URIS``, or a pipeline
message's own ``source``) fails with an ``AccessDeniedError`` naming the object and the
sources, for that object only: the S3 server's log shows no request for it and nothing
is written for it, while every other object of the batch is answered as the oracle
(polars' in-memory filter of the table written) answers it. Keys are compared after the
URL decoding S3 notifications need; prefixes are folders and buckets compare exactly.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import polars as pl
import pytest

from s3slice import FOOTER_CACHE, AccessDeniedError
from s3slice.cli.demo import sample_table
from s3slice.entry import dispatch as _entry
from tests.support import EVENTS, S3Env, invoke

pytestmark = pytest.mark.integration

SOURCE, EXTRA, EVIL, OUTPUT = "watched-src", "watched-extra", "watched-src-evil", "watched-out"
QUERY = {"columns": ["col_1", "region"], "filter": "col_1 <= 500000"}
#: The watched sources: a folder of one bucket, and a folder (with a space) of another.
SOURCES = (f"s3://{SOURCE}/landing/", f"s3://{EXTRA}/in put/")
#: Inside the sources (the key names need the decoding S3 notifications get).
INSIDE = ((SOURCE, "landing/a+b c%.parquet"), (SOURCE, "landing/deep/x.parquet"),
          (EXTRA, "in put/ünï €.parquet"))
#: Outside: a sibling folder sharing the prefix's letters, another folder, the folder's
#: own name as a key, a bucket whose name starts with the watched one's, a key of the
#: second source's folder in the first source's bucket.
OUTSIDE = ((SOURCE, "landing2/x.parquet"), (SOURCE, "other/landing/y.parquet"),
           (SOURCE, "landing"), (EVIL, "landing/z.parquet"), (SOURCE, "in put/w.parquet"))
OBJECTS = INSIDE + OUTSIDE


def load(name: str) -> Any:
    return json.loads((EVENTS / name).read_text())


@pytest.fixture(scope="module")
def tables() -> dict[tuple[str, str], pl.DataFrame]:
    # Each object distinct, so an answer from the wrong object is a wrong answer.
    return {obj: sample_table(400 + 100 * i, seed=i) for i, obj in enumerate(OBJECTS)}


@pytest.fixture
def world(s3: S3Env, tables: dict[tuple[str, str], pl.DataFrame],
          monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Env]:
    s3.empty_bucket(OUTPUT)
    for bucket in (SOURCE, EXTRA, EVIL):
        held = set(s3.keys(s3.bucket(bucket)))
        wanted = {key for b, key in tables if b == bucket}
        if held != wanted:  # written once per session: no test writes to these buckets
            s3.empty_bucket(bucket)
            for key in wanted:
                s3.put_frame(bucket, key, tables[bucket, key])
    monkeypatch.setenv("S3SLICE_QUERY", json.dumps(QUERY))
    monkeypatch.setenv("S3SLICE_OUTPUT_URI", f"s3://{OUTPUT}/results/")
    monkeypatch.setenv("S3SLICE_SOURCE_URIS", ",".join(SOURCES))
    _entry.reset()
    FOOTER_CACHE.clear()
    s3.log.clear()
    yield s3
    _entry.reset()


# ------------------------------------------------------------------------ event shapes
def s3_record(bucket: str, key: str) -> dict[str, Any]:
    [record] = load("s3-put.json")["Records"][:1]
    record["s3"]["bucket"]["name"] = bucket
    # As S3 encodes keys in notifications: URL-encoded, a space as '+'.
    record["s3"]["object"].update(key=urllib.parse.quote_plus(key, safe="/"), size=None,
                                  eTag=None)
    return dict(record)


def s3_notification(*objects: tuple[str, str]) -> dict[str, Any]:
    return {"Records": [s3_record(b, k) for b, k in objects]}


def eventbridge(bucket: str, key: str) -> dict[str, Any]:
    event = load("eventbridge-object-created.json")
    event["detail"]["bucket"]["name"] = bucket
    event["detail"]["object"].update(key=key)  # EventBridge: the key as it is
    del event["detail"]["object"]["size"], event["detail"]["object"]["etag"]
    return dict(event)


def sns(body: dict[str, Any]) -> dict[str, Any]:
    return {"Type": "Notification", "MessageId": "n-1", "TopicArn": "arn:aws:sns:x",
            "Message": json.dumps(body)}


def pipeline_body(bucket: str, key: str, source: Any = SOURCES[0]) -> dict[str, Any]:
    """What a pipeline's rule sends: the EventBridge event with ``s3slice`` added."""
    spec: dict[str, Any] = {"pipeline": "App/Stack/P", "query": QUERY,
                            "output": {"uri": f"s3://{OUTPUT}/piped/"}}
    if source is not None:
        spec["source"] = source
    return {**eventbridge(bucket, key), "s3slice": spec}


def sqs(*bodies: dict[str, Any]) -> dict[str, Any]:
    [template] = load("sqs-s3-notification.json")["Records"][:1]
    return {"Records": [dict(template, messageId=f"msg-{i}", body=json.dumps(body))
                        for i, body in enumerate(bodies)]}


#: Each trigger shape's event naming one object (its bucket and key).
SHAPES: dict[str, Callable[[str, str], dict[str, Any]]] = {
    "s3": lambda b, k: s3_notification((b, k)),
    "eventbridge": eventbridge,
    "sqs(s3)": lambda b, k: sqs(s3_notification((b, k))),
    "sqs(eventbridge)": lambda b, k: sqs(eventbridge(b, k)),
    "sqs(sns(s3))": lambda b, k: sqs(sns(s3_notification((b, k)))),
    "sqs(sns(eventbridge))": lambda b, k: sqs(sns(eventbridge(b, k))),
}


# ------------------------------------------------------------------------ what to check
def requested(s3: S3Env, bucket: str, key: str) -> list[Any]:
    """Every request the server saw for the object (its path is URL-decoded once)."""
    path = f"/{bucket}/{key}"
    return [r for r in s3.log.requests if r.path.encode("latin-1").decode() == path]


def writes(s3: S3Env) -> list[Any]:
    return [r for r in s3.log.requests if r.method in ("PUT", "POST")]


def expected(table: pl.DataFrame) -> pl.DataFrame:
    return table.filter(pl.col("col_1") <= 500_000).select(QUERY["columns"])


def output_of(s3: S3Env, key: str, prefix: str = "results/") -> pl.DataFrame:
    [out] = s3.keys(OUTPUT, f"{prefix}{key}.")
    return pl.read_parquet(s3.get(f"s3://{OUTPUT}/{out}"))


def assert_refused(s3: S3Env, bucket: str, key: str) -> None:
    assert requested(s3, bucket, key) == []
    assert not any(k.startswith((f"results/{key}.", f"piped/{key}."))
                   for k in s3.keys(OUTPUT))


# ------------------------------------------------------------------------ one object
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("obj", OUTSIDE, ids=lambda o: "/".join(o))
def test_an_object_outside_the_watched_sources_is_refused_with_nothing_read(
        world: S3Env, shape: str, obj: tuple[str, str]) -> None:
    bucket, key = obj
    event = SHAPES[shape](bucket, key)
    if shape.startswith("sqs"):
        # Reported for its message alone, as every permanent failure (redelivered until
        # maxReceiveCount, then the dead-letter queue and its alarm).
        assert invoke(event) == {"batchItemFailures": [{"itemIdentifier": "msg-0"}]}
    else:
        with pytest.raises(AccessDeniedError) as info:
            invoke(event)
        assert not info.value.retryable
        message = info.value.message
        assert message.startswith(f"s3://{bucket}/{key}: ")
        assert all(source in message for source in SOURCES)
    assert_refused(world, bucket, key)
    assert writes(world) == []


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("obj", INSIDE, ids=lambda o: "/".join(o))
def test_an_object_inside_a_watched_source_is_answered(
        world: S3Env, tables: dict[tuple[str, str], pl.DataFrame], shape: str,
        obj: tuple[str, str]) -> None:
    bucket, key = obj
    response = invoke(SHAPES[shape](bucket, key))
    assert response.get("batchItemFailures", []) == []
    assert output_of(world, key).equals(expected(tables[obj]))


# ------------------------------------------------------------------------ mixed batches
def test_an_sqs_batch_fails_only_the_messages_naming_unwatched_objects(
        world: S3Env, tables: dict[tuple[str, str], pl.DataFrame]) -> None:
    bodies = [s3_notification(INSIDE[0]), eventbridge(*OUTSIDE[0]), sns(eventbridge(*INSIDE[1])),
              sns(s3_notification(OUTSIDE[3])), eventbridge(*INSIDE[2]),
              s3_notification(OUTSIDE[1])]
    response = invoke(sqs(*bodies))
    assert response == {"batchItemFailures": [{"itemIdentifier": f"msg-{i}"}
                                              for i in (1, 3, 5)]}
    for obj in INSIDE:
        assert output_of(world, obj[1]).equals(expected(tables[obj]))
    for bucket, key in (OUTSIDE[0], OUTSIDE[3], OUTSIDE[1]):
        assert_refused(world, bucket, key)
    assert len(world.keys(OUTPUT)) == len(INSIDE)


def test_a_notification_of_several_records_refuses_only_the_unwatched_ones(
        world: S3Env, tables: dict[tuple[str, str], pl.DataFrame]) -> None:
    records = (INSIDE[0], OUTSIDE[0], INSIDE[2], OUTSIDE[3])
    with pytest.raises(AccessDeniedError, match=r"2 of 4 objects failed; the other 2") as info:
        invoke(s3_notification(*records))
    assert info.value.message.startswith(f"s3://{OUTSIDE[0][0]}/{OUTSIDE[0][1]}: ")
    for obj in (INSIDE[0], INSIDE[2]):
        assert output_of(world, obj[1]).equals(expected(tables[obj]))
    for bucket, key in (OUTSIDE[0], OUTSIDE[3]):
        assert_refused(world, bucket, key)
    # Through SQS the same body fails its one message; its watched object is still answered.
    world.log.clear()
    response = invoke(sqs(s3_notification(*records), s3_notification(INSIDE[1])))
    assert response == {"batchItemFailures": [{"itemIdentifier": "msg-0"}]}
    assert output_of(world, INSIDE[1][1]).equals(expected(tables[INSIDE[1]]))
    for bucket, key in (OUTSIDE[0], OUTSIDE[3]):
        assert_refused(world, bucket, key)


# ------------------------------------------------------------------------ pipelines
def test_a_pipeline_message_is_checked_against_its_own_source(
        world: S3Env, tables: dict[tuple[str, str], pl.DataFrame],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The function's configured sources do not apply to a pipeline naming its own: an
    # object under another configured source is refused, one under its own is answered.
    inside, other = INSIDE[0], INSIDE[2]
    response = invoke(sqs(pipeline_body(*inside), pipeline_body(*other),
                          pipeline_body(*OUTSIDE[0]), pipeline_body(*OUTSIDE[3])))
    assert response == {"batchItemFailures": [{"itemIdentifier": f"msg-{i}"}
                                              for i in (1, 2, 3)]}
    assert output_of(world, inside[1], "piped/").equals(expected(tables[inside]))
    for bucket, key in (other, OUTSIDE[0], OUTSIDE[3]):
        assert requested(world, bucket, key) == []
    assert world.keys(OUTPUT) == world.keys(OUTPUT, f"piped/{inside[1]}.")
    # With several sources in the message (and none configured), each is watched.
    monkeypatch.delenv("S3SLICE_SOURCE_URIS")
    _entry.reset()
    response = invoke(sqs(pipeline_body(*other, source=list(SOURCES)),
                          pipeline_body(*OUTSIDE[4], source=list(SOURCES))))
    assert response == {"batchItemFailures": [{"itemIdentifier": "msg-1"}]}
    assert output_of(world, other[1], "piped/").equals(expected(tables[other]))
    assert requested(world, *OUTSIDE[4]) == []


def test_a_pipeline_message_without_a_source_falls_back_to_the_configured_ones(
        world: S3Env, tables: dict[tuple[str, str], pl.DataFrame]) -> None:
    response = invoke(sqs(pipeline_body(*INSIDE[2], source=None),
                          pipeline_body(*OUTSIDE[0], source=None)))
    assert response == {"batchItemFailures": [{"itemIdentifier": "msg-1"}]}
    assert output_of(world, INSIDE[2][1], "piped/").equals(expected(tables[INSIDE[2]]))
    assert_refused(world, *OUTSIDE[0])


@pytest.mark.parametrize("source", ["landing/", [], 7, ["s3://ok/", "nope"], ["s3://ok/"],
                                    f"s3://{SOURCE}/landing/deep"])
def test_a_pipeline_source_malformed_or_not_holding_the_object_fails_its_message(
        world: S3Env, source: Any) -> None:
    # A source that is no s3:// URI (or list of them) is the message's fault, and a well
    # formed one must hold the object: either way the message fails and nothing is read,
    # although the object lies in the configured sources.
    response = invoke(sqs(pipeline_body(*INSIDE[0], source=source)))
    assert response == {"batchItemFailures": [{"itemIdentifier": "msg-0"}]}
    assert requested(world, *INSIDE[0]) == []
    assert writes(world) == []


# ------------------------------------------------------------------------ no sources
def test_without_configured_sources_triggered_objects_are_not_checked(
        world: S3Env, tables: dict[tuple[str, str], pl.DataFrame],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A function deployed without S3SLICE_SOURCE_URIS (the library's ReadFunction wired to
    # triggers of its own) keeps answering its triggers; IAM alone bounds what it reads.
    monkeypatch.delenv("S3SLICE_SOURCE_URIS")
    _entry.reset()
    response = invoke(sqs(s3_notification(OUTSIDE[0]), eventbridge(*OUTSIDE[3])))
    assert response == {"batchItemFailures": []}
    for obj in (OUTSIDE[0], OUTSIDE[3]):
        assert output_of(world, obj[1]).equals(expected(tables[obj]))


def test_a_direct_invoke_reads_outside_the_watched_sources_as_before(
        world: S3Env, tables: dict[tuple[str, str], pl.DataFrame]) -> None:
    # Direct invokes name their sources themselves (IAM bounds them): unchanged.
    bucket, key = OUTSIDE[0]
    response = invoke({"source": f"s3://{bucket}/{key}", **QUERY})
    assert response["status"] == "ok"
    [out] = response["outputs"]
    assert pl.read_parquet(world.get(out["uri"])).equals(expected(tables[OUTSIDE[0]]))
