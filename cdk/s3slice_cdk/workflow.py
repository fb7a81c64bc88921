"""A Step Functions Distributed Map that runs one query over every object under a prefix.

Input (every field optional; the defaults are the stack's settings)::

    {"bucket": "my-bucket", "prefix": "incoming/2024/",
     "query": {"columns": ["a", "b"], "filter": "a <= 1000"},
     "output": {"uri": "s3://my-bucket/results/", "format": "parquet"}}

The map lists the objects (``ItemReader`` over ``s3:listObjectsV2``), batches them, and
invokes the function once per batch with
``{"Items": [<listed objects>], "BatchInput": {"query": ..., "output": ..., "bucket": ...}}``.
Map Run results go to the output bucket under the results prefix (``ResultWriter``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from .function import retention
from .service_errors import PERMANENT_ERRORS, RETRYABLE_ERRORS
from .settings import OutputFormat

#: Lambda's own transient errors: retried with backoff.
LAMBDA_RETRYABLE_ERRORS = (
    "Lambda.TooManyRequestsException",
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.ClientExecutionTimeoutException",
)
#: The service's throttling error: retried with a longer interval than the other
#: retryable errors (``RETRYABLE_ERRORS``). Every permanent one (``PERMANENT_ERRORS``) is
#: caught and fails the batch at once. Step Functions matches each by its exact name.
THROTTLED_ERROR = "S3SliceThrottledError"
if THROTTLED_ERROR not in RETRYABLE_ERRORS:
    raise ImportError(f"{THROTTLED_ERROR} is no longer one of the function's retryable "
                      f"errors {RETRYABLE_ERRORS}; update the workflow's retries")
#: The other retryable errors (network failures that outlived the function's retries).
TRANSIENT_ERRORS = tuple(e for e in RETRYABLE_ERRORS if e != THROTTLED_ERROR)

#: The feature flag under which ``resultWriterV2`` is rendered (set on this construct).
RESULT_WRITER_V2_FLAG = "@aws-cdk/aws-stepfunctions:useDistributedMapResultWriterV2"


class _UngrantedS3ObjectsItemReader(sfn.S3ObjectsItemReader):
    """An ItemReader that grants nothing by itself.

    CDK's reader grants ``s3:ListBucket`` on ``*`` when the bucket comes from the input;
    here the stack grants listing only the configured buckets and prefixes instead.
    """

    def provide_policy_statements(self) -> list[iam.PolicyStatement]:
        return []


class _UngrantedResultWriterV2(sfn.ResultWriterV2):
    """A ResultWriter that grants nothing by itself (CDK's grants the whole bucket)."""

    def provide_policy_statements(self) -> list[iam.PolicyStatement]:
        return []


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkflowProps:
    function: lambda_.IFunction
    #: Defaults for the input's ``bucket`` and ``prefix`` (the watched location).
    default_bucket_name: str
    default_prefix: str
    #: Defaults for the input's ``query`` and ``output``.
    default_query: Mapping[str, Any]
    default_output_uri: str
    default_output_format: OutputFormat = "parquet"
    #: Where Map Run results go.
    results_bucket: s3.IBucket
    results_prefix: str
    max_concurrency: int = 100
    items_per_batch: int = 10
    tolerated_failure_percentage: float = 5
    log_retention_days: int = 30
    #: An execution still running after this fails with ``States.Timeout``.
    timeout: Duration = dataclasses.field(default_factory=lambda: Duration.hours(24))


class Workflow(Construct):
    """The Distributed Map state machine.

    It grants itself only what Step Functions does for it (invoking the function,
    starting and describing its own child executions, writing its logs); listing the
    source buckets and writing the results prefix are granted by the composing stack.

    Attributes: ``state_machine``, ``log_group``, ``distributed_map``, ``task``.
    """

    def __init__(self, scope: Construct, construct_id: str, *, props: WorkflowProps) -> None:
        super().__init__(scope, construct_id)
        self.node.set_context(RESULT_WRITER_V2_FLAG, True)

        defaults = sfn.Pass(
            self, "Defaults",
            comment="The stack's settings, for every input field that is left out",
            parameters={
                "defaults": {
                    "bucket": props.default_bucket_name,
                    "prefix": props.default_prefix,
                    "query": dict(props.default_query),
                    "output": {"uri": props.default_output_uri,
                               "format": props.default_output_format},
                },
                "input.$": "$",
            },
        )
        apply_defaults = sfn.Pass(
            self, "ApplyDefaults",
            parameters={"merged.$": "States.JsonMerge($.defaults, $.input, false)"},
            output_path="$.merged",
        )

        self.task = tasks.LambdaInvoke(
            self, "QueryBatch",
            comment="One batch of objects: {Items, BatchInput: {query, output, bucket}}",
            lambda_function=props.function,
            payload_response_only=True,
            retry_on_service_exceptions=False,
        )
        self.task.add_retry(errors=list(LAMBDA_RETRYABLE_ERRORS), interval=Duration.seconds(2),
                            max_attempts=6, backoff_rate=2, jitter_strategy=sfn.JitterType.FULL)
        self.task.add_retry(errors=[THROTTLED_ERROR], interval=Duration.seconds(5),
                            max_attempts=6, backoff_rate=2, jitter_strategy=sfn.JitterType.FULL)
        if TRANSIENT_ERRORS:
            self.task.add_retry(errors=list(TRANSIENT_ERRORS), interval=Duration.seconds(2),
                                max_attempts=3, backoff_rate=2,
                                jitter_strategy=sfn.JitterType.FULL)
        permanent = sfn.Fail(
            self, "PermanentError",
            comment="A typed error that retrying cannot fix; counts against the tolerance",
            error_path="$.failure.Error",
            cause_path="$.failure.Cause",
        )
        self.task.add_catch(permanent, errors=list(PERMANENT_ERRORS), result_path="$.failure")

        self.distributed_map = sfn.DistributedMap(
            self, "ProcessObjects",
            comment="Every object under the prefix, in batches, through the function",
            label="s3slice",
            item_reader=_UngrantedS3ObjectsItemReader(
                bucket_name_path=sfn.JsonPath.string_at("$.bucket"),
                prefix=sfn.JsonPath.string_at("$.prefix"),
            ),
            item_batcher=sfn.ItemBatcher(
                max_items_per_batch=props.items_per_batch,
                batch_input={"query.$": "$.query", "output.$": "$.output",
                             "bucket.$": "$.bucket"},
            ),
            max_concurrency=props.max_concurrency,
            tolerated_failure_percentage=props.tolerated_failure_percentage,
            result_writer_v2=_UngrantedResultWriterV2(
                bucket=props.results_bucket,
                prefix=props.results_prefix,
            ),
        )
        self.distributed_map.item_processor(self.task)

        self.log_group = logs.LogGroup(
            self, "Logs",
            retention=retention(props.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.state_machine = sfn.StateMachine(
            self, "StateMachine",
            comment="s3slice: one query over every object under an S3 prefix",
            definition_body=sfn.DefinitionBody.from_chainable(
                defaults.next(apply_defaults).next(self.distributed_map)),
            state_machine_type=sfn.StateMachineType.STANDARD,
            timeout=props.timeout,
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=self.log_group, level=sfn.LogLevel.ALL,
                                include_execution_data=False),
        )
