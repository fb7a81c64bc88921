"""``snapStart``: SnapStart on published versions, one version and the alias ``live``, and
every trigger on the alias; with the setting off, the template is today's, unchanged.

cdk-nag and cfn-lint run on the same stack in test_nag.py and test_cfn_lint.py
(``snap_start_stack``); the settings' refusals are in test_settings.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Annotations, Match

from s3slice_cdk.function import LIVE_ALIAS, SNAPSTART_PUBLISH_WARNING
from tests.infrastructure.support import (
    IMPORTED_CONTEXT,
    SNAP_START_CONTEXT,
    Synthesized,
    state_machine_definition,
    synthesize,
)

pytestmark = pytest.mark.infrastructure

#: The workflow's states that invoke the function.
LAMBDA_TASKS = ("Check", "QueryBatch", "Reduce")


# ----------------------------------------------------------------------------- helpers
def only(synth: Synthesized, resource_type: str) -> tuple[str, dict[str, Any]]:
    (found,) = synth.resources(resource_type).items()
    return found


def function_id(synth: Synthesized) -> str:
    return synth.logical_id(synth.stack.read_function.function)


def alias_id(synth: Synthesized) -> str:
    alias = synth.stack.read_function.alias
    assert alias is not None
    return synth.logical_id(alias)


def references(value: Any, logical_id: str) -> bool:
    """Whether a template value refers to ``logical_id`` (``Ref`` or ``Fn::GetAtt``)."""
    text = json.dumps(value)
    return (json.dumps({"Ref": logical_id}) in text
            or f'"Fn::GetAtt": ["{logical_id}"' in text)


def referrers(synth: Synthesized, logical_id: str) -> Iterator[tuple[str, str]]:
    """(section/logical id, type) of every resource property and output that refers to
    ``logical_id`` (its own resource and ``DependsOn`` aside)."""
    for name, resource in synth.json["Resources"].items():
        if name != logical_id and references(resource.get("Properties", {}), logical_id):
            yield f"Resources/{name}", resource["Type"]
    for name, output in synth.json.get("Outputs", {}).items():
        if references(output, logical_id):
            yield f"Outputs/{name}", "Output"


def without_code_hash(synth: Synthesized) -> Any:
    """The template with the function code asset's hash (the S3 key, the asset path) as a
    placeholder: ``functions/`` may change between two synths of one test session (it is
    the function's code), which is no change of the stack's."""
    function = synth.json["Resources"][function_id(synth)]["Properties"]
    digest = str(function["Code"]["S3Key"]).removesuffix(".zip")
    assert len(digest) == 64, digest
    return json.loads(json.dumps(synth.json).replace(digest, "<function code>"))


def qualified_name(alias: str) -> dict[str, Any]:
    """``<function name>:live`` as CDK renders an alias's name from the alias's ARN."""
    return {"Fn::Join": ["", [{"Fn::Select": [6, {"Fn::Split": [":", {"Ref": alias}]}]},
                              f":{LIVE_ALIAS}"]]}


def task_resources(template_json: dict[str, Any]) -> dict[str, Any]:
    """The raw ``Resource`` token of each state of the state machine's definition that
    has one, by state name (the definition is an ``Fn::Join`` of JSON text and tokens)."""
    (machine,) = [r for r in template_json["Resources"].values()
                  if r["Type"] == "AWS::StepFunctions::StateMachine"]
    _, parts = machine["Properties"]["DefinitionString"]["Fn::Join"]
    found: dict[str, Any] = {}
    text = ""
    for part in parts:
        if isinstance(part, str):
            text += part
            continue
        if text.endswith('"Resource":"'):
            # the state's name is the last "Name":{ opened before this point
            state = _enclosing_state(text)
            found[state] = part
        text += "<token>"
    return found


def _enclosing_state(text: str) -> str:
    """The name of the state whose object ``text`` (a prefix of the definition) is in."""
    depth, i = 0, len(text) - 1
    while i >= 0:
        char = text[i]
        if char == "}":
            depth += 1
        elif char == "{":
            if depth == 0:
                before = text[:i].rstrip()
                assert before.endswith(":"), before[-40:]
                name_end = before.rstrip(":").rstrip()
                assert name_end.endswith('"')
                start = name_end[:-1].rfind('"')
                return name_end[start + 1:-1]
            depth -= 1
        i -= 1
    raise AssertionError("no enclosing state")


# ----------------------------------------------------------------------------- off
def test_off_is_todays_template(default_stack: Synthesized, stand_in_layer: Path,
                                tmp_path: Path) -> None:
    """``snapStart=false`` synthesizes exactly the template of no setting at all: no
    SnapStart, no version, no alias, every trigger on the function as before."""
    off = synthesize({"snapStart": "false", "layerDir": str(stand_in_layer)}, tmp_path)
    assert without_code_hash(off) == without_code_hash(default_stack)
    assert not off.stack.settings.snap_start
    assert off.stack.read_function.alias is None
    assert off.stack.read_function.invoked is off.stack.read_function.function
    assert not off.resources("AWS::Lambda::Version")
    assert not off.resources("AWS::Lambda::Alias")
    (function,) = [r for n, r in off.resources("AWS::Lambda::Function").items()
                   if n == function_id(off)]
    assert "SnapStart" not in function["Properties"]


# ----------------------------------------------------------------------------- on
def test_function_snapshots_published_versions(snap_start_stack: Synthesized) -> None:
    function = snap_start_stack.json["Resources"][function_id(snap_start_stack)]
    assert function["Properties"]["SnapStart"] == {"ApplyOn": "PublishedVersions"}
    assert function["Properties"]["EphemeralStorage"] == {"Size": 512}
    assert function["Properties"]["Runtime"] == "python3.13"


def test_one_version_and_the_live_alias_on_it(snap_start_stack: Synthesized) -> None:
    """One published version (deleted with its snapshot when a new one replaces it) and
    the alias ``live`` pointing at it."""
    function = function_id(snap_start_stack)
    version_id, version = only(snap_start_stack, "AWS::Lambda::Version")
    assert version["Properties"] == {"FunctionName": {"Ref": function}}
    assert version["DeletionPolicy"] == version["UpdateReplacePolicy"] == "Delete"
    assert version_id.startswith("ReaderFunctionCurrentVersion")  # current_version
    alias_name, alias = only(snap_start_stack, "AWS::Lambda::Alias")
    assert alias_name == alias_id(snap_start_stack)
    properties = dict(alias["Properties"])
    assert "SnapStart" in properties.pop("Description")
    assert properties == {"Name": LIVE_ALIAS, "FunctionName": {"Ref": function},
                          "FunctionVersion": {"Fn::GetAtt": [version_id, "Version"]}}


def test_queue_is_consumed_through_the_alias(snap_start_stack: Synthesized) -> None:
    _, mapping = only(snap_start_stack, "AWS::Lambda::EventSourceMapping")
    assert mapping["Properties"]["FunctionName"] == qualified_name(alias_id(snap_start_stack))
    assert mapping["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["Properties"]["ScalingConfig"] == {"MaximumConcurrency": 10}


def test_workflow_invokes_the_alias(snap_start_stack: Synthesized) -> None:
    """Check, every map batch and Reduce invoke the alias; the definition is otherwise the
    default one."""
    resources = task_resources(dict(snap_start_stack.json))
    alias = {"Ref": alias_id(snap_start_stack)}
    assert [resources[state] for state in LAMBDA_TASKS] == [alias] * len(LAMBDA_TASKS)
    assert not [state for state, token in resources.items()
                if references(token, function_id(snap_start_stack))]
    definition = state_machine_definition(snap_start_stack.json)
    assert definition["States"]["ProcessObjects"]["ItemProcessor"]["StartAt"] == "QueryBatch"


def test_workflow_definition_is_unchanged_but_for_the_alias(
        default_stack: Synthesized, snap_start_stack: Synthesized) -> None:
    assert state_machine_definition(snap_start_stack.json) == state_machine_definition(
        default_stack.json)
    default_resources = task_resources(dict(default_stack.json))
    function = {"Fn::GetAtt": [function_id(default_stack), "Arn"]}
    assert [default_resources[state] for state in LAMBDA_TASKS] == [function] * len(
        LAMBDA_TASKS)


def test_state_machine_may_invoke_the_alias_only(snap_start_stack: Synthesized) -> None:
    """The grant names the alias's ARN: not the unqualified function, not ``function:*``."""
    invoke = [statement
              for policy in snap_start_stack.resources("AWS::IAM::Policy").values()
              for statement in policy["Properties"]["PolicyDocument"]["Statement"]
              if "lambda:InvokeFunction" in json.dumps(statement["Action"])]
    assert invoke == [{"Action": "lambda:InvokeFunction", "Effect": "Allow",
                       "Resource": {"Ref": alias_id(snap_start_stack)}}]
    assert not snap_start_stack.resources("AWS::Lambda::Permission")


def test_no_trigger_uses_the_unqualified_function(snap_start_stack: Synthesized) -> None:
    """What still names the function itself: its version and alias, and the alarms,
    whose metrics (dimension FunctionName alone) count the alias's invocations too; the
    FunctionName output is the alias's qualified name."""
    function = function_id(snap_start_stack)
    found = dict(referrers(snap_start_stack, function))
    assert set(found.values()) == {"AWS::Lambda::Version", "AWS::Lambda::Alias",
                                   "AWS::CloudWatch::Alarm"}, found
    for name, resource_type in found.items():
        if resource_type == "AWS::CloudWatch::Alarm":
            alarm = snap_start_stack.json["Resources"][name.split("/")[1]]["Properties"]
            assert alarm["Dimensions"] == [{"Name": "FunctionName",
                                            "Value": {"Ref": function}}]
    outputs = snap_start_stack.json["Outputs"]
    assert outputs["FunctionName"] == {"Value": qualified_name(alias_id(snap_start_stack))}
    assert outputs["FunctionAliasArn"] == {"Value": {"Ref": alias_id(snap_start_stack)}}
    assert set(outputs) == {
        "FunctionName", "FunctionAliasArn", "StateMachineArn", "QueueUrl",
        "DeadLetterQueueUrl", "WatchedUri", "OutputUri", "WorkflowResultsUri",
        "AlarmTopicArn"}


def test_function_role_grants_are_unchanged(default_stack: Synthesized,
                                            snap_start_stack: Synthesized) -> None:
    """The alias runs under the function's role: the same S3, SQS, logs and X-Ray
    statements as without SnapStart."""
    def statements(synth: Synthesized) -> list[Any]:
        role = synth.logical_id(synth.stack.read_function.role)
        return [policy["Properties"]["PolicyDocument"]
                for policy in synth.resources("AWS::IAM::Policy").values()
                if {"Ref": role} in policy["Properties"]["Roles"]]

    assert statements(snap_start_stack) == statements(default_stack)


def test_only_the_expected_resources_are_added(default_stack: Synthesized,
                                               snap_start_stack: Synthesized) -> None:
    def types(synth: Synthesized) -> list[str]:
        return sorted(r["Type"] for r in synth.json["Resources"].values())

    added = list(types(snap_start_stack))
    for resource_type in types(default_stack):
        added.remove(resource_type)
    assert added == ["AWS::Lambda::Alias", "AWS::Lambda::Version"]


def test_cdk_publish_warning_is_acknowledged(snap_start_stack: Synthesized) -> None:
    """CDK warns on every SnapStart function that only published versions get it; this
    stack publishes one, so the warning is acknowledged with that reason."""
    annotations = Annotations.from_stack(snap_start_stack.stack)
    assert annotations.find_warning(
        "*", Match.string_like_regexp(".*SnapStart only supports published.*")) == []
    assert annotations.find_error("*", Match.any_value()) == []
    assert SNAPSTART_PUBLISH_WARNING.startswith("@aws-cdk/aws-lambda:")


def test_on_with_imported_buckets(stand_in_layer: Path, tmp_path: Path) -> None:
    """With every optional setting (x86_64, Python 3.12, reserved concurrency, KMS keys,
    an alarm topic), SnapStart changes the same things and nothing else."""
    synth = synthesize({**IMPORTED_CONTEXT, **SNAP_START_CONTEXT,
                        "layerDir": str(stand_in_layer)}, tmp_path)
    function = synth.json["Resources"][function_id(synth)]["Properties"]
    assert function["SnapStart"] == {"ApplyOn": "PublishedVersions"}
    assert (function["Runtime"], function["Architectures"]) == ("python3.12", ["x86_64"])
    assert function["ReservedConcurrentExecutions"] == 600
    alias = alias_id(synth)
    _, mapping = only(synth, "AWS::Lambda::EventSourceMapping")
    assert mapping["Properties"]["FunctionName"] == qualified_name(alias)
    resources = task_resources(dict(synth.json))
    assert [resources[state] for state in LAMBDA_TASKS] == [{"Ref": alias}] * len(
        LAMBDA_TASKS)
    assert set(dict(referrers(synth, function_id(synth))).values()) == {
        "AWS::Lambda::Version", "AWS::Lambda::Alias", "AWS::CloudWatch::Alarm"}
