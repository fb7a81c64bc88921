"""cdk-nag's AwsSolutions checks: no finding left unacknowledged, every acknowledgment reasoned.

cdk-nag 3 is a CDK policy-validation plugin; its report is read here directly
(``validate_scope``), not through synth's exit code. ``cdk synth`` runs the same plugin
(``Validations.of(app).add_plugins``) and fails on any violation (see test_cli_synth.py).
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Annotations, Match
from cdk_nag import AwsSolutionsChecks

from s3slice_cdk.contract import FUNCTION_CODE_DIR
from s3slice_cdk.function import ReadFunction, ReadFunctionProps
from s3slice_cdk.nag import Acknowledged, WildcardAllowance, acknowledge_wildcards
from tests.infrastructure.support import Synthesized, bare_stack

pytestmark = pytest.mark.infrastructure

STACKS = ["default_stack", "imported_stack", "snap_start_stack"]


def describe(report: cdk.PolicyValidationPluginReport) -> str:
    return "\n".join(
        f"{v.rule_name}: {v.description} at "
        f"{[r.template_path for r in v.violating_resources]}"
        for v in report.violations)


@pytest.fixture(scope="module", params=STACKS)
def checked(request: pytest.FixtureRequest) -> tuple[Synthesized,
                                                     cdk.PolicyValidationPluginReport]:
    synth: Synthesized = request.getfixturevalue(request.param)
    return synth, AwsSolutionsChecks().validate_scope(synth.stack)


def test_no_unacknowledged_findings(
        checked: tuple[Synthesized, cdk.PolicyValidationPluginReport]) -> None:
    _, report = checked
    assert list(report.violations) == [], describe(report)
    assert report.success


def test_no_error_or_nag_annotations(
        checked: tuple[Synthesized, cdk.PolicyValidationPluginReport]) -> None:
    synth, _ = checked
    annotations = Annotations.from_stack(synth.stack)
    assert annotations.find_error("*", Match.any_value()) == []
    assert annotations.find_error("*", Match.string_like_regexp("AwsSolutions-.*")) == []
    assert annotations.find_warning("*", Match.string_like_regexp("AwsSolutions-.*")) == []


def test_every_acknowledgment_has_a_reason(
        checked: tuple[Synthesized, cdk.PolicyValidationPluginReport]) -> None:
    synth, _ = checked
    acknowledged = synth.stack.nag_acknowledgments
    assert acknowledged
    for item in acknowledged:
        assert item.rule.startswith("AwsSolutions-")
        assert len(item.reason) >= 60, item


def rules_by_path(acknowledged: list[Acknowledged]) -> set[tuple[str, str]]:
    """(construct path below the stack, rule without the resource detail)."""
    return {(item.path.split("/", 1)[1], item.rule.split("[", 1)[0] if "IAM5" not in item.rule
             else item.rule) for item in acknowledged}


def test_acknowledged_findings_are_exactly_the_reviewed_ones(
        default_stack: Synthesized) -> None:
    """A new acknowledgment must be added here on purpose, with its reason in nag.py."""
    data = default_stack.logical_id(default_stack.stack.data_bucket)
    function = default_stack.logical_id(default_stack.stack.read_function.function)
    handler = "BucketNotificationsHandler050a0587b7544547bf325f094a3db834"
    execution = ('arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:'
                 '{"Fn::Select":[6,{"Fn::Split":[":",{"Ref":"'
                 + default_stack.logical_id(default_stack.stack.workflow.state_machine)
                 + '"}]}]}')
    map_run = execution.replace(":execution:", ":mapRun:")
    assert rules_by_path(default_stack.stack.nag_acknowledgments) == {
        ("Reader/Function", "AwsSolutions-L1"),
        ("Reader/Role/DefaultPolicy", "AwsSolutions-IAM5[Resource::*]"),
        ("Reader/Role/DefaultPolicy", f"AwsSolutions-IAM5[Resource::<{data}.Arn>/incoming/*]"),
        ("Reader/Role/DefaultPolicy", f"AwsSolutions-IAM5[Resource::<{data}.Arn>/results/*]"),
        ("Reader/Role/DefaultPolicy",
         f"AwsSolutions-IAM5[Resource::<{data}.Arn>/results/_partials/*]"),
        ("Reader/Role/DefaultPolicy",
         f"AwsSolutions-IAM5[Resource::<{data}.Arn>/results/*/_partials/*]"),
        ("Workflow/StateMachine/Role/DefaultPolicy",
         f"AwsSolutions-IAM5[Resource::<{function}.Arn>:*]"),
        ("Workflow/StateMachine/Role/DefaultPolicy", "AwsSolutions-IAM5[Resource::*]"),
        ("Workflow/StateMachine/Role/DefaultPolicy",
         f"AwsSolutions-IAM5[Resource::<{data}.Arn>/workflow-results/*]"),
        # the table path's items (items.json in a run's _partials/ folder)
        ("Workflow/StateMachine/Role/DefaultPolicy",
         f"AwsSolutions-IAM5[Resource::<{data}.Arn>/results/_partials/*]"),
        ("Workflow/StateMachine/Role/DefaultPolicy",
         f"AwsSolutions-IAM5[Resource::<{data}.Arn>/results/*/_partials/*]"),
        ("Workflow/StateMachine/DistributedMapPolicy",
         f"AwsSolutions-IAM5[Resource::{execution}:*]"),
        ("Workflow/StateMachine/DistributedMapPolicy",
         f"AwsSolutions-IAM5[Resource::{execution}/s3slice:*]"),
        ("Workflow/StateMachine/DistributedMapPolicy",
         f"AwsSolutions-IAM5[Resource::{map_run}/s3slice:*]"),
        ("Workflow/StateMachine/DistributedMapPolicy",
         f"AwsSolutions-IAM5[Resource::{execution}/s3slice-table:*]"),
        ("Workflow/StateMachine/DistributedMapPolicy",
         f"AwsSolutions-IAM5[Resource::{map_run}/s3slice-table:*]"),
        (f"{handler}/Role", "AwsSolutions-IAM4"),
        (handler, "AwsSolutions-L1"),
        ("AccessLogs", "AwsSolutions-S1"),
        ("Alerts/Topic", "AwsSolutions-SNS2"),
    }


def test_reasons_state_what_is_granted(default_stack: Synthesized) -> None:
    """The notifications handler's managed policy grants log actions on every log group:
    the acknowledgment says so instead of claiming it covers only the handler's logs."""
    (reason,) = [item.reason for item in default_stack.stack.nag_acknowledgments
                 if item.rule.startswith("AwsSolutions-IAM4")]
    assert "only lets it write its own" not in reason
    assert "every log group" in reason and "'*'" in reason


def test_an_unexpected_wildcard_is_still_a_finding(stand_in_layer: Path) -> None:
    """Acknowledgments are per resource and per action set: a new wildcard grant fails."""
    stack = bare_stack()
    reader = ReadFunction(stack, "Reader", props=ReadFunctionProps(
        code_dir=FUNCTION_CODE_DIR, layer_dir=stand_in_layer, query={},
        output_uri="s3://acme-out/results/"))
    reader.role.add_to_principal_policy(iam.PolicyStatement(
        actions=["s3:GetObject"], resources=["arn:aws:s3:::acme-in/*"]))
    reader.role.add_to_principal_policy(iam.PolicyStatement(
        actions=["s3:DeleteObject"], resources=["arn:aws:s3:::acme-in/incoming/*"]))
    policy = reader.role.node.find_child("DefaultPolicy")
    assert isinstance(policy, iam.Policy)
    log: list[Acknowledged] = []
    acknowledge_wildcards(policy, [
        WildcardAllowance(pattern=r"\*", actions=frozenset(
            {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}), reason="x-ray"),
        WildcardAllowance(pattern=r"arn:aws:s3:::acme-in/incoming/\*",
                          actions=frozenset({"s3:GetObject"}), reason="prefix"),
    ], log)
    assert [item.rule for item in log] == ["AwsSolutions-IAM5[Resource::*]"]
    report = AwsSolutionsChecks().validate_scope(stack)
    found = {v.rule_name for v in report.violations}
    assert "AwsSolutions-IAM5[Resource::arn:aws:s3:::acme-in/*]" in found
    assert "AwsSolutions-IAM5[Resource::arn:aws:s3:::acme-in/incoming/*]" in found
    assert "AwsSolutions-IAM5[Resource::*]" not in found
