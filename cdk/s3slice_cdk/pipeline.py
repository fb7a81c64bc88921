"""A pipeline: new objects under a source prefix → its query → its output prefix.

``Object Created`` events of the source bucket reach an EventBridge rule of the pipeline's
own, whose input transformer adds the pipeline's query and output to each event
(``{"source", "detail-type", "id", "time", "detail", "s3slice": {"pipeline", "query",
"output", "source"}}``) and sends it to the pipeline's SQS queue (with a dead-letter queue and an
alarm on it); the function consumes the queue and runs each message's own query
(``functions/s3slice/entry/events.py``: ``sqs_body_pipeline``), refusing an object outside
the pipeline's ``source`` (its watched bucket and prefix). So every pipeline carries
its query in its own rule, never in the function's environment: several pipelines share
one function, or each has its own, and adding one never changes another.

The function is granted ``s3:GetObject`` and a prefix-conditioned ``s3:ListBucket`` on the
source prefix and the writes on the output prefix, nothing more; the stack's
:class:`~s3slice_cdk.guard.PipelineGuard` refuses a pipeline whose output overlaps what any
pipeline of the stack watches or reads, or another pipeline's output.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from aws_cdk import Aspects, Aws, Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_s3 as s3
from constructs import Construct

from . import grants
from .function import ReadFunction
from .grants import KMS_READ_ACTIONS, KMS_WRITE_ACTIONS, BucketPrefix
from .guard import PipelineGuard, location
from .library_nag import PipelineFunctionAcknowledgments
from .pipeline_ops import FunctionAlarms, notify, output, warn_unrouted
from .pipeline_props import PipelineProps
from .pipeline_workflow import PipelineWorkflowProps, add_workflow
from .query_check import check_query
from .settings import KEY_CHARACTERS, OUTPUT_FORMATS, QUERY_FIELDS, SettingsError
from .triggers import object_queues
from .uploads import abort_incomplete_uploads
from .workflow import Workflow

#: The field of a message that carries its pipeline (``s3slice.entry.events.PIPELINE_FIELD``).
PIPELINE_FIELD = "s3slice"
__all__ = ["MAX_INPUT_TEMPLATE", "PIPELINE_FIELD", "Pipeline", "PipelineProps",
           "PipelineWorkflowProps", "object_created_pattern"]

#: EventBridge's limit on an input template's length.
MAX_INPUT_TEMPLATE = 8192
#: What EventBridge would read as a placeholder inside the input template.
_PLACEHOLDER = re.compile(r"<[A-Za-z0-9_.$\[\]-]+>")


class Pipeline(Construct):
    """Source bucket + prefix (via an EventBridge rule) → query → output bucket + prefix.

    Makes the rule (its input transformer carries the query and output), the queue and
    dead-letter queue (SSE-SQS, TLS only; only the rule may send), the function's SQS
    event source (``ReportBatchItemFailures``), the grants and the ``DeadLetters`` alarm.

    Attributes: ``props``, ``rule``, ``queue``, ``dead_letter_queue``, ``event_source``,
    ``dead_letters`` (the alarm), ``watched`` and ``output`` (``BucketPrefix``),
    ``message`` (the input transformer's object, with its tokens), ``accounts``,
    ``acknowledgments``, ``function_alarms`` (the function's ``Errors`` and ``Throttles``,
    shared by its pipelines), and after :meth:`add_workflow` ``workflow`` and
    ``workflow_failures``. Outputs: ``FunctionName``, ``QueueUrl``, ``DeadLetterQueueUrl``,
    and ``StateMachineArn`` after :meth:`add_workflow`. Without ``alarm_topic`` the
    alarms notify nobody, and synth warns (``s3slice:alarms-unrouted``).
    """

    def __init__(self, scope: Construct, construct_id: str, *, props: PipelineProps) -> None:
        super().__init__(scope, construct_id)
        _check(props, self.node.path)
        self.props = props
        self.watched = BucketPrefix(bucket=props.source_bucket, prefix=props.source_prefix)
        self.output = BucketPrefix(bucket=props.output_bucket, prefix=props.output_prefix)
        owner = self.node.path
        PipelineGuard.of(self).register([
            location(props.source_bucket, props.source_prefix, "watched", owner),
            location(props.output_bucket, props.output_prefix, "output", owner),
        ])
        # A timed-out function's multipart upload: aborted by a rule, or flagged at synth.
        abort_incomplete_uploads(self, props.output_bucket, props.output_prefix)

        function = props.function
        self.queue, self.dead_letter_queue = object_queues(
            self,
            # At least 6 x the function's timeout (AWS's advice for SQS event sources).
            visibility_timeout=Duration.seconds(6 * function.timeout.to_seconds()),
            max_receive_count=props.max_receive_count)
        if props.enable_event_bridge:
            props.source_bucket.enable_event_bridge_notification()
        self.message: dict[str, Any] = {
            "source": "aws.s3",
            "detail-type": events.EventField.detail_type,
            "id": events.EventField.event_id,
            "time": events.EventField.time,
            "detail": events.EventField.from_path("$.detail"),
            PIPELINE_FIELD: {
                "pipeline": owner,
                "query": dict(props.query),
                "output": {"uri": self.output.uri, "format": props.output_format},
                # The function refuses an object outside it (defence in depth beside IAM).
                "source": self.watched.uri,
            },
        }
        self.rule = events.Rule(
            self, "Rule",
            description=f"s3slice pipeline {owner}: new objects under {self.watched.uri}",
            event_bus=props.event_bus,
            event_pattern=props.event_pattern or object_created_pattern(
                props.source_bucket, props.source_prefix, props.source_suffixes),
        )
        self.rule.add_target(targets.SqsQueue(
            self.queue, message=events.RuleTargetInput.from_object(self.message),
            dead_letter_queue=self.dead_letter_queue))
        self.event_source = event_sources.SqsEventSource(
            self.queue,
            batch_size=props.batch_size,
            max_batching_window=props.max_batching_window,
            report_batch_item_failures=True,
            max_concurrency=props.max_concurrency,
        )
        function.invoked.add_event_source(self.event_source)

        #: The function's cdk-nag acknowledgments for its pipelines (shared by them).
        self.acknowledgments = _acknowledgments(function)
        self.acknowledgments.locations.extend([self.watched, self.output])
        #: The accounts that may own the buckets: the deploying one, then bucket_accounts.
        self.accounts: list[str] = list(dict.fromkeys([Aws.ACCOUNT_ID,
                                                       *props.bucket_accounts]))
        accounts = self.accounts
        grantee = function.function
        grants.grant_get_objects(grantee, [self.watched], accounts=accounts)
        grants.grant_list(grantee, [self.watched], accounts=accounts)
        grants.grant_put_objects(grantee, self.output, accounts=accounts)
        grants.grant_kms(grantee, list(props.kms_keys), KMS_READ_ACTIONS)
        grants.grant_kms(grantee, list(props.kms_keys), KMS_WRITE_ACTIONS)

        self.dead_letters = cloudwatch.Alarm(
            self, "DeadLetters",
            alarm_description=(f"s3slice pipeline {owner}: messages in its dead-letter queue "
                               "were never processed; inspect and redrive them"),
            metric=self.dead_letter_queue.metric_approximate_number_of_messages_visible(
                period=Duration.minutes(5), statistic=cloudwatch.Stats.MAXIMUM),
            threshold=0,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        #: The prefix workflow (:meth:`add_workflow`) and its alarm; none until added.
        self.workflow: Workflow | None = None
        self.workflow_failures: cloudwatch.Alarm | None = None
        #: The function's ``Errors`` and ``Throttles`` alarms (shared by its pipelines).
        self.function_alarms = FunctionAlarms.of(function, props.alarm_topic)
        if props.alarm_topic is not None:
            notify([self.dead_letters], props.alarm_topic)
        else:
            warn_unrouted(self, "DeadLetters, the function's Errors and Throttles, and its "
                                "workflow's Failures once added")
        output(self, "FunctionName", function.invoked.function_name,
               "the function its messages invoke")
        output(self, "QueueUrl", self.queue.queue_url, "the queue of its objects' events")
        output(self, "DeadLetterQueueUrl", self.dead_letter_queue.queue_url,
               "the dead-letter queue (inspect and redrive)")

    def add_workflow(self, props: PipelineWorkflowProps | None = None) -> Workflow:
        """Add the prefix workflow (Distributed Map + reduce step) over the source prefix,
        with this pipeline's query and output as its defaults (``pipeline_workflow``)."""
        if self.workflow is not None:
            raise SettingsError(f"{self.node.path}: the workflow was added already")
        self.workflow = add_workflow(self, self, props or PipelineWorkflowProps())
        output(self, "StateMachineArn", self.workflow.state_machine.state_machine_arn,
               "its workflow's state machine (runs the query over the whole prefix)")
        return self.workflow


def _acknowledgments(function: ReadFunction) -> PipelineFunctionAcknowledgments:
    """The function's cdk-nag acknowledgments for its pipelines, added on first use."""
    found = getattr(function, "pipeline_acknowledgments", None)
    if isinstance(found, PipelineFunctionAcknowledgments):
        return found
    aspect = PipelineFunctionAcknowledgments(function, function.python_version)
    function.pipeline_acknowledgments = aspect
    Aspects.of(function).add(aspect)
    return aspect


def object_created_pattern(bucket: s3.IBucket, prefix: str,
                           suffixes: Sequence[str]) -> events.EventPattern:
    """S3's ``Object Created`` events of ``bucket`` for keys under ``prefix`` ending with
    one of ``suffixes`` (any key when there is none)."""
    detail: dict[str, Any] = {"bucket": {"name": [bucket.bucket_name]}}
    matchers = [events.Match.wildcard(f"{prefix}*{suffix}") for suffix in suffixes]
    if len(matchers) > 1:
        detail["object"] = {"key": events.Match.any_of(*matchers)}
    elif matchers:
        detail["object"] = {"key": matchers[0]}
    elif prefix:
        detail["object"] = {"key": events.Match.prefix(prefix)}
    return events.EventPattern(source=["aws.s3"], detail_type=["Object Created"],
                               detail=detail)


def _check(props: PipelineProps, path: str) -> None:
    """Refuse props the function or IAM would read otherwise than they are meant."""
    for name, prefix in (("source_prefix", props.source_prefix),
                         ("output_prefix", props.output_prefix)):
        if prefix and not prefix.endswith("/"):
            raise SettingsError(f"{path}: {name} {prefix!r} must end with '/' (a folder)")
        bad = sorted(set(prefix) - KEY_CHARACTERS)
        if bad:
            raise SettingsError(f"{path}: {name} {prefix!r} contains {bad}; use only "
                                "letters, digits and / ! - _ . ' ( ) =")
    if not props.output_prefix:
        raise SettingsError(f"{path}: output_prefix must name a folder, not the whole bucket")
    for suffix in props.source_suffixes:
        bad = sorted(set(suffix) - KEY_CHARACTERS)
        if not suffix or bad:
            raise SettingsError(f"{path}: source_suffixes: {suffix!r} is empty or contains "
                                f"{bad}")
    if props.output_format not in OUTPUT_FORMATS:
        raise SettingsError(f"{path}: output_format must be one of {list(OUTPUT_FORMATS)}, "
                            f"got {props.output_format!r}")
    unknown = set(props.query) - QUERY_FIELDS
    if unknown:
        raise SettingsError(f"{path}: query: unknown keys {sorted(unknown)}; allowed: "
                            f"{sorted(QUERY_FIELDS)}")
    check_query(props.query, path)
    text = json.dumps(dict(props.query))
    if _PLACEHOLDER.search(text):
        raise SettingsError(f"{path}: query: {_PLACEHOLDER.search(text)[0]!r} would be "  # type: ignore[index]
                            "read by "
                            "EventBridge as a placeholder of the rule's input template; "
                            "add spaces around '<' and '>'")
    if len(text) > MAX_INPUT_TEMPLATE - 1024:
        raise SettingsError(f"{path}: query: {len(text)} characters exceed what fits in an "
                            f"EventBridge input template ({MAX_INPUT_TEMPLATE} in all)")
    if not 2 <= props.max_concurrency <= 1000:
        raise SettingsError(f"{path}: max_concurrency must be 2..1000")
    if not 1 <= props.max_receive_count <= 1000:
        raise SettingsError(f"{path}: max_receive_count must be 1..1000")
