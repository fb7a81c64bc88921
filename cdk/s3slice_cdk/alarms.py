"""CloudWatch alarms: function errors, throttles, near-timeout duration, DLQ depth, workflow."""

from __future__ import annotations

import dataclasses

from aws_cdk import Aws, Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct


@dataclasses.dataclass(frozen=True, kw_only=True)
class AlarmsProps:
    """What the alarms watch and whom they notify, every prop keyword-only."""

    #: The function whose errors, throttles and duration are watched.
    function: lambda_.IFunction
    #: The function's timeout: the duration alarm fires at ``duration_ratio`` of it.
    timeout: Duration
    #: The dead-letter queue whose depth is watched.
    dead_letter_queue: sqs.IQueue
    #: The workflow's state machine (failed, timed-out, aborted executions); none: no alarm.
    state_machine: sfn.IStateMachine | None = None
    #: The share of the timeout the p99 duration may reach.
    duration_ratio: float = 0.8
    #: Where alarm and OK notifications go; none when not given.
    topic: sns.ITopic | None = None
    #: Every alarm's evaluation period.
    period: Duration = dataclasses.field(default_factory=lambda: Duration.minutes(5))


class AlarmTopic(Construct):
    """The SNS topic the alarms notify when no ``alarmTopicArn`` is given.

    It refuses publishers that do not use TLS; ``email``, when given, is subscribed (AWS
    sends a confirmation e-mail first). Attributes: ``topic``, ``subscribed``.
    """

    def __init__(self, scope: Construct, construct_id: str, *,
                 email: str | None = None) -> None:
        super().__init__(scope, construct_id)
        self.topic = sns.Topic(self, "Topic", display_name="s3slice alarms", enforce_ssl=True)
        self.subscribed = email is not None
        if email is not None:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))


class Alarms(Construct):
    """One alarm per way the service can go wrong unnoticed.

    With a ``topic``, every alarm notifies it on ALARM and OK; a topic the stack owns gets
    a policy statement letting CloudWatch publish for these alarms only (``aws:SourceArn``
    and ``aws:SourceAccount``). An imported topic's policy is its owner's to keep.

    Attributes: ``errors``, ``throttles``, ``duration``, ``dead_letters``,
    ``workflow_failures`` (``None`` without a state machine), and ``all``.
    """

    def __init__(self, scope: Construct, construct_id: str, *, props: AlarmsProps) -> None:
        super().__init__(scope, construct_id)
        fn = props.function
        period = props.period
        self.errors = cloudwatch.Alarm(
            self, "Errors",
            alarm_description="s3slice: the function raised errors (see its log group)",
            metric=fn.metric_errors(period=period, statistic=cloudwatch.Stats.SUM),
            threshold=1,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        self.throttles = cloudwatch.Alarm(
            self, "Throttles",
            alarm_description="s3slice: invocations were throttled (concurrency limits)",
            metric=fn.metric_throttles(period=period, statistic=cloudwatch.Stats.SUM),
            threshold=1,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        limit_ms = props.timeout.to_milliseconds() * props.duration_ratio
        self.duration = cloudwatch.Alarm(
            self, "Duration",
            alarm_description=(f"s3slice: p99 duration above {props.duration_ratio:.0%} of the "
                               "timeout; raise the timeout or memory before requests fail"),
            metric=fn.metric_duration(period=period, statistic=cloudwatch.Stats.p(99)),
            threshold=limit_ms,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        self.dead_letters = cloudwatch.Alarm(
            self, "DeadLetters",
            alarm_description="s3slice: notifications in the dead-letter queue were never "
                              "processed; inspect and redrive them",
            metric=props.dead_letter_queue.metric_approximate_number_of_messages_visible(
                period=period, statistic=cloudwatch.Stats.MAXIMUM),
            threshold=0,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        self.workflow_failures: cloudwatch.Alarm | None = None
        if props.state_machine is not None:
            self.workflow_failures = cloudwatch.Alarm(
                self, "WorkflowFailures",
                alarm_description="s3slice: workflow executions failed, timed out or aborted",
                metric=cloudwatch.MathExpression(
                    expression="failed + timedout + aborted",
                    using_metrics={
                        "failed": props.state_machine.metric_failed(period=period),
                        "timedout": props.state_machine.metric_timed_out(period=period),
                        "aborted": props.state_machine.metric_aborted(period=period),
                    },
                    period=period,
                    label="unsuccessful executions",
                ),
                threshold=1,
                evaluation_periods=1,
                comparison_operator=(
                    cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD),
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
        self.all: list[cloudwatch.Alarm] = [
            alarm for alarm in (self.errors, self.throttles, self.duration, self.dead_letters,
                                self.workflow_failures) if alarm is not None]
        if props.topic is not None:
            action = cw_actions.SnsAction(props.topic)
            for alarm in self.all:
                alarm.add_alarm_action(action)
                alarm.add_ok_action(action)
            # A no-op for an imported topic (its policy is not this stack's).
            props.topic.add_to_resource_policy(iam.PolicyStatement(
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[props.topic.topic_arn],
                conditions={
                    "ArnLike": {"aws:SourceArn": [alarm.alarm_arn for alarm in self.all]},
                    "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                },
            ))
