"""A pipeline's workflow: the Distributed Map and reduce step over every object under
the pipeline's source prefix (or over an Iceberg table's snapshot, an input with
``"source": {"iceberg": ...}``), with the pipeline's query and output as its defaults.

``Pipeline.add_workflow`` makes it. The grants mirror the repository's stack: the state
machine lists only the pipeline's source location, reads a table's planned items only in
``_partials/`` folders under the pipeline's output prefix and writes its Map Run results
only under the results prefix (registered with the stack's guard as an output, so no
pipeline can watch it); the function may list and read back partial answers only in those
``_partials/`` folders (writing them is its output grant). Tables are read only where
``table_locations`` say (``s3:GetObject`` and a prefix-conditioned ``s3:ListBucket``, each
registered with the guard as a read location), and a table named in the Glue Data
Catalog only if it is one of ``glue_tables`` (``glue:GetTable`` on the catalog, its
database and that table). A ``WorkflowFailures`` alarm notifies the pipeline's alarm
topic.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct, Node

from . import grants
from .contract import PARTIALS
from .grants import KMS_WRITE_ACTIONS, RESULT_WRITER_ACTIONS, BucketPrefix
from .guard import PipelineGuard, location
from .library_nag import PipelineFunctionAcknowledgments
from .nag import Acknowledged, acknowledge_workflow
from .pipeline_ops import notify
from .pipeline_props import PipelineProps
from .settings import KEY_CHARACTERS, SettingsError, is_glue_table
from .workflow import Workflow, WorkflowProps


class PipelineParts(Protocol):
    """What the workflow takes of its ``Pipeline`` (``pipeline`` imports this module, so
    the pipeline is described here, not imported)."""

    props: PipelineProps
    watched: BucketPrefix
    output: BucketPrefix
    accounts: list[str]
    acknowledgments: PipelineFunctionAcknowledgments
    workflow_failures: cloudwatch.Alarm | None

    @property
    def node(self) -> Node: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class PipelineWorkflowProps:
    """The prefix workflow's settings; every prop keyword-only."""

    #: Where Map Run results go, in the output bucket (default
    #: ``workflow-results/<pipeline id>/``); outside every watched prefix.
    results_prefix: str | None = None
    #: The Distributed Map's ``MaxConcurrency``.
    max_concurrency: int = 100
    #: Objects per child execution (``ItemBatcher``).
    items_per_batch: int = 10
    #: The default tolerance of a query that does not combine objects (0..100).
    tolerated_failure_percentage: float = 5
    #: An execution still running after this fails.
    timeout: Duration = dataclasses.field(default_factory=lambda: Duration.hours(24))
    #: The state machine's log retention in days.
    log_retention_days: int = 30
    #: Where the Iceberg tables the workflow may run over live (their metadata, manifests,
    #: data and delete files): a warehouse or a table's folder each (``prefix`` ending
    #: with ``/``; ``BucketPrefix`` of ``s3slice_cdk.grants``). None: no table is readable.
    table_locations: Sequence[BucketPrefix] = ()
    #: The tables named in the AWS Glue Data Catalog (``"database.table"``) the workflow
    #: may run over (``{"iceberg": {"glue": "database.table"}}``); their files must lie in
    #: ``table_locations``.
    glue_tables: Sequence[str] = ()


def add_workflow(scope: Construct, pipeline: PipelineParts,
                 props: PipelineWorkflowProps) -> Workflow:
    """The workflow of ``pipeline`` (see the module docstring), made in ``scope`` (the
    pipeline construct itself)."""
    p = pipeline.props
    owner = pipeline.node.path
    results_prefix = props.results_prefix or f"workflow-results/{pipeline.node.id}/"
    _check_folder(owner, "results_prefix", results_prefix)
    if not 0 <= props.tolerated_failure_percentage <= 100:
        raise SettingsError(f"{owner}: tolerated_failure_percentage must be 0..100")
    _check_tables(props, owner)
    results = BucketPrefix(bucket=p.output_bucket, prefix=results_prefix)
    PipelineGuard.of(scope).register(
        [location(p.output_bucket, results_prefix, "output", owner),
         *(location(t.bucket, t.prefix, "read", owner) for t in props.table_locations)])

    function = p.function
    workflow = Workflow(scope, "Workflow", props=WorkflowProps(
        function=function.invoked,
        default_bucket_name=p.source_bucket.bucket_name,
        default_prefix=p.source_prefix,
        default_query=dict(p.query),
        default_output_uri=pipeline.output.uri,
        default_output_format=p.output_format,
        results_bucket=p.output_bucket,
        results_prefix=results_prefix,
        max_concurrency=props.max_concurrency,
        items_per_batch=props.items_per_batch,
        tolerated_failure_percentage=props.tolerated_failure_percentage,
        log_retention_days=props.log_retention_days,
        timeout=props.timeout,
        outputs=False,  # the pipeline's StateMachineArn output names it
    ))
    accounts = pipeline.accounts
    partials = [BucketPrefix(bucket=p.output_bucket, prefix=f"{p.output_prefix}{PARTIALS}/"),
                BucketPrefix(bucket=p.output_bucket, prefix=f"{p.output_prefix}*/{PARTIALS}/")]
    grants.grant_get_objects(function.function, partials, accounts=accounts)
    grants.grant_list(function.function, partials, accounts=accounts)
    pipeline.acknowledgments.partials.extend(partials)
    if props.table_locations:
        tables = list(props.table_locations)
        grants.grant_get_objects(function.function, tables, accounts=accounts)
        grants.grant_list(function.function, tables, accounts=accounts)
        pipeline.acknowledgments.locations.extend(tables)
    grants.grant_glue_get_tables(function.function, Stack.of(scope), props.glue_tables)
    machine = workflow.state_machine
    grants.grant_list(machine, [pipeline.watched], accounts=accounts)
    grants.grant_get_objects(machine, partials, accounts=accounts)  # a table's items
    grants.grant_put_objects(machine, results, accounts=accounts, actions=RESULT_WRITER_ACTIONS)
    grants.grant_kms(machine, list(p.kms_keys), KMS_WRITE_ACTIONS)
    log: list[Acknowledged] = []
    acknowledge_workflow(workflow, function.function, results, log, items=partials)
    pipeline.acknowledgments.log.extend(log)

    period = Duration.minutes(5)
    failures = cloudwatch.Alarm(
        workflow, "Failures",
        alarm_description=f"s3slice pipeline {owner}: workflow executions failed, timed out "
                          "or aborted",
        metric=cloudwatch.MathExpression(
            expression="failed + timedout + aborted",
            using_metrics={"failed": machine.metric_failed(period=period),
                           "timedout": machine.metric_timed_out(period=period),
                           "aborted": machine.metric_aborted(period=period)},
            period=period, label="unsuccessful executions"),
        threshold=1, evaluation_periods=1,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
    )
    if p.alarm_topic is not None:
        notify([failures], p.alarm_topic)
    pipeline.workflow_failures = failures
    return workflow


def _check_tables(props: PipelineWorkflowProps, owner: str) -> None:
    for table in props.table_locations:
        if table.prefix:  # '': the whole bucket
            _check_folder(owner, "table_locations:", table.prefix)
    for name in props.glue_tables:
        if not is_glue_table(name):
            raise SettingsError(f"{owner}: glue_tables: {name!r} is not 'database.table'")


def _check_folder(owner: str, name: str, prefix: str) -> None:
    """``prefix`` is a folder (ending with '/') of the characters keys may hold here."""
    if not prefix.endswith("/") or set(prefix) - KEY_CHARACTERS:
        raise SettingsError(f"{owner}: {name} {prefix!r} must be a folder (ending with '/') "
                            f"of letters, digits and / ! - _ . ' ( ) =")
