"""A Step Functions Distributed Map that runs one query over every object under a prefix,
checked before it starts and followed by one reduce step.

Input (every field optional; the defaults are the stack's settings)::

    {"bucket": "my-bucket", "prefix": "incoming/2024/",
     "query": {"columns": ["a", "b"], "filter": "a <= 1000"},
     "output": {"uri": "s3://my-bucket/results/", "format": "parquet"},
     "toleratedFailurePercentage": 5}

First the check step invokes the function with ``{"Check": {"query", "output"}}``: it
answers ``{"status": "ok", "combines": true|false}``, or raises ``QueryError`` naming the
construct when a query that combines objects cannot be split exactly (a median, a window
function), which fails the execution before any batch runs. A query that combines objects
tolerates no failed batch: the map's ``ToleratedFailurePercentagePath`` then reads 0 (a
``Choice`` on ``$.check.combines`` overwrites the input's ``toleratedFailurePercentage``),
so the Map Run stops at the first batch that fails; any other query keeps the input's
tolerance (default the setting).

The map lists the objects (``ItemReader`` over ``s3:listObjectsV2``), batches them, and
invokes the function once per batch with ``{"Items": [<listed objects>], "BatchInput":
{"query": ..., "output": ..., "bucket": ..., "run": <the execution's name>}}``. Map Run
results go to the output bucket under the results prefix (``ResultWriter``), so the map's
own output is only ``{"MapRunArn", "ResultWriterDetails"}``: the number of batches comes
from ``DescribeMapRun`` (``ExecutionCounts.Total``: one child execution per batch, failed
ones included). The reduce step then invokes the function once with ``{"Reduce": {"run",
"query", "output", "batches"}}``: for a query that combines objects it refuses unless
every one of those batches left its partial answer, so a failed batch never yields a
combined answer, whatever the map tolerated; for any other query it answers
``{"reduced": false}``.

The events' fields are the function's (``BATCH_INPUT_FIELDS``, ``CHECK_FIELDS``,
``REDUCE_FIELDS`` of ``functions/s3slice/contract.py``, via ``contract``): checked here, at
import.
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

from .contract import BATCH_INPUT_FIELDS, CHECK_FIELDS, REDUCE_FIELDS
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

#: What each event the workflow sends the function carries, as a path into the state's
#: input (or its context object) per field: a map batch's ``BatchInput``, the check step's
#: ``{"Check": ...}`` and the reduce step's ``{"Reduce": ...}``. Their fields are the
#: function's (checked below).
BATCH_INPUT = {"query": "$.query", "output": "$.output", "bucket": "$.bucket",
               "run": "$$.Execution.Name"}
CHECK_INPUT = {"query": "$.query", "output": "$.output"}
REDUCE_INPUT = {"run": "$$.Execution.Name", "query": "$.query", "output": "$.output",
                "batches": "$.count.batches"}
for _event, _paths, _fields in (("BatchInput", BATCH_INPUT, BATCH_INPUT_FIELDS),
                                ("Check", CHECK_INPUT, CHECK_FIELDS),
                                ("Reduce", REDUCE_INPUT, REDUCE_FIELDS)):
    if set(_paths) != _fields:
        raise ImportError(f"the workflow's {_event} {sorted(_paths)} no longer matches the "
                          f"function's fields {sorted(_fields)}; update the workflow")

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
    """What the prefix workflow runs and where, every prop keyword-only. The caller grants
    the state machine listing the locations it may read and writing the results prefix."""

    #: The function (or its alias) every task invokes.
    function: lambda_.IFunction
    #: The default of the input's ``bucket`` (the watched location's bucket).
    default_bucket_name: str
    #: The default of the input's ``prefix``.
    default_prefix: str
    #: The default of the input's ``query``.
    default_query: Mapping[str, Any]
    #: The default of the input's ``output.uri``.
    default_output_uri: str
    #: The default of the input's ``output.format``.
    default_output_format: OutputFormat = "parquet"
    #: The bucket Map Run results go to.
    results_bucket: s3.IBucket
    #: The prefix Map Run results go under.
    results_prefix: str
    #: The Distributed Map's ``MaxConcurrency``.
    max_concurrency: int = 100
    #: Objects per child execution (``ItemBatcher``).
    items_per_batch: int = 10
    #: The default of the input's ``toleratedFailurePercentage``: the map's tolerance for
    #: a query that does not combine objects (one that does tolerates none).
    tolerated_failure_percentage: float = 5
    #: The state machine's log retention in days.
    log_retention_days: int = 30
    #: An execution still running after this fails with ``States.Timeout``.
    timeout: Duration = dataclasses.field(default_factory=lambda: Duration.hours(24))


class Workflow(Construct):
    """The Distributed Map state machine.

    It grants itself only what Step Functions does for it (invoking the function,
    starting and describing its own child executions and Map Runs, writing its logs); listing the
    source buckets and writing the results prefix are granted by the composing stack.

    Attributes: ``state_machine``, ``log_group``, ``check``, ``tolerance`` (the
    ``Choice``), ``no_failed_batches`` (its ``Pass`` for a combining query),
    ``distributed_map``, ``task`` (a batch), ``count_batches``, ``reduce``.
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

        self.check = _function_task(
            self, props.function, "Check",
            "Before any batch runs: does the query combine objects, and can it be split "
            "exactly? ({Check: {query, output}})",
            failed=("QueryRefused", "A typed error of the check (a query that cannot be "
                    "split exactly, a malformed query or output): no batch has run"),
            payload=sfn.TaskInput.from_object({"Check": _from_paths(CHECK_INPUT)}),
            result_selector={"combines.$": "$.combines"},
            result_path="$.check",
        )
        # A combining query's answer needs every batch: the map tolerates no failure.
        self.no_failed_batches = sfn.Pass(
            self, "ToleratesNoFailedBatch",
            comment="A query that combines objects: the map fails at its first failed batch",
            result=sfn.Result.from_number(0),
            result_path="$.toleratedFailurePercentage",
        )
        self.tolerance = sfn.Choice(
            self, "Tolerance",
            comment="The map's tolerance: 0 for a query that combines objects, else the "
                    "input's toleratedFailurePercentage",
        )

        self.task = _function_task(
            self, props.function, "QueryBatch",
            "One batch of objects: {Items, BatchInput: {query, output, bucket, run}}",
            failed=("PermanentError", "A typed error that retrying cannot fix; counts "
                    "against the tolerance"),
        )

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
                # ItemBatcher's BatchInput is rendered as given (no JsonPath tokens)
                batch_input={f"{field}.$": path for field, path in BATCH_INPUT.items()},
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

        self.reduce = _function_task(
            self, props.function, "Reduce",
            "Combines the batches' partial answers (a query that combines objects); "
            "answers {reduced: false} for any other query",
            failed=("ReduceFailed", "A typed error of the reduce: a batch's partial answer "
                    "is missing, or retrying cannot fix it"),
            payload=sfn.TaskInput.from_object({"Reduce": _from_paths(REDUCE_INPUT)}),
            result_path="$.reduce",
        )

        self.distributed_map.next(self.count_batches).next(self.reduce)

        self.log_group = logs.LogGroup(
            self, "Logs",
            retention=retention(props.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.state_machine = sfn.StateMachine(
            self, "StateMachine",
            comment="s3slice: one query over every object under an S3 prefix",
            definition_body=sfn.DefinitionBody.from_chainable(
                defaults.next(apply_defaults).next(self.check).next(
                    self.tolerance
                    .when(sfn.Condition.boolean_equals("$.check.combines", True),
                          self.no_failed_batches.next(self.distributed_map))
                    .otherwise(self.distributed_map)
                    .afterwards())),
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


def _from_paths(paths: Mapping[str, str]) -> dict[str, Any]:
    """State parameters: each field taken from its path (rendered as ``"field.$": path``)."""
    return {field: sfn.JsonPath.string_at(path) for field, path in paths.items()}


def _function_task(scope: Construct, function: lambda_.IFunction, name: str, comment: str, *,
                   failed: tuple[str, str], **options: Any) -> tasks.LambdaInvoke:
    """A task invoking the function (its response is the state's result), with the error
    contract of :func:`_retry_and_catch`; a permanent error ends in the Fail state
    ``failed`` (name, comment)."""
    task = tasks.LambdaInvoke(scope, name, comment=comment, lambda_function=function,
                              payload_response_only=True, retry_on_service_exceptions=False,
                              **options)
    fail_name, fail_comment = failed
    _retry_and_catch(task, sfn.Fail(scope, fail_name, comment=fail_comment,
                                    error_path="$.failure.Error",
                                    cause_path="$.failure.Cause"))
    return task


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
