"""The workflow's table path, as synthesized: an input whose ``source`` is an Iceberg table
is planned by the function (``PlanTable``), its planned data files read by a second
Distributed Map from the JSON array the planning step wrote, and answered by the same
batches' function and the same ``CountBatches`` and reduce steps as a prefix; the grants
that path needs (the state machine reads the items, only in ``_partials/`` folders; a
pipeline's function reads only its ``table_locations`` and ``glue_tables``). Executed
end to end in ``test_iceberg_workflow_execution.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from s3slice_cdk import PipelineWorkflowProps, SettingsError
from s3slice_cdk.grants import BucketPrefix
from tests.infrastructure.pipelines import bucket, pipeline, reader
from tests.infrastructure.support import bare_stack, state_machine_definition
from tests.infrastructure.workflow_construct import (
    FUNCTION_ARN,
    PSEUDO,
    allows,
    build,
    role_statements,
    task_state,
)

pytestmark = pytest.mark.infrastructure

#: The states only an input with a table source reaches.
TABLE_STATES = {"PlanTable", "TableRefused", "TableTolerance", "TableToleratesNoFailedBatch",
                "ProcessTableFiles"}


@pytest.fixture(scope="module")
def definition() -> dict[str, Any]:
    _, template = build()
    return state_machine_definition(template.to_json())


def successors(state: dict[str, Any]) -> set[str]:
    return {n for n in (state.get("Next"), state.get("Default"),
                        *(c["Next"] for c in state.get("Choices", [])),
                        *(c["Next"] for c in state.get("Catch", []))) if n}


def reachable(definition: dict[str, Any], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(successors(definition["States"][name]))
    return seen


def test_a_table_source_takes_the_table_path_and_a_prefix_the_prefix_path(
        definition: dict[str, Any]) -> None:
    source = definition["States"]["Source"]
    assert definition["States"]["ApplyDefaults"]["Next"] == "Source"
    assert source["Type"] == "Choice"
    assert source["Choices"] == [{"Variable": "$.source", "IsPresent": True,
                                  "Next": "PlanTable"}]
    assert source["Default"] == "Check"
    # the prefix path never enters a table state; the table path joins it at CountBatches
    prefix = reachable(definition, "Check")
    assert not prefix & TABLE_STATES
    assert {"Tolerance", "ProcessObjects", "CountBatches", "Reduce"} <= prefix
    table = reachable(definition, "PlanTable")
    assert table == TABLE_STATES | {"CountBatches", "Reduce", "ReduceFailed"}
    assert definition["States"]["ProcessTableFiles"]["Next"] == "CountBatches"
    assert definition["States"]["ProcessObjects"]["Next"] == "CountBatches"


def test_the_planning_step_sends_the_functions_fields(definition: dict[str, Any]) -> None:
    """``{"PlanTable": {source, query, output, run}}``: the fields the function's planning
    step takes (``s3slice.entry.tables.PLAN_FIELDS``); its answer's ``combines``,
    ``items`` and ``stats`` kept at ``$.plan``."""
    from s3slice.entry.tables import PLAN_FIELDS

    plan = definition["States"]["PlanTable"]
    assert plan["Type"] == "Task"
    assert plan["Resource"] == FUNCTION_ARN
    assert plan["Parameters"] == {"PlanTable": {
        "source.$": "$.source", "query.$": "$.query", "output.$": "$.output",
        "run.$": "$$.Execution.Name"}}
    assert {k.removesuffix(".$") for k in plan["Parameters"]["PlanTable"]} == PLAN_FIELDS
    assert plan["ResultSelector"] == {"combines.$": "$.combines", "items.$": "$.items",
                                      "stats.$": "$.stats"}
    assert plan["ResultPath"] == "$.plan"
    assert plan["Next"] == "TableTolerance"
    # the check's error contract: retried as it is, refused (Fail) on a permanent error
    check = definition["States"]["Check"]
    assert plan["Retry"] == check["Retry"]
    (catch,) = plan["Catch"]
    (check_catch,) = check["Catch"]
    assert catch["ErrorEquals"] == check_catch["ErrorEquals"]
    assert {"ObjectNotFoundError", "ObjectFormatError", "QueryError"} <= set(
        catch["ErrorEquals"])
    refused = definition["States"][catch["Next"]]
    assert refused["Type"] == "Fail"
    assert (refused["ErrorPath"], refused["CausePath"]) == ("$.failure.Error",
                                                            "$.failure.Cause")


def test_a_combining_query_over_a_table_tolerates_no_failed_batch(
        definition: dict[str, Any]) -> None:
    tolerance = definition["States"]["TableTolerance"]
    assert tolerance["Choices"] == [{"Variable": "$.plan.combines", "BooleanEquals": True,
                                     "Next": "TableToleratesNoFailedBatch"}]
    assert tolerance["Default"] == "ProcessTableFiles"
    none = definition["States"]["TableToleratesNoFailedBatch"]
    assert (none["Type"], none["Result"], none["Next"]) == ("Pass", 0, "ProcessTableFiles")
    assert none["ResultPath"] == definition["States"]["ProcessTableFiles"][
        "ToleratedFailurePercentagePath"] == "$.toleratedFailurePercentage"


def test_the_table_map_reads_the_planned_items_as_a_json_array(
        definition: dict[str, Any]) -> None:
    """``s3:getObject`` of the JSON array the planning step wrote, its bucket and key
    from the planning step's answer (ItemReader ``Parameters`` take paths in JSONPath
    workflows), batched as a prefix's objects are."""
    from s3slice.core import contract

    table, prefix = (definition["States"][n] for n in ("ProcessTableFiles", "ProcessObjects"))
    assert table["ItemReader"] == {
        "Resource": "arn:<token>:states:::s3:getObject",
        "ReaderConfig": {"InputType": "JSON"},
        "Parameters": {"Bucket.$": "$.plan.items.bucket", "Key.$": "$.plan.items.key"}}
    assert table["ItemBatcher"] == {
        "MaxItemsPerBatch": prefix["ItemBatcher"]["MaxItemsPerBatch"],
        "BatchInput": {"query.$": "$.query", "output.$": "$.output",
                       "run.$": "$$.Execution.Name"}}
    assert {k.removesuffix(".$") for k in table["ItemBatcher"]["BatchInput"]} <= (
        contract.BATCH_INPUT_FIELDS)
    assert table["Label"] == "s3slice-table" != prefix["Label"]
    for same in ("ResultWriter", "ResultPath", "MaxConcurrency",
                 "ToleratedFailurePercentagePath"):
        assert table[same] == prefix[same], same
    assert table["ItemProcessor"]["ProcessorConfig"] == prefix["ItemProcessor"][
        "ProcessorConfig"]
    batch, prefix_batch = task_state(table), task_state(prefix)
    assert batch["Resource"] == prefix_batch["Resource"] == FUNCTION_ARN
    assert batch["Retry"] == prefix_batch["Retry"]
    assert [c["ErrorEquals"] for c in batch["Catch"]] == [
        c["ErrorEquals"] for c in prefix_batch["Catch"]]


def test_settings_reach_the_table_map() -> None:
    _, template = build(max_concurrency=7, items_per_batch=3, results_prefix="runs/")
    state = state_machine_definition(template.to_json())["States"]["ProcessTableFiles"]
    assert state["MaxConcurrency"] == 7
    assert state["ItemBatcher"]["MaxItemsPerBatch"] == 3
    assert state["ResultWriter"]["Parameters"]["Prefix"] == "runs/"


# --------------------------------------------------------------------- grants
S3 = "arn:aws:s3:::"
OWNER = {"s3:ResourceAccount": PSEUDO["AWS::AccountId"]}


def test_the_state_machine_reads_items_only_in_partials_folders(imported_stack: Any) -> None:
    """The app's stack (``outputBucket=acme-results``, ``outputPrefix=sliced/``): the
    state machine may get ``items.json`` of a run under the output prefix's
    ``_partials/`` folders, nothing else of the output, the sources or the results."""
    stack = imported_stack.stack
    machine = role_statements(imported_stack, stack.workflow.state_machine.role)
    for key in ("acme-results/sliced/_partials/run-1/items.json",
                "acme-results/sliced/daily/_partials/run-1/items.json"):
        assert allows(machine, "s3:GetObject", S3 + key, OWNER), key
        assert not allows(machine, "s3:GetObject", S3 + key,
                          {"s3:ResourceAccount": "999999999999"})
        assert not allows(machine, "s3:PutObject", S3 + key, OWNER)
    for key in ("acme-results/sliced/combined.0123.csv", "acme-results/_partials/r/items.json",
                "acme-landing/events/a.parquet", "acme-reference/dim/items.json"):
        assert not allows(machine, "s3:GetObject", S3 + key, OWNER), key


def table_pipeline(layer: Path, **workflow: Any) -> tuple[cdk.Stack, Any]:
    stack = bare_stack()
    made = pipeline(stack, "Sales", reader(stack, "Fn", layer), "acme-landing/sales/",
                    "acme-results/sales/")
    made.add_workflow(PipelineWorkflowProps(**workflow))
    return stack, made


class _Synth:
    def __init__(self, stack: cdk.Stack) -> None:
        self.stack = stack
        self.json = Template.from_stack(stack).to_json()

    def resources(self, kind: str) -> dict[str, Any]:
        return {k: v for k, v in self.json["Resources"].items() if v["Type"] == kind}

    def logical_id(self, construct: Any) -> str:
        return str(self.stack.resolve(construct.node.default_child.logical_id))


def test_a_pipelines_function_reads_only_its_table_locations_and_glue_tables(
        stand_in_layer: Path) -> None:
    stack = bare_stack()
    warehouse = BucketPrefix(bucket=bucket(stack, "acme-lake"), prefix="warehouse/")
    made = pipeline(stack, "Sales", reader(stack, "Fn", stand_in_layer), "acme-landing/sales/",
                    "acme-results/sales/")
    made.add_workflow(PipelineWorkflowProps(table_locations=[warehouse],
                                            glue_tables=["db.orders", "db.items"]))
    synth = _Synth(stack)
    function = role_statements(synth, made.props.function.role)
    for key in ("acme-lake/warehouse/db/orders/metadata/v3.metadata.json",
                "acme-lake/warehouse/db/orders/data/p=1/f.parquet"):
        assert allows(function, "s3:GetObject", S3 + key, OWNER), key
    assert allows(function, "s3:ListBucket", S3 + "acme-lake",
                  {**OWNER, "s3:prefix": "warehouse/db/orders/metadata/v9.metadata.json"})
    assert not allows(function, "s3:GetObject", S3 + "acme-lake/other/f.parquet", OWNER)
    assert not allows(function, "s3:PutObject", S3 + "acme-lake/warehouse/x", OWNER)
    glue = "arn:aws:glue:<token>:123456789012:"
    region = {"Ref": "AWS::Region"}
    [statement] = [s for s in function if "glue" in str(s["Action"])]
    assert statement["Action"] == "glue:GetTable"
    assert len(statement["Resource"]) == 4  # the catalog, the database, two tables
    rendered = [str(r).replace(str(region), "<token>") for r in statement["Resource"]]
    assert set(rendered) == {f"{glue}catalog", f"{glue}database/db", f"{glue}table/db/orders",
                             f"{glue}table/db/items"}
    machine = role_statements(synth, made.workflow.state_machine.role)  # type: ignore[union-attr]
    assert allows(machine, "s3:GetObject", S3 + "acme-results/sales/_partials/r/items.json",
                  OWNER)
    assert not allows(machine, "s3:GetObject", S3 + "acme-lake/warehouse/x", OWNER)
    report = AwsSolutionsChecks().validate_scope(stack)
    assert [(v.rule_name, [r.template_path for r in v.violating_resources])
            for v in report.violations] == []


def test_a_pipeline_without_tables_grants_its_function_no_table(stand_in_layer: Path) -> None:
    stack, made = table_pipeline(stand_in_layer)
    function = role_statements(_Synth(stack), made.props.function.role)
    assert not [s for s in function if "glue" in str(s["Action"])]
    assert not allows(function, "s3:GetObject", S3 + "acme-lake/warehouse/x", OWNER)


@pytest.mark.parametrize(("props", "message"), [
    ({"glue_tables": ["orders"]}, "not 'database.table'"),
    ({"glue_tables": ["db.Orders*"]}, "not 'database.table'"),
    ({"table_locations": "no-slash"}, "must be a folder"),
])
def test_table_settings_are_checked(stand_in_layer: Path, props: dict[str, Any],
                                    message: str) -> None:
    stack = bare_stack()
    if props.get("table_locations") == "no-slash":
        props = {"table_locations": [BucketPrefix(bucket=bucket(stack, "acme-lake"),
                                                  prefix="warehouse")]}
    made = pipeline(stack, "Sales", reader(stack, "Fn", stand_in_layer), "acme-landing/sales/",
                    "acme-results/sales/")
    with pytest.raises(SettingsError, match=message):
        made.add_workflow(PipelineWorkflowProps(**props))


def test_a_table_location_is_guarded_as_a_read_location(stand_in_layer: Path) -> None:
    """No pipeline of the stack may write into a warehouse its workflow reads."""
    from s3slice_cdk import PipelineConflictError

    stack = bare_stack()
    function = reader(stack, "Fn", stand_in_layer)
    made = pipeline(stack, "Sales", function, "acme-landing/sales/", "acme-results/sales/")
    made.add_workflow(PipelineWorkflowProps(table_locations=[
        BucketPrefix(bucket=bucket(stack, "acme-lake"), prefix="warehouse/")]))
    with pytest.raises(PipelineConflictError):
        pipeline(stack, "Into", function, "acme-landing/other/", "acme-lake/warehouse/out/")
