"""Event shapes and configuration, with no network."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes import SQSEvent

from s3slice import ConfigurationError, RequestError, error_types
from s3slice._model import ObjectRef, parse_request
from s3slice.entry.config import Config
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


# ------------------------------------------------------------------ configuration

def test_configuration_is_read_and_checked() -> None:
    cfg = Config.from_env({"S3SLICE_QUERY": '{"columns": ["a"], "filter": "a > 1"}',
                           "S3SLICE_OUTPUT_URI": "s3://out/results/",
                           "S3SLICE_OUTPUT_FORMAT": "csv",
                           "S3SLICE_SOURCE_URIS": "s3://in/incoming/, s3://in2/"})
    assert cfg.query is not None
    assert cfg.query.columns == ("a",)
    assert cfg.output is not None
    assert cfg.output.format == "csv"
    assert cfg.sources == (("in", "incoming/"), ("in2", ""))
    assert cfg.is_output(ObjectRef(bucket="out", key="results/x.csv"))
    assert not cfg.is_output(ObjectRef(bucket="out", key="other/x.csv"))


def test_plain_sql_is_accepted_as_the_configured_query() -> None:
    cfg = Config.from_env({"S3SLICE_QUERY": "SELECT a FROM s3object WHERE a > 1"})
    assert cfg.query is not None
    assert cfg.query.sql == "SELECT a FROM s3object WHERE a > 1"


@pytest.mark.parametrize(("env", "variable"), [
    ({"S3SLICE_QUERY": '{"sql": "SELECT * FROM read_csv(\'/etc/passwd\')"}'}, "S3SLICE_QUERY"),
    ({"S3SLICE_QUERY": "[1, 2]"}, "S3SLICE_QUERY"),
    ({"S3SLICE_QUERY": '{"filter": "a >"}'}, "S3SLICE_QUERY"),
    ({"S3SLICE_OUTPUT_URI": "results/"}, "S3SLICE_OUTPUT_URI"),
    ({"S3SLICE_OUTPUT_URI": "s3://o/r/", "S3SLICE_OUTPUT_FORMAT": "xml"}, "S3SLICE_OUTPUT_URI"),
    ({"S3SLICE_SOURCE_URIS": "s3://ok/, nope"}, "S3SLICE_SOURCE_URIS"),
])
def test_bad_configuration_names_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigurationError, match=variable):
        Config.from_env(env)


@pytest.mark.parametrize(("output", "sources"), [
    ("s3://data/incoming/results/", "s3://data/incoming/"),   # output inside a source
    ("s3://data/", "s3://data/incoming/"),                    # a source inside the output
    ("s3://data/incoming/", "s3://other/, s3://data/incoming/"),
])
def test_output_that_would_trigger_the_function_again_is_refused(output: str,
                                                                  sources: str) -> None:
    with pytest.raises(ConfigurationError, match="trigger the function again"):
        Config.from_env({"S3SLICE_OUTPUT_URI": output, "S3SLICE_SOURCE_URIS": sources})


def test_disjoint_output_and_sources_are_accepted() -> None:
    config = Config.from_env({"S3SLICE_OUTPUT_URI": "s3://data/results/",
                              "S3SLICE_SOURCE_URIS": "s3://data/incoming/"})
    assert config.sources == (("data", "incoming/"),)
    assert config.output is not None and config.output.uri == "s3://data/results/"
    assert config.is_output(ObjectRef(bucket="data", key="results/x.parquet"))
    assert not config.is_output(ObjectRef(bucket="data", key="incoming/x.parquet"))


def test_a_step_functions_input_missing_its_query_names_the_field() -> None:
    with pytest.raises(RequestError, match="BatchInput.query or configure") as info:
        Config().require(what="a Step Functions input", given_in="BatchInput")
    assert info.value.field == "BatchInput.query"


def test_triggered_runs_need_query_and_output() -> None:
    with pytest.raises(ConfigurationError, match="S3SLICE_QUERY"):
        Config().require(what="an s3 event")


@pytest.mark.parametrize(("request_", "field"), [
    ({"source": "s3://b/data/", "output": "s3://b/data/out/"}, "output.uri"),
    ({"source": "s3://b/", "output": "s3://b/out/"}, "output.uri"),
    ({"source": ["s3://c/x", "s3://b/out/x.parquet"], "output": "s3://b/out/"}, "source[1]"),
])
def test_direct_requests_may_not_read_their_own_output(request_: dict[str, Any],
                                                       field: str) -> None:
    with pytest.raises(RequestError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_request(request_)


def test_error_types_split_retryable_from_permanent() -> None:
    permanent, retryable = error_types(retryable=False), error_types(retryable=True)
    assert "UnknownColumnError" in permanent
    assert "ConfigurationError" in permanent
    assert set(retryable) == {"S3SliceTransientError", "S3SliceThrottledError"}
    assert not set(permanent) & set(retryable)
