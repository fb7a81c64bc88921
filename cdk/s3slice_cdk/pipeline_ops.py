"""What operating a library pipeline needs beside its parts: the function's own alarms,
a synth warning when no alarm reaches anyone, and outputs naming each part.

- Every :class:`~s3slice_cdk.function.ReadFunction` a pipeline uses gets an ``Errors`` and
  a ``Throttles`` alarm (once per function, however many pipelines share it), notifying
  every pipeline's ``alarm_topic``.
- A pipeline without ``alarm_topic`` is flagged at synth (``s3slice:alarms-unrouted``):
  its alarms change state in CloudWatch and notify nobody.
- Each pipeline has ``CfnOutput``s for its function, queue and dead-letter queue, and for
  its workflow's state machine once added (``FunctionName``, ``QueueUrl``,
  ``DeadLetterQueueUrl``, ``StateMachineArn``, each described with the pipeline's path).
"""

from __future__ import annotations

from aws_cdk import Annotations, Aws, CfnOutput, Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from constructs import Construct

from .function import ReadFunction

#: The id of the warning a pipeline without ``alarm_topic`` gets at synth.
UNROUTED_WARNING = "s3slice:alarms-unrouted"
_PERIOD = Duration.minutes(5)


def notify(alarms: list[cloudwatch.Alarm], topic: sns.ITopic) -> None:
    """``alarms`` notify ``topic`` on ALARM and OK; a topic of this app lets CloudWatch
    publish for these alarms only."""
    action = cw_actions.SnsAction(topic)
    for alarm in alarms:
        alarm.add_alarm_action(action)
        alarm.add_ok_action(action)
    topic.add_to_resource_policy(iam.PolicyStatement(
        principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
        actions=["sns:Publish"], resources=[topic.topic_arn],
        conditions={"ArnLike": {"aws:SourceArn": [a.alarm_arn for a in alarms]},
                    "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}}))


class FunctionAlarms(Construct):
    """A read function's ``Errors`` and ``Throttles`` alarms (any in 5 minutes), made by
    its first pipeline. Attributes: ``errors``, ``throttles``, ``all``, ``topics``."""

    def __init__(self, function: ReadFunction) -> None:
        super().__init__(function, "Alarms")
        fn = function.invoked
        path = function.node.path
        self.errors = self._any("Errors", f"s3slice function {path}: invocations failed "
                                "(its log's 'message failed' lines say why)",
                                fn.metric_errors(period=_PERIOD, statistic=cloudwatch.Stats.SUM))
        self.throttles = self._any(
            "Throttles", f"s3slice function {path}: invocations were throttled (concurrency "
            "limits)", fn.metric_throttles(period=_PERIOD, statistic=cloudwatch.Stats.SUM))
        self.all = [self.errors, self.throttles]
        self.topics: list[sns.ITopic] = []

    def _any(self, name: str, description: str, metric: cloudwatch.IMetric
             ) -> cloudwatch.Alarm:
        """An alarm on any datapoint of ``metric`` at 1 or more in a period."""
        return cloudwatch.Alarm(
            self, name, alarm_description=description, metric=metric, threshold=1,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING)

    @classmethod
    def of(cls, function: ReadFunction, topic: sns.ITopic | None) -> FunctionAlarms:
        """The function's alarms (made on first use), notifying ``topic`` too."""
        found = function.node.try_find_child("Alarms")
        alarms = found if isinstance(found, FunctionAlarms) else cls(function)
        if topic is not None and all(t is not topic for t in alarms.topics):
            alarms.topics.append(topic)
            notify(alarms.all, topic)
        return alarms


def warn_unrouted(scope: Construct, alarms: str) -> None:
    """Flag at synth that ``scope``'s alarms notify nobody."""
    Annotations.of(scope).add_warning_v2(UNROUTED_WARNING, (
        f"{scope.node.path}: alarm_topic is not set, so its alarms ({alarms}) notify "
        "nobody: they change state in CloudWatch only. Give the pipeline's props "
        "alarm_topic=<an SNS topic> (e.g. sns.Topic.from_topic_arn(...)) to be told."))


def output(scope: Construct, name: str, value: str, what: str) -> CfnOutput:
    return CfnOutput(scope, name, value=value,
                     description=f"s3slice {scope.node.path}: {what}")
