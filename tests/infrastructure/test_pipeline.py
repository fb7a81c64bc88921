"""The construct library's pipelines: one construct in a bare stack, its rule and the props
it refuses, a function's settings and layer, a pipeline's workflow and its guard (a stack
of three in ``test_three_pipelines.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from s3slice_cdk import (
    FunctionSettings,
    Pipeline,
    PipelineConflictError,
    PipelineProps,
    PipelineWorkflowProps,
    SettingsError,
)
from tests.infrastructure.pipelines import (
    QUERIES,
    bucket,
    grants_of,
    pipeline,
    reader,
    readers,
    resources,
)
from tests.infrastructure.support import bare_stack, state_machine_definition

pytestmark = pytest.mark.infrastructure


# --------------------------------------------------------------------------- one pipeline
def test_a_pipeline_in_a_bare_stack(stand_in_layer: Path) -> None:
    stack = bare_stack()
    function = reader(stack, "Reader", stand_in_layer)
    pipeline(stack, "Sales", function, "acme-landing/sales/", "acme-results/sales/",
             query=QUERIES[0], source_suffixes=(".parquet",))
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::SQS::Queue", 2)
    template.resource_count_is("AWS::Events::Rule", 1)
    template.resource_count_is("AWS::Lambda::EventSourceMapping", 1)
    # DeadLetters, and the function's Errors and Throttles (issue 38).
    template.resource_count_is("AWS::CloudWatch::Alarm", 3)
    template.has_resource_properties("AWS::Events::Rule", {
        "EventPattern": {
            "source": ["aws.s3"], "detail-type": ["Object Created"],
            "detail": {"bucket": {"name": ["acme-landing"]},
                       "object": {"key": [{"wildcard": "sales/*.parquet"}]}}},
        "Targets": [Match.object_like({
            "DeadLetterConfig": Match.any_value(),
            "InputTransformer": Match.object_like({
                "InputPathsMap": {"detail-type": "$.detail-type", "id": "$.id",
                                  "time": "$.time", "detail": "$.detail"}})})]})
    template.has_resource_properties("AWS::Lambda::EventSourceMapping", {
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
        "ScalingConfig": {"MaximumConcurrency": 10}, "BatchSize": 10})
    template.has_resource_properties("AWS::SQS::Queue", {
        "SqsManagedSseEnabled": True, "VisibilityTimeout": 1800,
        "RedrivePolicy": Match.object_like({"maxReceiveCount": 3})})
    # S3 sends to EventBridge: the imported bucket's notifications switched on.
    template.has_resource_properties("Custom::S3BucketNotifications", {
        "BucketName": "acme-landing",
        "NotificationConfiguration": {"EventBridgeConfiguration": {}}})
    # The function has no query or output of its own: the rule's messages carry them.
    [fn] = readers(template.to_json())
    env = fn["Properties"]["Environment"]["Variables"]
    assert not {"S3SLICE_QUERY", "S3SLICE_OUTPUT_URI", "S3SLICE_SOURCE_URIS"} & set(env)


def test_only_the_rule_may_send_to_the_queue(stand_in_layer: Path) -> None:
    stack = bare_stack()
    function = reader(stack, "Reader", stand_in_layer)
    made = pipeline(stack, "Sales", function, "acme-landing/sales/", "acme-results/sales/")
    policies = resources(Template.from_stack(stack).to_json(), "AWS::SQS::QueuePolicy")
    rule_arn = stack.resolve(made.rule.rule_arn)
    senders = [s for p in policies.values() for s in p["Properties"]["PolicyDocument"]
               ["Statement"] if s["Effect"] == "Allow"]
    assert senders, "the rule's send grant"
    for statement in senders:
        assert statement["Principal"] == {"Service": "events.amazonaws.com"}
        assert statement["Condition"] == {"ArnEquals": {"aws:SourceArn": rule_arn}}


@pytest.mark.parametrize(("suffixes", "prefix", "expected"), [
    ((), "in/", {"key": [{"prefix": "in/"}]}),
    ((".csv",), "", {"key": [{"wildcard": "*.csv"}]}),
    ((".csv", ".json"), "in/", {"key": [{"wildcard": "in/*.csv"}, {"wildcard": "in/*.json"}]}),
    ((), "", None),
])
def test_the_rule_matches_the_prefix_and_suffixes(stand_in_layer: Path, suffixes: Any,
                                                  prefix: str, expected: Any) -> None:
    stack = bare_stack()
    function = reader(stack, "Reader", stand_in_layer)
    pipeline(stack, "P", function, f"acme-landing/{prefix}", "acme-results/out/",
             source_suffixes=suffixes)
    [rule] = resources(Template.from_stack(stack).to_json(), "AWS::Events::Rule").values()
    assert rule["Properties"]["EventPattern"]["detail"].get("object") == expected


@pytest.mark.parametrize(("props", "match"), [
    ({"output_prefix": "out"}, "must end with '/'"),
    ({"output_prefix": ""}, "whole bucket"),
    ({"source_prefix": "in/*/"}, "contains"),
    ({"query": {"nope": 1}}, "unknown keys"),
    ({"query": {"filter": "a<b>c"}}, "placeholder"),
    ({"output_format": "xml"}, "output_format"),
    ({"max_concurrency": 1}, "max_concurrency"),
])
def test_bad_props_are_refused(stand_in_layer: Path, props: dict[str, Any],
                               match: str) -> None:
    stack = bare_stack()
    function = reader(stack, "Reader", stand_in_layer)
    base: dict[str, Any] = {"function": function,
                            "source_bucket": bucket(stack, "acme-landing"),
                            "source_prefix": "in/",
                            "output_bucket": bucket(stack, "acme-results"),
                            "output_prefix": "out/"}
    with pytest.raises(SettingsError, match=match):
        Pipeline(stack, "P", props=PipelineProps(**{**base, **props}))


def test_function_settings_are_typed_environment(stand_in_layer: Path) -> None:
    stack = bare_stack()
    reader(stack, "Reader", stand_in_layer, query={"columns": ["a"]},
           output_uri="s3://acme-results/out/",
           settings=FunctionSettings(strategy="ranges", read_ahead_mb=96,
                                     request_timeout_s=12.5))
    [fn] = readers(Template.from_stack(stack).to_json())
    env = fn["Properties"]["Environment"]["Variables"]
    assert {k: env[k] for k in env if k.startswith("S3SLICE_")} == {
        "S3SLICE_QUERY": '{"columns":["a"]}', "S3SLICE_OUTPUT_URI": "s3://acme-results/out/",
        "S3SLICE_OUTPUT_FORMAT": "parquet", "S3SLICE_STRATEGY": "ranges",
        "S3SLICE_READ_AHEAD_MB": "96", "S3SLICE_REQUEST_TIMEOUT_S": "12.5"}


def test_function_settings_name_the_functions_variables() -> None:
    """Every field is a variable the function reads, and its strategies are the function's."""
    import dataclasses
    import typing

    from s3slice.core import settings as _settings
    from s3slice_cdk.tuning import Strategy

    source = Path(_settings.__file__).read_text()
    for field in dataclasses.fields(FunctionSettings):
        assert f"S3SLICE_{field.name.upper()}" in source, field.name
    assert set(typing.get_args(Strategy)) == set(_settings.STRATEGIES)


def test_a_layer_zip_of_another_architecture_is_refused(tmp_path: Path) -> None:
    from s3slice_cdk import LayerNotBuiltError, layer_zip_name

    wrong = tmp_path / layer_zip_name("0.1.0", architecture="x86_64", python_version="3.13")
    wrong.write_bytes(b"PK")
    with pytest.raises(LayerNotBuiltError, match="not built for python3.13 on arm64"):
        reader(bare_stack(), "Reader", wrong)
    right = tmp_path / layer_zip_name("0.1.0", architecture="arm64", python_version="3.13")
    right.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip
    reader(bare_stack(), "Reader", right)


def test_a_pipelines_workflow_in_a_bare_stack(stand_in_layer: Path) -> None:
    stack = bare_stack()
    function = reader(stack, "Reader", stand_in_layer)
    made = pipeline(stack, "Sales", function, "acme-landing/sales/", "acme-results/sales/",
                    query=QUERIES[1])
    made.add_workflow(PipelineWorkflowProps(items_per_batch=7))
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::StepFunctions::StateMachine", 1)
    template.resource_count_is("AWS::CloudWatch::Alarm", 4)  # + the function's two
    definition = state_machine_definition(template.to_json())
    defaults = definition["States"]["Defaults"]["Parameters"]["defaults"]
    assert defaults["bucket"] == "acme-landing"
    assert defaults["prefix"] == "sales/"
    assert defaults["query"] == QUERIES[1]
    assert defaults["output"] == {"uri": "s3://acme-results/sales/", "format": "parquet"}
    machine = grants_of(template.to_json(), "SalesWorkflowStateMachineRole")
    assert machine["s3:PutObject"] == {json.dumps({"Fn::Join": ["", [
        "arn:", {"Ref": "AWS::Partition"}, ":s3:::acme-results/workflow-results/Sales/*"]]},
        sort_keys=True)}
    assert "s3:GetObject" in machine and "s3:DeleteObject" not in machine
    listing = [(name, s["Condition"]["StringLike"]["s3:prefix"])
               for name, p in resources(template.to_json(), "AWS::IAM::Policy").items()
               for s in p["Properties"]["PolicyDocument"]["Statement"]
               if s["Action"] == "s3:ListBucket"]
    # The state machine lists only the source prefix; the function its partials too.
    assert [prefixes for name, prefixes in listing if name.startswith("SalesWorkflow")] == [
        ["sales/*"]]
    assert sorted(prefixes for name, prefixes in listing if name.startswith("Reader")) == [
        ["sales/*"], ["sales/_partials/*", "sales/*/_partials/*"]]
    with pytest.raises(SettingsError, match="added already"):
        made.add_workflow()


def test_a_workflows_results_are_guarded(stand_in_layer: Path) -> None:
    stack = bare_stack()
    function = reader(stack, "Reader", stand_in_layer)
    made = pipeline(stack, "Sales", function, "acme-landing/sales/", "acme-results/sales/")
    pipeline(stack, "Other", function, "acme-results/incoming/", "acme-results/other/")
    with pytest.raises(PipelineConflictError, match="watches"):
        made.add_workflow(PipelineWorkflowProps(results_prefix="incoming/runs/"))
