"""Event shapes: what each trigger's event gives, with no network."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes import SQSEvent

from s3slice import RequestError
from s3slice.core.model import ObjectRef
from s3slice.entry.events import (
    Skipped,
    classify,
    eventbridge_object,
    item_object,
    parse_batch_input,
    s3_notification_objects,
    sqs_body_objects,
)
from tests.support import EVENTS


def load(name: str) -> Any:
    return json.loads((EVENTS / name).read_text())


@pytest.mark.parametrize(("name", "kind"), [
    ("s3-put.json", "s3"),
    ("eventbridge-object-created.json", "eventbridge"),
    ("sqs-s3-notification.json", "sqs"),
    ("sfn-map-batch.json", "sfn-batch"),
    ("sfn-item.json", "sfn-item"),
    ("s3-select.json", "s3-select"),
    ("direct-invoke.json", "direct"),
    ("direct-invoke-sql.json", "direct"),
])
def test_every_sample_event_is_classified(name: str, kind: str) -> None:
    assert classify(load(name)) == kind


def test_s3_notification_keys_are_url_decoded_and_carry_size_and_etag() -> None:
    [obj] = s3_notification_objects(load("s3-put.json"))
    assert obj == ObjectRef(bucket="example-data", key="incoming/year=2024/orders 01.parquet",
                            size=1048576, etag='"d41d8cd98f00b204e9800998ecf8427e"')


def test_eventbridge_key_is_taken_as_is() -> None:
    obj = eventbridge_object(load("eventbridge-object-created.json"))
    assert isinstance(obj, ObjectRef)
    assert obj.key == "incoming/year=2024/orders 01.parquet"
    assert obj.size == 1048576


def test_non_creation_events_are_skipped() -> None:
    event = load("s3-put.json")
    event["Records"][0]["eventName"] = "ObjectRemoved:Delete"
    [skipped] = s3_notification_objects(event)
    assert isinstance(skipped, Skipped)
    assert "ObjectRemoved:Delete" in skipped.reason
    bridge = load("eventbridge-object-created.json")
    bridge["detail-type"] = "Object Deleted"
    assert isinstance(eventbridge_object(bridge), Skipped)


def test_sqs_bodies_hold_notifications_test_events_and_sns_wrapping() -> None:
    event = load("sqs-s3-notification.json")
    first, test_event = SQSEvent(event).records
    [obj] = sqs_body_objects(first)
    assert isinstance(obj, ObjectRef)
    assert obj.key == "incoming/year=2024/orders 01.parquet"
    assert sqs_body_objects(test_event) == []
    wrapped = dict(event["Records"][0])
    wrapped["body"] = json.dumps({"Type": "Notification", "Message": first.body})
    [via_sns] = sqs_body_objects(next(iter(SQSEvent({"Records": [wrapped]}).records)))
    assert via_sns == obj


@pytest.mark.parametrize(("body", "needle"), [
    ("not json", "not JSON"),
    ('{"hello": 1}', "expected an S3 notification"),
])
def test_bad_sqs_bodies_name_the_message(body: str, needle: str) -> None:
    record = dict(load("sqs-s3-notification.json")["Records"][0], body=body)
    with pytest.raises(RequestError, match=needle) as info:
        sqs_body_objects(next(iter(SQSEvent({"Records": [record]}).records)))
    assert record["messageId"] in str(info.value)


def test_listing_items_keep_size_and_quoted_etag() -> None:
    batch = load("sfn-map-batch.json")
    obj = item_object(batch["Items"][0], bucket="example-data", field="Items[0]")
    assert obj.size == 1048576
    assert obj.etag == '"d41d8cd98f00b204e9800998ecf8427e"'


@pytest.mark.parametrize(("raw", "field"), [
    ({"bucket": 3}, "BatchInput.bucket"),
    ({"query": {"sql": "SELECT * FROM other"}}, "BatchInput.query"),
    ({"query": {"nope": 1}}, "BatchInput.query"),
    ({"output": {"uri": "http://x"}}, "BatchInput.output.uri"),
    ({"extra": 1}, "BatchInput"),
])
def test_batch_input_errors_name_their_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(RequestError, match=field.replace(".", r"\.")):
        parse_batch_input(raw)


def test_items_without_a_bucket_are_refused() -> None:
    with pytest.raises(RequestError, match="Items\\[0\\]"):
        item_object({"Key": "k"}, bucket=None, field="Items[0]")


def test_unknown_event_records_are_refused() -> None:
    with pytest.raises(RequestError, match="aws:dynamodb"):
        classify({"Records": [{"eventSource": "aws:dynamodb"}]})
