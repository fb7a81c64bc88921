"""The Alarms construct in a bare stack."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import Duration, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Match, Template

from s3slice_cdk.alarms import Alarms, AlarmsProps, AlarmTopic
from tests.infrastructure.support import bare_stack

pytestmark = pytest.mark.infrastructure

TOPIC_ARN = "arn:aws:sns:eu-west-1:123456789012:ops-alerts"


def build(*, topic: bool = False, **overrides: Any) -> tuple[Alarms, Template]:
    stack = bare_stack()
    function = lambda_.Function(stack, "Fn", runtime=lambda_.Runtime.PYTHON_3_13,
                                handler="index.handler",
                                code=lambda_.Code.from_inline("def handler(e, c): pass"))
    machine = sfn.StateMachine(stack, "Machine", definition_body=sfn.DefinitionBody.from_chainable(
        sfn.Pass(stack, "Nothing")))
    props: dict[str, Any] = {
        "function": function, "timeout": Duration.seconds(300),
        "dead_letter_queue": sqs.Queue(stack, "Dlq"), "state_machine": machine,
    }
    if topic:
        props["topic"] = sns.Topic.from_topic_arn(stack, "Topic", TOPIC_ARN)
    alarms = Alarms(stack, "Alarms", props=AlarmsProps(**{**props, **overrides}))
    return alarms, Template.from_stack(stack)


@pytest.fixture(scope="module")
def default() -> tuple[Alarms, Template]:
    return build()


def alarm(template: Template, alarms: Alarms, name: str) -> dict[str, Any]:
    logical_id = Stack.of(alarms).get_logical_id(getattr(alarms, name).node.default_child)
    properties = template.to_json()["Resources"][logical_id]["Properties"]
    assert isinstance(properties, dict)
    return properties


def test_one_alarm_each(default: tuple[Alarms, Template]) -> None:
    alarms, template = default
    template.resource_count_is("AWS::CloudWatch::Alarm", 5)
    assert len(alarms.all) == 5


def test_errors_and_throttles(default: tuple[Alarms, Template]) -> None:
    alarms, template = default
    for name, metric in (("errors", "Errors"), ("throttles", "Throttles")):
        properties = alarm(template, alarms, name)
        assert (properties["Namespace"], properties["MetricName"]) == ("AWS/Lambda", metric)
        assert properties["Statistic"] == "Sum"
        assert properties["Threshold"] == 1
        assert properties["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
        assert properties["TreatMissingData"] == "notBreaching"


def test_duration_near_the_timeout(default: tuple[Alarms, Template]) -> None:
    alarms, template = default
    properties = alarm(template, alarms, "duration")
    assert (properties["Namespace"], properties["MetricName"]) == ("AWS/Lambda", "Duration")
    assert properties["ExtendedStatistic"] == "p99"
    assert properties["Threshold"] == 0.8 * 300_000
    assert properties["ComparisonOperator"] == "GreaterThanThreshold"


def test_dead_letter_queue_depth(default: tuple[Alarms, Template]) -> None:
    alarms, template = default
    properties = alarm(template, alarms, "dead_letters")
    assert (properties["Namespace"], properties["MetricName"]) == (
        "AWS/SQS", "ApproximateNumberOfMessagesVisible")
    assert properties["Statistic"] == "Maximum"
    assert properties["Threshold"] == 0
    assert properties["ComparisonOperator"] == "GreaterThanThreshold"


def test_workflow_failures(default: tuple[Alarms, Template]) -> None:
    alarms, template = default
    properties = alarm(template, alarms, "workflow_failures")
    metric_names = {m["MetricStat"]["Metric"]["MetricName"]
                    for m in properties["Metrics"] if "MetricStat" in m}
    assert metric_names == {"ExecutionsFailed", "ExecutionsTimedOut", "ExecutionsAborted"}


def test_no_actions_without_a_topic(default: tuple[Alarms, Template]) -> None:
    _, template = default
    template.all_resources_properties("AWS::CloudWatch::Alarm", {
        "AlarmActions": Match.absent(), "OKActions": Match.absent()})


def test_an_imported_topic_gets_no_policy() -> None:
    _, template = build(topic=True)
    template.resource_count_is("AWS::SNS::TopicPolicy", 0)


def test_own_topic_lets_cloudwatch_publish_for_these_alarms_only() -> None:
    stack = bare_stack()
    function = lambda_.Function(stack, "Fn", runtime=lambda_.Runtime.PYTHON_3_13,
                                handler="index.handler",
                                code=lambda_.Code.from_inline("def handler(e, c): pass"))
    topic = AlarmTopic(stack, "Alerts", email="ops@acme.example")
    alarms = Alarms(stack, "Alarms", props=AlarmsProps(
        function=function, timeout=Duration.seconds(60),
        dead_letter_queue=sqs.Queue(stack, "Dlq"), topic=topic.topic))
    template = Template.from_stack(stack)
    topic_id = stack.get_logical_id(topic.topic.node.default_child)
    alarm_arns = [{"Fn::GetAtt": [stack.get_logical_id(a.node.default_child), "Arn"]}
                  for a in alarms.all]
    template.has_resource_properties("AWS::SNS::TopicPolicy", {
        "Topics": [{"Ref": topic_id}],
        "PolicyDocument": {"Statement": [
            Match.object_like({"Effect": "Deny", "Action": "sns:Publish",
                               "Condition": {"Bool": {"aws:SecureTransport": "false"}}}),
            Match.object_like({
                "Effect": "Allow", "Action": "sns:Publish",
                "Principal": {"Service": "cloudwatch.amazonaws.com"},
                "Resource": {"Ref": topic_id},
                "Condition": {"ArnLike": {"aws:SourceArn": alarm_arns},
                              "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}},
            }),
        ]},
    })
    template.has_resource_properties("AWS::SNS::Subscription", {
        "Protocol": "email", "Endpoint": "ops@acme.example", "TopicArn": {"Ref": topic_id}})
    assert topic.subscribed
    assert not AlarmTopic(bare_stack(), "Alerts").subscribed


def test_topic_receives_alarm_and_ok() -> None:
    alarms, template = build(topic=True, duration_ratio=0.5, timeout=Duration.seconds(60),
                             state_machine=None)
    assert alarms.workflow_failures is None
    template.resource_count_is("AWS::CloudWatch::Alarm", 4)
    template.all_resources_properties("AWS::CloudWatch::Alarm", {
        "AlarmActions": [TOPIC_ARN], "OKActions": [TOPIC_ARN]})
    assert alarm(template, alarms, "duration")["Threshold"] == 30_000
