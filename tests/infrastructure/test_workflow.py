"""The Workflow construct in a bare stack: the Distributed Map's definition and role."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import Duration, Stack
from aws_cdk.assertions import Template

from s3slice_cdk.service_errors import load_error_types
from s3slice_cdk.workflow import LAMBDA_RETRYABLE_ERRORS, Workflow
from tests.infrastructure.support import REPO_DIR, state_machine_definition
from tests.infrastructure.workflow_construct import FUNCTION_ARN, build, task_state

pytestmark = pytest.mark.infrastructure


@pytest.fixture(scope="module")
def default() -> tuple[Workflow, Template]:
    return build()


@pytest.fixture(scope="module")
def definition(default: tuple[Workflow, Template]) -> dict[str, Any]:
    return state_machine_definition(default[1].to_json())


@pytest.fixture(scope="module")
def distributed_map(definition: dict[str, Any]) -> dict[str, Any]:
    state = definition["States"]["ProcessObjects"]
    assert state["Type"] == "Map"
    assert isinstance(state, dict)
    return state


def test_input_defaults_come_from_the_settings(definition: dict[str, Any]) -> None:
    assert definition["StartAt"] == "Defaults"
    defaults = definition["States"]["Defaults"]
    assert defaults["Type"] == "Pass"
    assert defaults["Parameters"] == {
        "defaults": {"bucket": "acme-in", "prefix": "incoming/", "query": {"columns": ["a"]},
                     "output": {"uri": "s3://acme-out/results/", "format": "parquet"},
                     "toleratedFailurePercentage": 5},
        "input.$": "$",
    }
    merge = definition["States"]["ApplyDefaults"]
    assert merge["Parameters"] == {"merged.$": "States.JsonMerge($.defaults, $.input, false)"}
    assert merge["OutputPath"] == "$.merged"
    assert merge["Next"] == "Source"  # then Check, for a prefix (test_table_workflow.py)


def test_the_check_step_runs_before_the_map(definition: dict[str, Any],
                                            distributed_map: dict[str, Any]) -> None:
    """The function says whether the query combines objects, or refuses one that cannot
    be split exactly with a typed error (caught: the execution fails, no batch runs)."""
    check = definition["States"]["Check"]
    assert check["Type"] == "Task"
    assert check["Resource"] == FUNCTION_ARN
    assert check["Parameters"] == {"Check": {"query.$": "$.query", "output.$": "$.output"}}
    assert check["ResultSelector"] == {"combines.$": "$.combines"}
    assert check["ResultPath"] == "$.check"
    assert check["Next"] == "Tolerance"
    # the batches' Retry, and their Catch by error name
    batch = task_state(distributed_map)
    assert check["Retry"] == batch["Retry"]
    (catch,) = check["Catch"]
    (batch_catch,) = batch["Catch"]
    assert catch["ErrorEquals"] == batch_catch["ErrorEquals"]
    assert "QueryError" in catch["ErrorEquals"]
    assert catch["ResultPath"] == "$.failure"
    refused = definition["States"][catch["Next"]]
    assert refused["Type"] == "Fail"
    assert (refused["ErrorPath"], refused["CausePath"]) == ("$.failure.Error",
                                                            "$.failure.Cause")
    # nothing reaches the map but through the check
    reaching = {name for name, state in definition["States"].items()
                if "ProcessObjects" in (state.get("Next"), state.get("Default"),
                                        *(c["Next"] for c in state.get("Choices", [])))}
    assert reaching == {"Tolerance", "ToleratesNoFailedBatch"}


def test_a_combining_query_tolerates_no_failed_batch(definition: dict[str, Any],
                                                     distributed_map: dict[str, Any]) -> None:
    """The map's tolerance is the input's toleratedFailurePercentage (default the
    setting), overwritten with 0 when the check says the query combines objects."""
    tolerance = definition["States"]["Tolerance"]
    assert tolerance["Type"] == "Choice"
    (choice,) = tolerance["Choices"]
    assert choice == {"Variable": "$.check.combines", "BooleanEquals": True,
                      "Next": "ToleratesNoFailedBatch"}
    assert tolerance["Default"] == "ProcessObjects"
    none = definition["States"]["ToleratesNoFailedBatch"]
    assert none["Type"] == "Pass"
    assert none["Result"] == 0
    assert none["ResultPath"] == distributed_map["ToleratedFailurePercentagePath"]
    assert none["Next"] == "ProcessObjects"
    assert definition["States"]["Defaults"]["Parameters"]["defaults"][
        "toleratedFailurePercentage"] == 5


def test_the_events_carry_the_functions_fields(definition: dict[str, Any],
                                              distributed_map: dict[str, Any]) -> None:
    """Each event the workflow sends names exactly the fields the function's contract
    (``s3slice.core.contract``) gives for it."""
    from s3slice.core import contract

    def fields(parameters: dict[str, Any]) -> set[str]:
        assert all(key.endswith(".$") for key in parameters)
        return {key.removesuffix(".$") for key in parameters}

    assert fields(distributed_map["ItemBatcher"]["BatchInput"]) == contract.BATCH_INPUT_FIELDS
    assert fields(definition["States"]["Check"]["Parameters"]["Check"]) == (
        contract.CHECK_FIELDS)
    assert fields(definition["States"]["Reduce"]["Parameters"]["Reduce"]) == (
        contract.REDUCE_FIELDS)


def test_the_sample_check_event_is_what_the_workflow_sends(
        definition: dict[str, Any]) -> None:
    """events/sfn-check.json: the Check state's parameters, its paths resolved; the
    handler answers it."""
    from s3slice.cli.invoke import LambdaContext
    from s3slice.handler import lambda_handler

    sample = json.loads((REPO_DIR / "events" / "sfn-check.json").read_text())
    parameters = definition["States"]["Check"]["Parameters"]["Check"]
    assert set(sample) == {"Check"}
    assert {f"{k}.$" for k in sample["Check"]} == set(parameters)
    assert lambda_handler(sample, LambdaContext()) == {"status": "ok", "combines": True}


def test_lists_objects_under_the_input_prefix(distributed_map: dict[str, Any]) -> None:
    assert distributed_map["ItemProcessor"]["ProcessorConfig"] == {
        "Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"}
    reader = distributed_map["ItemReader"]
    assert reader["Resource"] == "arn:<token>:states:::s3:listObjectsV2"
    assert reader["Parameters"] == {"Bucket.$": "$.bucket", "Prefix.$": "$.prefix"}


def test_batches_carry_query_output_bucket_and_run(distributed_map: dict[str, Any]) -> None:
    assert distributed_map["ItemBatcher"] == {
        "MaxItemsPerBatch": 10,
        "BatchInput": {"query.$": "$.query", "output.$": "$.output", "bucket.$": "$.bucket",
                       "run.$": "$$.Execution.Name"},
    }
    assert distributed_map["MaxConcurrency"] == 100
    # per execution: the input's toleratedFailurePercentage, by default the setting (5)
    assert distributed_map["ToleratedFailurePercentagePath"] == "$.toleratedFailurePercentage"
    assert "ToleratedFailurePercentage" not in distributed_map
    assert distributed_map["Label"] == "s3slice"
    # the state's input goes on to the reduce, the map's output beside it
    assert distributed_map["ResultPath"] == "$.map"
    assert distributed_map["Next"] == "CountBatches"


def test_the_map_is_followed_by_counting_its_batches_and_the_reduce(
        definition: dict[str, Any]) -> None:
    count = definition["States"]["CountBatches"]
    assert count["Type"] == "Task"
    assert count["Resource"] == "arn:<token>:states:::aws-sdk:sfn:describeMapRun"
    assert count["Parameters"] == {"MapRunArn.$": "$.map.MapRunArn"}
    # one child execution per batch, failed ones included
    assert count["ResultSelector"] == {"batches.$": "$.ExecutionCounts.Total"}
    assert count["ResultPath"] == "$.count"
    assert count["Next"] == "Reduce"
    (retrier,) = count["Retry"]
    assert retrier["ErrorEquals"] == ["Sfn.SfnException", "Sfn.ThrottlingException"]
    assert "Catch" not in count

    reduce = definition["States"]["Reduce"]
    assert reduce["Type"] == "Task"
    assert reduce["Resource"] == FUNCTION_ARN
    assert reduce["Parameters"] == {"Reduce": {
        "run.$": "$$.Execution.Name", "query.$": "$.query", "output.$": "$.output",
        "batches.$": "$.count.batches"}}
    assert reduce["ResultPath"] == "$.reduce"
    assert reduce["End"] is True


def test_the_reduce_keeps_the_batches_retries_and_catches(
        definition: dict[str, Any], distributed_map: dict[str, Any]) -> None:
    batch = task_state(distributed_map)
    reduce = definition["States"]["Reduce"]
    assert reduce["Retry"] == batch["Retry"]
    (catch,) = reduce["Catch"]
    (batch_catch,) = batch["Catch"]
    assert catch["ErrorEquals"] == batch_catch["ErrorEquals"]
    assert catch["ResultPath"] == "$.failure"
    failure = definition["States"][catch["Next"]]
    assert failure["Type"] == "Fail"
    assert (failure["ErrorPath"], failure["CausePath"]) == ("$.failure.Error",
                                                            "$.failure.Cause")


def test_the_sample_reduce_event_is_what_the_workflow_sends(
        definition: dict[str, Any]) -> None:
    """events/sfn-reduce.json: the Reduce state's parameters, its paths resolved."""
    sample = json.loads((REPO_DIR / "events" / "sfn-reduce.json").read_text())
    parameters = definition["States"]["Reduce"]["Parameters"]["Reduce"]
    assert set(sample) == {"Reduce"}
    assert {f"{k}.$" for k in sample["Reduce"]} == set(parameters)
    assert isinstance(sample["Reduce"]["batches"], int)
    assert isinstance(sample["Reduce"]["run"], str)
    assert set(sample["Reduce"]["output"]) == {"uri", "format"}


def test_results_are_written_to_s3(distributed_map: dict[str, Any]) -> None:
    writer = distributed_map["ResultWriter"]
    assert writer["Resource"] == "arn:<token>:states:::s3:putObject"
    assert writer["Parameters"] == {"Bucket": "acme-out", "Prefix": "workflow-results/"}


def test_retries_and_catches_the_error_contract(distributed_map: dict[str, Any]) -> None:
    from s3slice import error_types  # the function package itself, as Lambda runs it

    retryable, permanent = error_types(retryable=True), error_types(retryable=False)
    processor = distributed_map["ItemProcessor"]
    task = task_state(distributed_map)
    assert task["Resource"] == FUNCTION_ARN  # the payload is the batch, the output the response
    retried = [error for retrier in task["Retry"] for error in retrier["ErrorEquals"]]
    assert retried == [*LAMBDA_RETRYABLE_ERRORS, "S3SliceThrottledError",
                       *(e for e in retryable if e != "S3SliceThrottledError")]
    assert {"Lambda.TooManyRequestsException", "Lambda.ServiceException",
            "Lambda.AWSLambdaException", "Lambda.SdkClientException"} <= set(retried)
    for retrier in task["Retry"]:
        assert retrier["BackoffRate"] == 2
        assert retrier["MaxAttempts"] >= 3
        assert retrier["JitterStrategy"] == "FULL"
    (catch,) = task["Catch"]
    # Step Functions matches errorType by exact name, never by base class: every concrete
    # permanent error is listed, not just the bases of the tree.
    assert catch["ErrorEquals"] == list(permanent)
    assert {"UnknownColumnError", "FilterSyntaxError", "ForbiddenQueryError",
            "ObjectNotFoundError", "AccessDeniedError", "ObjectFormatError",
            "ObjectChangedError", "ResultTooLargeError", "OutputError", "QueryError",
            "ObjectError", "RequestError", "TimeoutBudgetError"} <= set(catch["ErrorEquals"])
    assert not set(retried) & set(catch["ErrorEquals"])
    failure = processor["States"][catch["Next"]]
    assert failure["Type"] == "Fail"
    assert (failure["ErrorPath"], failure["CausePath"]) == ("$.failure.Error",
                                                            "$.failure.Cause")
    assert catch["ResultPath"] == "$.failure"


def test_every_service_error_type_is_retried_or_caught(
        distributed_map: dict[str, Any]) -> None:
    """Each name ``s3slice.error_types`` gives is in exactly the right list, and each
    concrete class of the function's error tree has its name there."""
    import s3slice
    from s3slice import error_types

    task = task_state(distributed_map)
    retried = {error for retrier in task["Retry"] for error in retrier["ErrorEquals"]}
    (catch,) = task["Catch"]
    caught = set(catch["ErrorEquals"])
    for name in error_types(retryable=True):
        assert name in retried, name
        assert name not in caught, name
    for name in error_types(retryable=False):
        assert name in caught, name
        assert name not in retried, name
    # ... and error_types itself misses none of the tree
    tree: list[type[s3slice.S3SliceError]] = [s3slice.S3SliceError]
    classes = set()
    while tree:
        cls = tree.pop()
        tree.extend(cls.__subclasses__())
        classes.add(cls)
    named = {c.__name__ for c in classes} - {"S3SliceError"}
    assert named == set(error_types(retryable=True)) | set(error_types(retryable=False))
    assert named <= retried | caught
    # the CDK app reads the same file by path (it does not import the package)
    assert load_error_types() == (error_types(retryable=True), error_types(retryable=False))


def test_executions_time_out(definition: dict[str, Any]) -> None:
    assert definition["TimeoutSeconds"] == 24 * 3600


def test_logging_and_tracing(default: tuple[Workflow, Template]) -> None:
    workflow, template = default
    log_group_id = Stack.of(workflow).get_logical_id(workflow.log_group.node.default_child)
    template.has_resource_properties("AWS::StepFunctions::StateMachine", {
        "StateMachineType": "STANDARD",
        "TracingConfiguration": {"Enabled": True},
        "LoggingConfiguration": {
            "Level": "ALL", "IncludeExecutionData": False,
            "Destinations": [{"CloudWatchLogsLogGroup": {
                "LogGroupArn": {"Fn::GetAtt": [log_group_id, "Arn"]}}}],
        },
    })
    template.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 30})


def test_grants_itself_no_s3_access(default: tuple[Workflow, Template]) -> None:
    """Listing sources and writing results are the stack's grants, scoped to prefixes."""
    _, template = default
    actions = set()
    for policy in template.find_resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            action = statement["Action"]
            actions.update([action] if isinstance(action, str) else action)
    assert not {a for a in actions if a.startswith("s3:")}
    assert {"lambda:InvokeFunction", "states:StartExecution", "states:DescribeExecution",
            "states:StopExecution", "states:DescribeMapRun"} <= actions


def test_describes_only_its_own_map_runs(default: tuple[Workflow, Template]) -> None:
    workflow, template = default
    machine = Stack.of(workflow).get_logical_id(workflow.state_machine.node.default_child)
    statements = [statement
                  for policy in template.find_resources("AWS::IAM::Policy").values()
                  for statement in policy["Properties"]["PolicyDocument"]["Statement"]
                  if statement["Action"] == "states:DescribeMapRun"]
    name = {"Fn::Select": [6, {"Fn::Split": [":", {"Ref": machine}]}]}

    def map_runs(label: str) -> dict[str, Any]:
        return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":states:",
                                  {"Ref": "AWS::Region"}, ":", {"Ref": "AWS::AccountId"},
                                  ":mapRun:", name, f"/{label}:*"]]}
    (statement,) = statements
    assert statement["Effect"] == "Allow"
    # the prefix map's and the table map's (test_table_workflow.py)
    assert sorted(statement["Resource"], key=json.dumps) == sorted(
        [map_runs("s3slice"), map_runs("s3slice-table")], key=json.dumps)


def test_settings_reach_the_definition() -> None:
    _, template = build(max_concurrency=2500, items_per_batch=50,
                        tolerated_failure_percentage=0, default_output_format="json",
                        results_prefix="runs/", timeout=Duration.minutes(90))
    definition = state_machine_definition(template.to_json())
    assert definition["TimeoutSeconds"] == 90 * 60
    state = definition["States"]["ProcessObjects"]
    assert state["MaxConcurrency"] == 2500
    assert state["ItemBatcher"]["MaxItemsPerBatch"] == 50
    assert definition["States"]["Defaults"]["Parameters"]["defaults"][
        "toleratedFailurePercentage"] == 0
    assert state["ResultWriter"]["Parameters"]["Prefix"] == "runs/"
    assert definition["States"]["Defaults"]["Parameters"]["defaults"]["output"]["format"] == (
        "json")
