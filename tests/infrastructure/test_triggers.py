"""The Triggers construct in a bare stack: notifications → queue (+ DLQ) → event source."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import Duration, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template

from s3slice_cdk.triggers import Triggers, TriggersProps
from tests.infrastructure.support import bare_stack

pytestmark = pytest.mark.infrastructure


def build(**overrides: Any) -> tuple[Triggers, Template]:
    stack = bare_stack()
    bucket = s3.Bucket(stack, "Bucket")
    function = lambda_.Function(stack, "Fn", runtime=lambda_.Runtime.PYTHON_3_13,
                                handler="index.handler",
                                code=lambda_.Code.from_inline("def handler(e, c): pass"))
    props: dict[str, Any] = {
        "bucket": bucket, "prefix": "incoming/", "suffixes": [".parquet", ".csv"],
        "visibility_timeout": Duration.seconds(1800),
    }
    triggers = Triggers(stack, "Triggers", props=TriggersProps(**{**props, **overrides}))
    function.add_event_source(triggers.event_source)
    return triggers, Template.from_stack(stack)


@pytest.fixture(scope="module")
def default() -> tuple[Triggers, Template]:
    return build()


def test_queue_is_encrypted_with_a_dead_letter_queue(
        default: tuple[Triggers, Template]) -> None:
    triggers, template = default
    template.resource_count_is("AWS::SQS::Queue", 2)
    dlq_id = Stack.of(triggers).get_logical_id(triggers.dead_letter_queue.node.default_child)
    template.has_resource_properties("AWS::SQS::Queue", {
        "VisibilityTimeout": 1800,
        "SqsManagedSseEnabled": True,
        "RedrivePolicy": {"deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
                          "maxReceiveCount": 3},
    })
    template.has_resource_properties("AWS::SQS::Queue", {
        "SqsManagedSseEnabled": True,
        "MessageRetentionPeriod": 14 * 24 * 3600,
        "RedrivePolicy": Match.absent(),
    })


def test_both_queues_refuse_plain_http(default: tuple[Triggers, Template]) -> None:
    _, template = default
    policies = template.find_resources("AWS::SQS::QueuePolicy")
    assert len(policies) == 2
    for policy in policies.values():
        deny = policy["Properties"]["PolicyDocument"]["Statement"][0]
        assert deny["Effect"] == "Deny"
        assert deny["Action"] == "sqs:*"
        assert deny["Principal"] == {"AWS": "*"}
        assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_only_the_bucket_may_send(default: tuple[Triggers, Template]) -> None:
    triggers, template = default
    queue_id = Stack.of(triggers).get_logical_id(triggers.queue.node.default_child)
    template.has_resource_properties("AWS::SQS::QueuePolicy", {
        "Queues": [{"Ref": queue_id}],
        "PolicyDocument": {"Statement": Match.array_with([{
            "Action": ["sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:SendMessage"],
            "Effect": "Allow",
            "Principal": {"Service": "s3.amazonaws.com"},
            "Condition": {"ArnLike": {"aws:SourceArn": {
                "Fn::GetAtt": [Match.string_like_regexp("^Bucket"), "Arn"]}},
                "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}},
            "Resource": {"Fn::GetAtt": [queue_id, "Arn"]},
        }])},
    })


def test_one_notification_rule_per_suffix(default: tuple[Triggers, Template]) -> None:
    _, template = default
    (notifications,) = template.find_resources("Custom::S3BucketNotifications").values()
    rules = [
        (c["Events"], c["Filter"]["Key"]["FilterRules"])
        for c in notifications["Properties"]["NotificationConfiguration"]["QueueConfigurations"]
    ]
    assert rules == [
        (["s3:ObjectCreated:*"], [{"Name": "suffix", "Value": ".parquet"},
                                  {"Name": "prefix", "Value": "incoming/"}]),
        (["s3:ObjectCreated:*"], [{"Name": "suffix", "Value": ".csv"},
                                  {"Name": "prefix", "Value": "incoming/"}]),
    ]


def test_event_source_reports_batch_item_failures(default: tuple[Triggers, Template]) -> None:
    triggers, template = default
    queue_id = Stack.of(triggers).get_logical_id(triggers.queue.node.default_child)
    template.has_resource_properties("AWS::Lambda::EventSourceMapping", {
        "EventSourceArn": {"Fn::GetAtt": [queue_id, "Arn"]},
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
        "BatchSize": 10,
        # bounded by default: an upload burst queues up instead of taking the account
        "ScalingConfig": {"MaximumConcurrency": 10},
    })


def test_source_accounts_reach_the_queue_policy() -> None:
    triggers, template = build(source_accounts=["123456789012", "210987654321"])
    queue_id = Stack.of(triggers).get_logical_id(triggers.queue.node.default_child)
    template.has_resource_properties("AWS::SQS::QueuePolicy", {
        "Queues": [{"Ref": queue_id}],
        "PolicyDocument": {"Statement": Match.array_with([Match.object_like({
            "Principal": {"Service": "s3.amazonaws.com"},
            "Condition": Match.object_like({"StringEquals": {
                "aws:SourceAccount": ["123456789012", "210987654321"]}}),
        })])},
    })


def test_settings_reach_the_template() -> None:
    _, template = build(prefix="", suffixes=[], max_receive_count=7, batch_size=50,
                        max_batching_window=Duration.seconds(20), max_concurrency=5,
                        visibility_timeout=Duration.seconds(5420))
    (notifications,) = template.find_resources("Custom::S3BucketNotifications").values()
    (config,) = notifications["Properties"]["NotificationConfiguration"]["QueueConfigurations"]
    assert "Filter" not in config  # the whole bucket, any suffix
    template.has_resource_properties("AWS::SQS::Queue", {
        "VisibilityTimeout": 5420,
        "RedrivePolicy": Match.object_like({"maxReceiveCount": 7})})
    template.has_resource_properties("AWS::Lambda::EventSourceMapping", {
        "BatchSize": 50, "MaximumBatchingWindowInSeconds": 20,
        "ScalingConfig": {"MaximumConcurrency": 5},
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
    })
