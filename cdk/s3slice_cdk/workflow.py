"""A Step Functions Distributed Map that runs one query over every object under a prefix
(or every data file an Iceberg table's snapshot needs), checked before it starts and
followed by one reduce step.

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

An input whose ``source`` is an Iceberg table (``{"source": {"iceberg":
"s3://b/warehouse/db/t/metadata/v3.metadata.json"}}``, or ``{"iceberg": {"glue":
"db.t"}}``, with an optional ``snapshot_id`` or ``as_of``) takes the table path instead
(``Source``, a ``Choice`` on ``$.source`` being present, after the defaults; any other
input goes on to the check, and every state of the prefix path is as before): the planning
step invokes ``{"PlanTable": {"source", "query", "output", "run"}}``,
which plans the snapshot from metadata, writes the planned data files as a JSON array to
``<output>_partials/<run>/items.json`` and answers ``{"combines", "items": {"bucket",
"key", "count"}, "stats"}`` (kept at ``$.plan``: the files and bytes metadata pruned), or
refuses what the check refuses and a table it cannot read. A second Distributed Map
(label ``s3slice-table``) reads that array (``ItemReader`` ``s3:getObject``, ``InputType``
JSON, its bucket and key from ``$.plan.items``), batches the files with ``{"BatchInput":
{"query", "output", "run"}}`` and invokes the function per batch; its tolerance is chosen
as the prefix map's, and the same ``CountBatches`` and reduce steps follow it. The state
machine's role must be allowed ``s3:GetObject`` on the ``_partials/`` folders (the
composing stack grants it).

The events' fields are the function's (``BATCH_INPUT_FIELDS``, ``CHECK_FIELDS``,
``REDUCE_FIELDS`` of ``functions/s3slice/core/contract.py``, via ``contract``): checked here, at
import (``PlanTable``'s, ``PLAN_FIELDS`` of ``s3slice.entry.tables``, by
``tests/infrastructure/test_table_workflow.py``).
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
from constructs import Construct

from .contract import BATCH_INPUT_FIELDS, CHECK_FIELDS, REDUCE_FIELDS
from .function import retention
from .pipeline_ops import output
from .query_check import check_query
from .settings import OutputFormat
from .workflow_states import (
    LAMBDA_RETRYABLE_ERRORS,
    SFN_RETRYABLE_ERRORS,
    THROTTLED_ERROR,
    TRANSIENT_ERRORS,
    UngrantedS3JsonItemReader,
    UngrantedS3ObjectsItemReader,
    distributed_map,
    from_paths,
    function_task,
    tolerance,
)

__all__ = ["BATCH_INPUT", "CHECK_INPUT", "LAMBDA_RETRYABLE_ERRORS", "MAP_RUN_LABEL",
           "PLAN_INPUT", "REDUCE_INPUT", "SFN_RETRYABLE_ERRORS", "TABLE_BATCH_INPUT",
           "TABLE_MAP_RUN_LABEL", "THROTTLED_ERROR", "TRANSIENT_ERRORS", "Workflow",
           "WorkflowProps"]

#: What each event the workflow sends the function carries, as a path into the state's
#: input (or its context object) per field: a map batch's ``BatchInput``, the check step's
#: ``{"Check": ...}`` and the reduce step's ``{"Reduce": ...}``. Their fields are the
#: function's (checked below).
BATCH_INPUT = {"query": "$.query", "output": "$.output", "bucket": "$.bucket",
               "run": "$$.Execution.Name"}
CHECK_INPUT = {"query": "$.query", "output": "$.output"}
REDUCE_INPUT = {"run": "$$.Execution.Name", "query": "$.query", "output": "$.output",
                "batches": "$.count.batches"}
#: The table path's planning step (``{"PlanTable": ...}``, ``s3slice.entry.tables``) and
#: its batches' ``BatchInput`` (a table's items name their files: no bucket).
PLAN_INPUT = {"source": "$.source", "query": "$.query", "output": "$.output",
              "run": "$$.Execution.Name"}
TABLE_BATCH_INPUT = {f: p for f, p in BATCH_INPUT.items() if f != "bucket"}
for _event, _paths, _fields in (("BatchInput", BATCH_INPUT, BATCH_INPUT_FIELDS),
                                ("Check", CHECK_INPUT, CHECK_FIELDS),
                                ("Reduce", REDUCE_INPUT, REDUCE_FIELDS)):
    if set(_paths) != _fields:
        raise ImportError(f"the workflow's {_event} {sorted(_paths)} no longer matches the "
                          f"function's fields {sorted(_fields)}; update the workflow")

#: The Distributed Map's label: its Map Run ARNs are ``...:mapRun:<state machine>/<label>:<id>``.
MAP_RUN_LABEL = "s3slice"
#: The table path's Distributed Map's label.
TABLE_MAP_RUN_LABEL = "s3slice-table"

#: The feature flag under which ``resultWriterV2`` is rendered (set on this construct).
RESULT_WRITER_V2_FLAG = "@aws-cdk/aws-stepfunctions:useDistributedMapResultWriterV2"


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkflowProps:
    """What the workflow runs and where, every prop keyword-only. The caller grants the
    state machine listing the locations it may read, reading a table's planned items (the
    ``_partials/`` folders of the outputs) and writing the results prefix."""

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
    #: Objects (or a table's planned data files) per child execution (``ItemBatcher``).
    items_per_batch: int = 10
    #: The default of the input's ``toleratedFailurePercentage``: the map's tolerance for
    #: a query that does not combine objects (one that does tolerates none).
    tolerated_failure_percentage: float = 5
    #: The state machine's log retention in days.
    log_retention_days: int = 30
    #: An execution still running after this fails with ``States.Timeout``.
    timeout: Duration = dataclasses.field(default_factory=lambda: Duration.hours(24))
    #: ``CfnOutput``s of its parts: ``StateMachineArn``, ``FunctionName`` (what its tasks
    #: invoke) and ``LogGroupName``, under the construct. False when the composing
    #: construct has outputs of its own (a ``Pipeline``'s workflow, the repository's stack).
    outputs: bool = True


class Workflow(Construct):
    """The Distributed Map state machine.

    It grants itself only what Step Functions does for it (invoking the function,
    starting and describing its own child executions and Map Runs, writing its logs); listing the
    source buckets, reading a table's planned items in the ``_partials/`` folders and
    writing the results prefix are granted by the composing stack.

    Attributes: ``state_machine``, ``log_group``, ``check``, ``tolerance`` (the
    ``Choice``), ``no_failed_batches`` (its ``Pass`` for a combining query),
    ``distributed_map``, ``task`` (a batch), ``count_batches``, ``reduce``; the table
    path's ``source`` (the ``Choice`` between the paths), ``plan_table``,
    ``table_tolerance``, ``table_no_failed_batches``, ``table_map`` and ``table_task``.
    Outputs (unless ``outputs`` is false): ``StateMachineArn``, ``FunctionName`` and
    ``LogGroupName``.
    """

    def __init__(self, scope: Construct, construct_id: str, *, props: WorkflowProps) -> None:
        super().__init__(scope, construct_id)
        check_query(props.default_query, self.node.path)
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

        self.check = function_task(
            self, props.function, "Check",
            "Before any batch runs: does the query combine objects, and can it be split "
            "exactly? ({Check: {query, output}})",
            failed=("QueryRefused", "A typed error of the check (a query that cannot be "
                    "split exactly, a malformed query or output): no batch has run"),
            payload=sfn.TaskInput.from_object({"Check": from_paths(CHECK_INPUT)}),
            result_selector={"combines.$": "$.combines"},
            result_path="$.check",
        )
        self.task = function_task(
            self, props.function, "QueryBatch",
            "One batch of objects: {Items, BatchInput: {query, output, bucket, run}}",
            failed=("PermanentError", "A typed error that retrying cannot fix; counts "
                    "against the tolerance"),
        )

        self.distributed_map = distributed_map(
            self, "ProcessObjects", **_map_settings(props),
            comment="Every object under the prefix, in batches, through the function",
            label=MAP_RUN_LABEL,
            item_reader=UngrantedS3ObjectsItemReader(
                bucket_name_path=sfn.JsonPath.string_at("$.bucket"),
                prefix=sfn.JsonPath.string_at("$.prefix"),
            ),
            batch_input=BATCH_INPUT,
        )
        self.distributed_map.item_processor(self.task)
        self.no_failed_batches, self.tolerance = tolerance(
            self, "", combined="objects", combines="$.check.combines",
            then=self.distributed_map)

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

        self.reduce = function_task(
            self, props.function, "Reduce",
            "Combines the batches' partial answers (a query that combines objects); "
            "answers {reduced: false} for any other query",
            failed=("ReduceFailed", "A typed error of the reduce: a batch's partial answer "
                    "is missing, or retrying cannot fix it"),
            payload=sfn.TaskInput.from_object({"Reduce": from_paths(REDUCE_INPUT)}),
            result_path="$.reduce",
        )

        self.distributed_map.next(self.count_batches).next(self.reduce)
        self._add_table_path(props)

        self.log_group = logs.LogGroup(
            self, "Logs",
            retention=retention(props.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.state_machine = sfn.StateMachine(
            self, "StateMachine",
            comment="s3slice: one query over every object under an S3 prefix, or over an "
                    "Iceberg table's snapshot",
            definition_body=sfn.DefinitionBody.from_chainable(
                defaults.next(apply_defaults).next(
                    self.source
                    .when(sfn.Condition.is_present("$.source"),
                          self.plan_table.next(self.table_tolerance))
                    .otherwise(self.check.next(self.tolerance))
                    .afterwards())),
            state_machine_type=sfn.StateMachineType.STANDARD,
            timeout=props.timeout,
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=self.log_group, level=sfn.LogLevel.ALL,
                                include_execution_data=False),
        )
        if props.outputs:
            output(self, "StateMachineArn", self.state_machine.state_machine_arn,
                   "the state machine (start an execution to run the query over a prefix)")
            output(self, "FunctionName", props.function.function_name,
                   "the function its tasks invoke")
            output(self, "LogGroupName", self.log_group.log_group_name,
                   "the state machine's execution log")
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
                resource_name=f"{state_machine_name}/{label}:*",
                arn_format=ArnFormat.COLON_RESOURCE_NAME)
                for label in (MAP_RUN_LABEL, TABLE_MAP_RUN_LABEL)],
        ))

    def _add_table_path(self, props: WorkflowProps) -> None:
        """The states of an input whose source is a table (see the module): ``source``
        (the Choice), ``plan_table``, ``table_tolerance``, ``table_no_failed_batches``,
        ``table_map`` and its ``table_task``; the map is followed by ``count_batches``."""
        self.source = sfn.Choice(
            self, "Source",
            comment="An Iceberg table ({source: {iceberg: ...}}): its planned data files; "
                    "else every object under the prefix",
        )
        self.plan_table = function_task(
            self, props.function, "PlanTable",
            "A table's scan planned from metadata: its data files written as the map's "
            "items ({PlanTable: {source, query, output, run}})",
            failed=("TableRefused", "A typed error of the planning step (a table it cannot "
                    "read, a query that cannot be split exactly): no batch has run"),
            payload=sfn.TaskInput.from_object({"PlanTable": from_paths(PLAN_INPUT)}),
            result_selector={"combines.$": "$.combines", "items.$": "$.items",
                             "stats.$": "$.stats"},
            result_path="$.plan",
        )
        self.table_task = function_task(
            self, props.function, "QueryTableBatch",
            "One batch of a table's planned data files: {Items: [{iceberg, snapshot_id, "
            "file, ...}], BatchInput: {query, output, run}}",
            failed=("TableBatchFailed", "A typed error that retrying cannot fix; counts "
                    "against the tolerance"),
        )
        self.table_map = distributed_map(
            self, "ProcessTableFiles", **_map_settings(props),
            comment="Every data file the plan kept, in batches, through the function",
            label=TABLE_MAP_RUN_LABEL,
            item_reader=UngrantedS3JsonItemReader(
                bucket_name_path=sfn.JsonPath.string_at("$.plan.items.bucket"),
                key=sfn.JsonPath.string_at("$.plan.items.key"),
            ),
            batch_input=TABLE_BATCH_INPUT,
        )
        self.table_map.item_processor(self.table_task)
        self.table_no_failed_batches, self.table_tolerance = tolerance(
            self, "Table", combined="rows", combines="$.plan.combines", then=self.table_map)
        self.table_map.next(self.count_batches)


def _map_settings(props: WorkflowProps) -> dict[str, Any]:
    """What both Distributed Maps take from the props."""
    return {"items_per_batch": props.items_per_batch, "max_concurrency": props.max_concurrency,
            "results_bucket": props.results_bucket, "results_prefix": props.results_prefix}
