"""A Step Functions Distributed Map that runs one query over every object under a prefix,
then one reduce step.

Input (every field optional; the defaults are the stack's settings)::

    {"bucket": "my-bucket", "prefix": "incoming/2024/",
     "query": {"columns": ["a", "b"], "filter": "a <= 1000"},
     "output": {"uri": "s3://my-bucket/results/", "format": "parquet"},
     "toleratedFailurePercentage": 5}

The map lists the objects (``ItemReader`` over ``s3:listObjectsV2``), batches them, and
invokes the function once per batch with ``{"Items": [<listed objects>], "BatchInput":
{"query": ..., "output": ..., "bucket": ..., "run": <the execution's name>}}``. Map Run
results go to the output bucket under the results prefix (``ResultWriter``), so the map's
own output is only ``{"MapRunArn", "ResultWriterDetails"}``: the number of batches comes
from ``DescribeMapRun`` (``ExecutionCounts.Total``: one child execution per batch, failed
ones included). The reduce step then invokes the function once with ``{"Reduce": {"run",
"query", "output", "batches"}}``: for a query that combines objects it refuses unless
every one of those batches left its partial answer, so a failed batch never yields a
combined answer whatever the map tolerated; for any other query it answers
``{"reduced": false}``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from aws_cdk import ArnFormat, Aws, Duration, Fn, RemovalPolicy, Stack
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

#: Step Functions' own transient errors, from the ``DescribeMapRun`` SDK call.
SFN_RETRYABLE_ERRORS = ("Sfn.SfnException", "Sfn.ThrottlingException")

#: The Distributed Map's label: its Map Run ARNs are ``...:mapRun:<state machine>/<label>:<id>``.
MAP_RUN_LABEL = "s3slice"

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
    #: The default of the input's ``toleratedFailurePercentage`` (the map's tolerance).
    tolerated_failure_percentage: float = 5
    log_retention_days: int = 30
    #: An execution still running after this fails with ``States.Timeout``.
    timeout: Duration = dataclasses.field(default_factory=lambda: Duration.hours(24))


class Workflow(Construct):
    """The Distributed Map state machine.

    It grants itself only what Step Functions does for it (invoking the function,
    starting and describing its own child executions and Map Runs, writing its logs); listing the
    source buckets and writing the results prefix are granted by the composing stack.

    Attributes: ``state_machine``, ``log_group``, ``distributed_map``, ``task`` (a
    batch), ``count_batches``, ``reduce``.
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
                    "toleratedFailurePercentage": props.tolerated_failure_percentage,
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
            comment="One batch of objects: {Items, BatchInput: {query, output, bucket, run}}",
            lambda_function=props.function,
            payload_response_only=True,
            retry_on_service_exceptions=False,
        )
        _retry_and_catch(self.task, sfn.Fail(
            self, "PermanentError",
            comment="A typed error that retrying cannot fix; counts against the tolerance",
            error_path="$.failure.Error",
            cause_path="$.failure.Cause",
        ))

        self.distributed_map = sfn.DistributedMap(
            self, "ProcessObjects",
            comment="Every object under the prefix, in batches, through the function",
            label=MAP_RUN_LABEL,
            item_reader=_UngrantedS3ObjectsItemReader(
                bucket_name_path=sfn.JsonPath.string_at("$.bucket"),
                prefix=sfn.JsonPath.string_at("$.prefix"),
            ),
            item_batcher=sfn.ItemBatcher(
                max_items_per_batch=props.items_per_batch,
                batch_input={"query.$": "$.query", "output.$": "$.output",
                             "bucket.$": "$.bucket", "run.$": sfn.JsonPath.execution_name},
            ),
            max_concurrency=props.max_concurrency,
            tolerated_failure_percentage_path="$.toleratedFailurePercentage",
            result_writer_v2=_UngrantedResultWriterV2(
                bucket=props.results_bucket,
                prefix=props.results_prefix,
            ),
            result_path="$.map",
        )
        self.distributed_map.item_processor(self.task)

        # The map's output is the ResultWriter's manifest location, not the batches'
        # results: the Map Run's own count of child executions is the number of batches.
        self.count_batches = sfn.CustomState(
            self, "CountBatches",
            state_json={
                "Type": "Task",
                "Comment": "The number of batches the map ran: one child execution each, "
                           "failed ones included",
                "Resource": f"arn:{Aws.PARTITION}:states:::aws-sdk:sfn:describeMapRun",
                "Parameters": {"MapRunArn.$": "$.map.MapRunArn"},
                "ResultSelector": {"batches.$": "$.ExecutionCounts.Total"},
                "ResultPath": "$.count",
            },
        )
        self.count_batches.add_retry(errors=list(SFN_RETRYABLE_ERRORS),
                                     interval=Duration.seconds(1), max_attempts=5,
                                     backoff_rate=2, jitter_strategy=sfn.JitterType.FULL)

        self.reduce = tasks.LambdaInvoke(
            self, "Reduce",
            comment="Combines the batches' partial answers (a query that combines objects); "
                    "answers {reduced: false} for any other query",
            lambda_function=props.function,
            payload=sfn.TaskInput.from_object({"Reduce": {
                "run": sfn.JsonPath.execution_name,
                "query": sfn.JsonPath.object_at("$.query"),
                "output": sfn.JsonPath.object_at("$.output"),
                "batches": sfn.JsonPath.number_at("$.count.batches"),
            }}),
            payload_response_only=True,
            retry_on_service_exceptions=False,
            result_path="$.reduce",
        )
        _retry_and_catch(self.reduce, sfn.Fail(
            self, "ReduceFailed",
            comment="A typed error of the reduce: a batch's partial answer is missing, or "
                    "retrying cannot fix it",
            error_path="$.failure.Error",
            cause_path="$.failure.Cause",
        ))

        self.log_group = logs.LogGroup(
            self, "Logs",
            retention=retention(props.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.state_machine = sfn.StateMachine(
            self, "StateMachine",
            comment="s3slice: one query over every object under an S3 prefix",
            definition_body=sfn.DefinitionBody.from_chainable(
                defaults.next(apply_defaults).next(self.distributed_map)
                .next(self.count_batches).next(self.reduce)),
            state_machine_type=sfn.StateMachineType.STANDARD,
            timeout=props.timeout,
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=self.log_group, level=sfn.LogLevel.ALL,
                                include_execution_data=False),
        )
        # Counting the batches: DescribeMapRun on this state machine's own Map Runs. In the
        # policy CDK attaches for the Distributed Map (the state machine's default policy
        # cannot name the state machine without a dependency cycle).
        distributed_map_policy = self.state_machine.node.find_child("DistributedMapPolicy")
        assert isinstance(distributed_map_policy, iam.Policy)
        state_machine_name = Fn.select(6, Fn.split(":", self.state_machine.state_machine_arn))
        distributed_map_policy.add_statements(iam.PolicyStatement(
            actions=["states:DescribeMapRun"],
            resources=[Stack.of(self).format_arn(
                service="states", resource="mapRun",
                resource_name=f"{state_machine_name}/{MAP_RUN_LABEL}:*",
                arn_format=ArnFormat.COLON_RESOURCE_NAME)],
        ))


def _retry_and_catch(task: tasks.LambdaInvoke, permanent: sfn.Fail) -> None:
    """The error contract: Lambda's and the service's transient errors retried with
    backoff (throttling with a longer interval), every permanent one caught and failed."""
    task.add_retry(errors=list(LAMBDA_RETRYABLE_ERRORS), interval=Duration.seconds(2),
                   max_attempts=6, backoff_rate=2, jitter_strategy=sfn.JitterType.FULL)
    task.add_retry(errors=[THROTTLED_ERROR], interval=Duration.seconds(5),
                   max_attempts=6, backoff_rate=2, jitter_strategy=sfn.JitterType.FULL)
    if TRANSIENT_ERRORS:
        task.add_retry(errors=list(TRANSIENT_ERRORS), interval=Duration.seconds(2),
                       max_attempts=3, backoff_rate=2, jitter_strategy=sfn.JitterType.FULL)
    task.add_catch(permanent, errors=list(PERMANENT_ERRORS), result_path="$.failure")
