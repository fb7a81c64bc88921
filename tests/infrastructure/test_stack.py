"""The composed stack: least-privilege IAM statement by statement, wiring, settings, assets."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Match

from s3slice_app import NAG_OFF_WARNING, build_app, cdk_json_context
from s3slice_cdk.function import LayerNotBuiltError
from s3slice_cdk.settings import SettingsError
from tests.infrastructure.support import (
    CDK_DIR,
    KMS_KEY_ARNS,
    REPO_DIR,
    Synthesized,
    state_machine_definition,
    synthesize,
)

pytestmark = pytest.mark.infrastructure

SQS_CONSUME = ["sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes",
               "sqs:GetQueueUrl", "sqs:ReceiveMessage"]
XRAY_WRITE = ["xray:PutTelemetryRecords", "xray:PutTraceSegments"]
STATES_LOGGING_AND_TRACING = [
    "logs:CreateLogDelivery", "logs:DeleteLogDelivery", "logs:DescribeLogGroups",
    "logs:DescribeResourcePolicies", "logs:GetLogDelivery", "logs:ListLogDeliveries",
    "logs:PutResourcePolicy", "logs:UpdateLogDelivery", "xray:GetSamplingRules",
    "xray:GetSamplingTargets", "xray:PutTelemetryRecords", "xray:PutTraceSegments"]


# ----------------------------------------------------------------------------- helpers
def ids(synth: Synthesized) -> dict[str, str]:
    """Logical ids of the resources the policies refer to."""
    stack = synth.stack
    found = {
        "function": synth.logical_id(stack.read_function.function),
        "function_logs": synth.logical_id(stack.read_function.log_group),
        "function_role": synth.logical_id(stack.read_function.role),
        "queue": synth.logical_id(stack.triggers.queue),
        "dlq": synth.logical_id(stack.triggers.dead_letter_queue),
        "state_machine": synth.logical_id(stack.workflow.state_machine),
        "state_machine_role": synth.logical_id(stack.workflow.state_machine.role),
    }
    if stack.data_bucket is not None:
        found["data"] = synth.logical_id(stack.data_bucket)
    return found


def policy_statements(synth: Synthesized, role_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every policy attached to the role, by logical id, with its statements."""
    return {
        name: policy["Properties"]["PolicyDocument"]["Statement"]
        for name, policy in synth.resources("AWS::IAM::Policy").items()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
    }


def canonical(statements: list[dict[str, Any]]) -> list[str]:
    """Statements as sorted JSON: compared exactly, but regardless of the order of the
    statements and of a statement's actions and resources (IAM gives order no meaning;
    CDK's policy minimization sorts resources by their rendering)."""
    def unordered(statement: dict[str, Any]) -> dict[str, Any]:
        normal = dict(statement)
        for key in ("Action", "Resource"):
            if isinstance(normal.get(key), list):
                normal[key] = sorted(normal[key], key=lambda v: json.dumps(v, sort_keys=True))
        return normal

    return sorted(json.dumps(unordered(s), sort_keys=True) for s in statements)


def get_att(logical_id: str, attribute: str = "Arn") -> dict[str, Any]:
    return {"Fn::GetAtt": [logical_id, attribute]}


def join(*parts: Any) -> dict[str, Any]:
    return {"Fn::Join": ["", list(parts)]}


def s3_arn(rest: str) -> dict[str, Any]:
    """The ARN of an imported bucket (or its objects): arn:${Partition}:s3:::<rest>."""
    return join("arn:", {"Ref": "AWS::Partition"}, f":s3:::{rest}")


ACCOUNT = {"Ref": "AWS::AccountId"}
#: The default stack's S3 statements hold only for buckets of the deploying account.
OWN = {"StringEquals": {"s3:ResourceAccount": ACCOUNT}}
#: The imported stack's, for the deploying account and bucketAccounts.
OWNERS = {"StringEquals": {"s3:ResourceAccount": [ACCOUNT, "210987654321"]}}
#: KMS use only through S3 in the stack's region.
VIA_S3 = {"StringEquals": {"kms:ViaService": join("s3.", {"Ref": "AWS::Region"},
                                                  ".amazonaws.com")}}


# ----------------------------------------------------------------------------- IAM: default
def test_function_role_statements_default(default_stack: Synthesized) -> None:
    i = ids(default_stack)
    policies = policy_statements(default_stack, i["function_role"])
    assert len(policies) == 1
    (statements,) = policies.values()
    assert canonical(statements) == canonical([
        {"Action": ["logs:CreateLogStream", "logs:PutLogEvents"], "Effect": "Allow",
         "Resource": get_att(i["function_logs"])},
        {"Action": XRAY_WRITE, "Effect": "Allow", "Resource": "*"},
        # reads under the watched prefix, and the workflow's partial answers (reduce)
        {"Action": "s3:GetObject", "Effect": "Allow", "Condition": OWN,
         "Resource": [join(get_att(i["data"]), "/incoming/*"),
                      join(get_att(i["data"]), "/results/_partials/*"),
                      join(get_att(i["data"]), "/results/*/_partials/*")]},
        {"Action": "s3:ListBucket", "Effect": "Allow", "Resource": get_att(i["data"]),
         "Condition": {**OWN, "StringLike": {"s3:prefix": ["incoming/*"]}}},
        {"Action": ["s3:AbortMultipartUpload", "s3:DeleteObject", "s3:PutObject"],
         "Effect": "Allow",
         "Condition": OWN, "Resource": join(get_att(i["data"]), "/results/*")},
        # the workflow's partial answers, listed by the reduce step
        {"Action": "s3:ListBucket", "Effect": "Allow", "Resource": get_att(i["data"]),
         "Condition": {**OWN, "StringLike": {
             "s3:prefix": ["results/_partials/*", "results/*/_partials/*"]}}},
        {"Action": SQS_CONSUME, "Effect": "Allow", "Resource": get_att(i["queue"])},
    ])
    default_stack.template.has_resource_properties("AWS::IAM::Role", {
        "AssumeRolePolicyDocument": Match.object_like({"Statement": [Match.object_like(
            {"Principal": {"Service": "lambda.amazonaws.com"}})]}),
        "ManagedPolicyArns": Match.absent(),
    })


def test_state_machine_role_statements_default(default_stack: Synthesized) -> None:
    i = ids(default_stack)
    policies = policy_statements(default_stack, i["state_machine_role"])
    default_policy = next(v for k, v in policies.items() if "DefaultPolicy" in k)
    assert canonical(default_policy) == canonical([
        {"Action": "lambda:InvokeFunction", "Effect": "Allow",
         "Resource": [get_att(i["function"]), join(get_att(i["function"]), ":*")]},
        {"Action": STATES_LOGGING_AND_TRACING, "Effect": "Allow", "Resource": "*"},
        {"Action": "s3:ListBucket", "Effect": "Allow", "Resource": get_att(i["data"]),
         "Condition": {**OWN, "StringLike": {"s3:prefix": ["incoming/*"]}}},
        {"Action": ["s3:AbortMultipartUpload", "s3:GetObject", "s3:ListMultipartUploadParts",
                    "s3:PutObject"], "Effect": "Allow", "Condition": OWN,
         "Resource": join(get_att(i["data"]), "/workflow-results/*")},
        # a table's planned items (the table path's ItemReader), in _partials/ folders only
        {"Action": "s3:GetObject", "Effect": "Allow", "Condition": OWN,
         "Resource": [join(get_att(i["data"]), "/results/_partials/*"),
                      join(get_att(i["data"]), "/results/*/_partials/*")]},
    ])
    distributed_map = next(v for k, v in policies.items() if "DistributedMapPolicy" in k)
    execution_name = {"Fn::Select": [6, {"Fn::Split": [":", {"Ref": i["state_machine"]}]}]}
    execution_arn = ["arn:", {"Ref": "AWS::Partition"}, ":states:", {"Ref": "AWS::Region"},
                     ":", {"Ref": "AWS::AccountId"}, ":execution:", execution_name]
    assert canonical(distributed_map) == canonical([
        {"Action": "states:StartExecution", "Effect": "Allow",
         "Resource": {"Ref": i["state_machine"]}},
        {"Action": ["states:DescribeExecution", "states:StopExecution"], "Effect": "Allow",
         "Resource": join(*execution_arn, ":*")},
        {"Action": "states:RedriveExecution", "Effect": "Allow",
         "Resource": [join(*execution_arn, f"/{label}:*")
                      for label in ("s3slice", "s3slice-table")]},
        # counting the maps' batches (DescribeMapRun) on its own Map Runs only (a prefix's
        # map and a table's)
        {"Action": "states:DescribeMapRun", "Effect": "Allow",
         "Resource": [join(*execution_arn[:-2], ":mapRun:", execution_name, f"/{label}:*")
                      for label in ("s3slice", "s3slice-table")]},
    ])
    assert len(policies) == 2


def test_notifications_handler_may_configure_only_the_data_bucket(
        default_stack: Synthesized) -> None:
    i = ids(default_stack)
    handler_policies = [
        policy for name, policy in default_stack.resources("AWS::IAM::Policy").items()
        if name.startswith("DataNotificationsHandlerPolicy")]
    (policy,) = handler_policies
    assert policy["Properties"]["PolicyDocument"]["Statement"] == [
        {"Action": "s3:PutBucketNotification", "Effect": "Allow",
         "Resource": get_att(i["data"])}]


# ----------------------------------------------------------------------------- IAM: imported
def test_function_role_statements_imported(imported_stack: Synthesized) -> None:
    i = ids(imported_stack)
    (statements,) = policy_statements(imported_stack, i["function_role"]).values()
    assert canonical(statements) == canonical([
        {"Action": ["logs:CreateLogStream", "logs:PutLogEvents"], "Effect": "Allow",
         "Resource": get_att(i["function_logs"])},
        {"Action": XRAY_WRITE, "Effect": "Allow", "Resource": "*"},
        {"Action": "s3:GetObject", "Effect": "Allow", "Condition": OWNERS,
         "Resource": [s3_arn("acme-landing/events/*"), s3_arn("acme-reference/dim/*"),
                      s3_arn("acme-landing/manual/*"),
                      s3_arn("acme-results/sliced/_partials/*"),
                      s3_arn("acme-results/sliced/*/_partials/*")]},
        {"Action": "s3:ListBucket", "Effect": "Allow", "Resource": s3_arn("acme-landing"),
         "Condition": {**OWNERS, "StringLike": {"s3:prefix": ["events/*", "manual/*"]}}},
        {"Action": "s3:ListBucket", "Effect": "Allow", "Resource": s3_arn("acme-reference"),
         "Condition": {**OWNERS, "StringLike": {"s3:prefix": ["dim/*"]}}},
        {"Action": ["s3:AbortMultipartUpload", "s3:DeleteObject", "s3:PutObject"],
         "Effect": "Allow",
         "Condition": OWNERS, "Resource": s3_arn("acme-results/sliced/*")},
        {"Action": "s3:ListBucket", "Effect": "Allow", "Resource": s3_arn("acme-results"),
         "Condition": {**OWNERS, "StringLike": {
             "s3:prefix": ["sliced/_partials/*", "sliced/*/_partials/*"]}}},
        # kms:Decrypt to read, kms:GenerateDataKey (and Decrypt) to write: on exactly the
        # keys given, through S3 only
        {"Action": ["kms:Decrypt", "kms:GenerateDataKey"], "Effect": "Allow",
         "Condition": VIA_S3, "Resource": list(KMS_KEY_ARNS)},
        {"Action": SQS_CONSUME, "Effect": "Allow", "Resource": get_att(i["queue"])},
    ])


def test_state_machine_role_statements_imported(imported_stack: Synthesized) -> None:
    i = ids(imported_stack)
    policies = policy_statements(imported_stack, i["state_machine_role"])
    assert len(policies) == 2
    default_policy = next(v for k, v in policies.items() if "DefaultPolicy" in k)
    assert canonical(default_policy) == canonical([
        {"Action": "lambda:InvokeFunction", "Effect": "Allow",
         "Resource": [get_att(i["function"]), join(get_att(i["function"]), ":*")]},
        {"Action": STATES_LOGGING_AND_TRACING, "Effect": "Allow", "Resource": "*"},
        {"Action": "s3:ListBucket", "Effect": "Allow", "Resource": s3_arn("acme-landing"),
         "Condition": {**OWNERS, "StringLike": {"s3:prefix": ["events/*", "manual/*"]}}},
        {"Action": "s3:ListBucket", "Effect": "Allow", "Resource": s3_arn("acme-reference"),
         "Condition": {**OWNERS, "StringLike": {"s3:prefix": ["dim/*"]}}},
        {"Action": ["s3:AbortMultipartUpload", "s3:GetObject", "s3:ListMultipartUploadParts",
                    "s3:PutObject"], "Effect": "Allow", "Condition": OWNERS,
         "Resource": s3_arn("acme-results/runs/*")},
        {"Action": "s3:GetObject", "Effect": "Allow", "Condition": OWNERS,
         "Resource": [s3_arn("acme-results/sliced/_partials/*"),
                      s3_arn("acme-results/sliced/*/_partials/*")]},
        {"Action": ["kms:Decrypt", "kms:GenerateDataKey"], "Effect": "Allow",
         "Condition": VIA_S3, "Resource": list(KMS_KEY_ARNS)},
    ])
    distributed_map = next(v for k, v in policies.items() if "DistributedMapPolicy" in k)
    assert [s["Action"] for s in distributed_map] == [
        "states:StartExecution", ["states:DescribeExecution", "states:StopExecution"],
        "states:RedriveExecution", "states:DescribeMapRun"]
    assert distributed_map[0]["Resource"] == {"Ref": i["state_machine"]}


def test_notifications_handler_may_configure_only_the_watched_bucket_imported(
        imported_stack: Synthesized) -> None:
    handler_policies = [
        policy for name, policy in imported_stack.resources("AWS::IAM::Policy").items()
        if "NotificationsHandlerPolicy" in name]
    (policy,) = handler_policies
    assert policy["Properties"]["PolicyDocument"]["Statement"] == [
        {"Action": ["s3:GetBucketNotification", "s3:PutBucketNotification"],
         "Effect": "Allow", "Resource": s3_arn("acme-landing")}]


@pytest.mark.parametrize("which", ["default_stack", "imported_stack"])
def test_every_role_and_policy_is_accounted_for(which: str,
                                                request: pytest.FixtureRequest) -> None:
    """No grant hides outside the statements asserted above: exactly three roles, each
    assumable by its service only; no inline, managed or other identity policies, except
    the AWS managed basic execution role of CDK's notifications handler; exactly the four
    IAM policies compared statement by statement above, each on its own role."""
    synth: Synthesized = request.getfixturevalue(which)
    i = ids(synth)
    roles = synth.resources("AWS::IAM::Role")
    (handler_role,) = [name for name in roles if name.startswith("BucketNotificationsHandler")]
    assert set(roles) == {i["function_role"], i["state_machine_role"], handler_role}
    for kind in ("AWS::IAM::ManagedPolicy", "AWS::IAM::User", "AWS::IAM::Group",
                 "AWS::IAM::InstanceProfile", "AWS::IAM::AccessKey", "AWS::Lambda::Permission",
                 "AWS::Lambda::Url", "AWS::KMS::Key", "AWS::KMS::Grant"):
        assert synth.resources(kind) == {}, kind
    # The one topic policy is the stack's own alarm topic's (asserted below).
    assert len(synth.resources("AWS::SNS::TopicPolicy")) == (
        1 if synth.stack.owned_alarm_topic is not None else 0)
    trusted = {i["function_role"]: "lambda.amazonaws.com",
               i["state_machine_role"]: "states.amazonaws.com",
               handler_role: "lambda.amazonaws.com"}
    for name, role in roles.items():
        properties = role["Properties"]
        assert "Policies" not in properties, name
        (trust,) = properties["AssumeRolePolicyDocument"]["Statement"]
        assert (trust["Effect"], trust["Action"], trust["Principal"]) == (
            "Allow", "sts:AssumeRole", {"Service": trusted[name]}), name
        if name == handler_role:
            assert properties["ManagedPolicyArns"] == [join(
                "arn:", {"Ref": "AWS::Partition"},
                ":iam::aws:policy/service-role/AWSLambdaBasicExecutionRole")]
        else:
            assert "ManagedPolicyArns" not in properties, name
    attached = sorted(
        (name[:-8], [role["Ref"] for role in policy["Properties"]["Roles"]])
        for name, policy in synth.resources("AWS::IAM::Policy").items())
    handler_policy = "DataNotificationsHandlerPolicy" if "data" in i else (
        "Bucket1NotificationsHandlerPolicy")
    assert attached == sorted([
        ("ReaderRoleDefaultPolicy", [i["function_role"]]),
        ("WorkflowStateMachineRoleDefaultPolicy", [i["state_machine_role"]]),
        ("WorkflowStateMachineDistributedMapPolicy", [i["state_machine_role"]]),
        (handler_policy, [handler_role]),
    ])


@pytest.mark.parametrize("which", ["default_stack", "imported_stack"])
def test_resource_policies_refuse_plain_http_and_allow_only_services(
        which: str, request: pytest.FixtureRequest) -> None:
    """Bucket, queue and topic policies: first a deny of non-TLS requests, then only allows
    for an AWS service acting for a named source (S3 notifications, S3 server access logs,
    CloudWatch alarms) in a named account (``aws:SourceAccount``)."""
    synth: Synthesized = request.getfixturevalue(which)
    policies = {**synth.resources("AWS::S3::BucketPolicy"),
                **synth.resources("AWS::SQS::QueuePolicy"),
                **synth.resources("AWS::SNS::TopicPolicy")}
    assert len(policies) == (5 if synth.stack.data_bucket is not None else 2)
    allowed = 0
    for name, policy in policies.items():
        deny, *allows = policy["Properties"]["PolicyDocument"]["Statement"]
        assert (deny["Effect"], deny["Condition"]) == (
            "Deny", {"Bool": {"aws:SecureTransport": "false"}}), name
        assert deny["Principal"] in ({"AWS": "*"}, "*"), name
        for allow in allows:
            allowed += 1
            assert allow["Effect"] == "Allow", name
            assert list(allow["Principal"]) == ["Service"], name
            assert allow["Principal"]["Service"] in {"s3.amazonaws.com",
                                                     "logging.s3.amazonaws.com",
                                                     "cloudwatch.amazonaws.com"}, name
            assert "aws:SourceArn" in allow["Condition"]["ArnLike"], name
            accounts = allow["Condition"]["StringEquals"]["aws:SourceAccount"]
            assert ACCOUNT in (accounts if isinstance(accounts, list) else [accounts]), name
            actions = allow["Action"]
            actions = [actions] if isinstance(actions, str) else actions
            assert not [a for a in actions if "*" in a], name
    assert allowed == (3 if synth.stack.data_bucket is not None else 1)


def test_queue_trusts_s3_only_for_the_watched_bucket_and_its_accounts(
        default_stack: Synthesized, imported_stack: Synthesized) -> None:
    for synth, bucket, accounts in (
            (default_stack, get_att(ids(default_stack)["data"]), ACCOUNT),
            (imported_stack, s3_arn("acme-landing"), [ACCOUNT, "210987654321"])):
        policy = synth.json["Resources"][
            synth.logical_id(synth.stack.triggers.queue.node.find_child("Policy"))]
        allow = policy["Properties"]["PolicyDocument"]["Statement"][1]
        assert allow["Principal"] == {"Service": "s3.amazonaws.com"}
        assert allow["Condition"] == {"ArnLike": {"aws:SourceArn": bucket},
                                      "StringEquals": {"aws:SourceAccount": accounts}}


@pytest.mark.parametrize("which", ["default_stack", "imported_stack"])
def test_every_s3_statement_is_pinned_to_the_bucket_owners(
        which: str, request: pytest.FixtureRequest) -> None:
    """``s3:ResourceAccount`` on every S3 statement of the function's and the workflow's
    roles: a bucket name re-registered by another account is never trusted."""
    synth: Synthesized = request.getfixturevalue(which)
    i = ids(synth)
    expected = OWN if synth.stack.data_bucket is not None else OWNERS
    found = 0
    for role in (i["function_role"], i["state_machine_role"]):
        for statements in policy_statements(synth, role).values():
            for statement in statements:
                actions = statement["Action"]
                actions = [actions] if isinstance(actions, str) else actions
                if any(a.startswith("s3:") for a in actions):
                    found += 1
                    assert statement["Condition"]["StringEquals"] == (
                        expected["StringEquals"]), statement
    # (the state machine's read of a table's planned items is one of them)
    assert found == (7 if synth.stack.data_bucket is not None else 9)


def test_no_kms_grant_without_kms_keys(default_stack: Synthesized) -> None:
    for policy in default_stack.resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"]
            actions = [actions] if isinstance(actions, str) else actions
            assert not [a for a in actions if a.startswith("kms:")], statement


@pytest.mark.parametrize("which", ["default_stack", "imported_stack"])
def test_no_wildcard_beyond_a_prefix(which: str, request: pytest.FixtureRequest) -> None:
    """No ``*`` action anywhere; ``*`` resources only for actions without resource scoping."""
    synth: Synthesized = request.getfixturevalue(which)
    unscoped_ok = set(STATES_LOGGING_AND_TRACING) | set(XRAY_WRITE)
    for name, policy in synth.resources("AWS::IAM::Policy").items():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"]
            actions = [actions] if isinstance(actions, str) else actions
            assert not [a for a in actions if "*" in a], (name, statement)
            resources = statement["Resource"]
            resources = resources if isinstance(resources, list) else [resources]
            if "*" in resources:
                assert set(actions) <= unscoped_ok, (name, statement)
            for resource in resources:
                rendered = json.dumps(resource)
                # Objects are granted under a prefix, never a whole bucket's "/*".
                assert '"/*"' not in rendered, (name, statement)
                assert not re.search(r':s3:::[^/"]+/\*"', rendered), (name, statement)


# ----------------------------------------------------------------------------- function
def test_function_environment_default(default_stack: Synthesized) -> None:
    i = ids(default_stack)
    function = default_stack.json["Resources"][i["function"]]["Properties"]
    assert function["Environment"]["Variables"] == {
        "S3SLICE_QUERY": "{}",
        "S3SLICE_OUTPUT_URI": join("s3://", {"Ref": i["data"]}, "/results/"),
        "S3SLICE_OUTPUT_FORMAT": "parquet",
        "S3SLICE_SOURCE_URIS": join("s3://", {"Ref": i["data"]}, "/incoming/"),
        "POWERTOOLS_SERVICE_NAME": "s3slice",
        "POWERTOOLS_METRICS_NAMESPACE": "S3Slice",
        "POWERTOOLS_LOG_LEVEL": "INFO",
    }
    assert function["Runtime"] == "python3.13"
    assert function["Architectures"] == ["arm64"]
    assert (function["MemorySize"], function["EphemeralStorage"], function["Timeout"]) == (
        3008, {"Size": 4096}, 300)
    assert function["TracingConfig"] == {"Mode": "Active"}
    assert "ReservedConcurrentExecutions" not in function


def test_function_settings_imported(imported_stack: Synthesized) -> None:
    i = ids(imported_stack)
    function = imported_stack.json["Resources"][i["function"]]["Properties"]
    assert function["Environment"]["Variables"] == {
        "S3SLICE_QUERY": '{"columns":["a","b"],"filter":"a <= 1000"}',
        "S3SLICE_OUTPUT_URI": "s3://acme-results/sliced/",
        "S3SLICE_OUTPUT_FORMAT": "csv",
        "S3SLICE_SOURCE_URIS": ("s3://acme-landing/events/,s3://acme-reference/dim/,"
                                "s3://acme-landing/manual/"),
        "POWERTOOLS_SERVICE_NAME": "s3slice",
        "POWERTOOLS_METRICS_NAMESPACE": "S3Slice",
        "POWERTOOLS_LOG_LEVEL": "INFO",
    }
    assert function["Runtime"] == "python3.12"
    assert function["Architectures"] == ["x86_64"]
    assert (function["MemorySize"], function["EphemeralStorage"], function["Timeout"]) == (
        4096, {"Size": 10240}, 600)
    assert function["ReservedConcurrentExecutions"] == 600
    imported_stack.template.has_resource_properties("AWS::Lambda::LayerVersion", {
        "CompatibleRuntimes": ["python3.12"], "CompatibleArchitectures": ["x86_64"]})
    imported_stack.template.has_resource_properties("AWS::Logs::LogGroup",
                                                    {"RetentionInDays": 14})


def test_code_asset_is_the_functions_package(default_stack: Synthesized) -> None:
    i = ids(default_stack)
    key = default_stack.json["Resources"][i["function"]]["Properties"]["Code"]["S3Key"]
    staged = Path(default_stack.app.outdir) / f"asset.{key.removesuffix('.zip')}"
    assert (staged / "s3slice" / "handler.py").is_file()
    # with its bytecode (test_code_asset.py) and nothing but the package: test_layer.py
    # adds the staged asset's size to the layer's and checks the sum against Lambda's limit
    assert (staged / "s3slice" / "__pycache__").is_dir()
    assert [p.name for p in staged.iterdir()] == ["s3slice"]


# ----------------------------------------------------------------------------- triggers
@pytest.mark.parametrize("which", ["default_stack", "imported_stack"])
def test_output_prefix_can_never_trigger(which: str, request: pytest.FixtureRequest) -> None:
    synth: Synthesized = request.getfixturevalue(which)
    settings = synth.stack.settings
    (notifications,) = synth.resources("Custom::S3BucketNotifications").values()
    configurations = notifications["Properties"]["NotificationConfiguration"][
        "QueueConfigurations"]
    assert len(configurations) == len(settings.source_suffixes)
    for configuration in configurations:
        rules = {r["Name"]: r["Value"] for r in configuration["Filter"]["Key"]["FilterRules"]}
        assert rules["prefix"] == settings.source_prefix
        for written in (settings.output_prefix, settings.workflow_results_prefix):
            same_bucket = settings.output.bucket == settings.source_bucket
            assert not same_bucket or not (written.startswith(rules["prefix"])
                                           or rules["prefix"].startswith(written))


def test_queue_visibility_is_six_times_the_timeout(default_stack: Synthesized,
                                                   imported_stack: Synthesized) -> None:
    for synth, expected in ((default_stack, 6 * 300), (imported_stack, 6 * 600 + 5)):
        queue = synth.json["Resources"][ids(synth)["queue"]]["Properties"]
        assert queue["VisibilityTimeout"] == expected
        assert queue["SqsManagedSseEnabled"] is True


def test_imported_bucket_notifications_keep_existing_ones(imported_stack: Synthesized) -> None:
    (notifications,) = imported_stack.resources("Custom::S3BucketNotifications").values()
    assert notifications["Properties"]["BucketName"] == "acme-landing"
    assert notifications["Properties"]["Managed"] is False


# ----------------------------------------------------------------------------- workflow
def test_workflow_defaults_and_results_location(imported_stack: Synthesized) -> None:
    definition = state_machine_definition(imported_stack.json)
    defaults = definition["States"]["Defaults"]["Parameters"]["defaults"]
    assert defaults == {"bucket": "acme-landing", "prefix": "events/",
                        "query": {"columns": ["a", "b"], "filter": "a <= 1000"},
                        "output": {"uri": "s3://acme-results/sliced/", "format": "csv"},
                        "toleratedFailurePercentage": 10}
    state = definition["States"]["ProcessObjects"]
    assert state["ResultWriter"]["Parameters"] == {"Bucket": "acme-results", "Prefix": "runs/"}
    assert state["MaxConcurrency"] == 500
    assert state["ItemBatcher"]["MaxItemsPerBatch"] == 25
    assert state["ToleratedFailurePercentagePath"] == "$.toleratedFailurePercentage"
    assert "ToleratedFailurePercentage" not in state


@pytest.mark.parametrize("which", ["default_stack", "imported_stack"])
def test_workflow_retries_and_catches_every_error_type_by_name(
        which: str, request: pytest.FixtureRequest) -> None:
    """Step Functions matches ``errorType`` by exact name: the composed template lists every
    name ``s3slice.error_types`` gives, not only the bases of the error tree."""
    from s3slice import error_types

    synth: Synthesized = request.getfixturevalue(which)
    processor = state_machine_definition(synth.json)["States"]["ProcessObjects"][
        "ItemProcessor"]
    task = processor["States"][processor["StartAt"]]
    retried = [error for retrier in task["Retry"] for error in retrier["ErrorEquals"]]
    (catch,) = task["Catch"]
    assert "UnknownColumnError" in catch["ErrorEquals"]
    assert catch["ErrorEquals"] == list(error_types(retryable=False))
    assert set(error_types(retryable=True)) <= set(retried)
    assert not set(retried) & set(catch["ErrorEquals"])
    assert processor["States"][catch["Next"]]["Type"] == "Fail"


# ----------------------------------------------------------------------------- alarms
def warnings(synth: Synthesized) -> list[str]:
    """The CDK warnings on the stack (what synth prints), by their ids."""
    return [str(entry.data) for entry in synth.stack.node.metadata
            if entry.type == "aws:cdk:warning"]


def test_alarms_default_notify_the_stacks_own_topic(default_stack: Synthesized) -> None:
    """Without alarmTopicArn the stack creates a TLS-only topic the five alarms notify, and
    synth warns that nobody is subscribed to it."""
    topic = default_stack.stack.owned_alarm_topic
    assert topic is not None
    ref = {"Ref": default_stack.logical_id(topic)}
    default_stack.template.resource_count_is("AWS::CloudWatch::Alarm", 5)
    default_stack.template.all_resources_properties("AWS::CloudWatch::Alarm", {
        "AlarmActions": [ref], "OKActions": [ref]})
    default_stack.template.resource_count_is("AWS::SNS::Subscription", 0)
    (policy,) = default_stack.resources("AWS::SNS::TopicPolicy").values()
    deny, allow = policy["Properties"]["PolicyDocument"]["Statement"]
    assert (deny["Effect"], deny["Action"]) == ("Deny", "sns:Publish")
    alarms = sorted(default_stack.logical_id(a) for a in default_stack.stack.alarms.all)
    assert allow["Action"] == "sns:Publish"
    assert allow["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert sorted(a["Fn::GetAtt"][0] for a in allow["Condition"]["ArnLike"]["aws:SourceArn"]
                  ) == alarms
    assert default_stack.json["Outputs"]["AlarmTopicArn"]["Value"] == ref
    assert any("no subscriber" in w for w in warnings(default_stack))


def test_alarms_notify_the_topic(imported_stack: Synthesized) -> None:
    topic = "arn:aws:sns:eu-west-1:123456789012:ops-alerts"
    imported_stack.template.all_resources_properties("AWS::CloudWatch::Alarm", {
        "AlarmActions": [topic], "OKActions": [topic]})
    imported_stack.template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "MetricName": "Duration", "ExtendedStatistic": "p99", "Threshold": 0.9 * 600_000})
    imported_stack.template.resource_count_is("AWS::SNS::Topic", 0)
    imported_stack.template.has_resource_properties("AWS::SNS::Subscription", {
        "Protocol": "email", "Endpoint": "ops@acme.example", "TopicArn": topic})
    assert not [w for w in warnings(imported_stack) if "no subscriber" in w]


def test_nag_off_is_announced(default_stack: Synthesized, stand_in_layer: Path,
                              tmp_path: Path) -> None:
    """The fixtures synthesize with nag=false: synth carries the warning; with nag on
    (the default) it does not."""
    assert NAG_OFF_WARNING in "".join(warnings(default_stack))
    _, stack = build_app({**cdk_json_context(), "layerDir": str(stand_in_layer)},
                         outdir=str(tmp_path))
    assert not [e for e in stack.node.metadata
                if e.type == "aws:cdk:warning" and NAG_OFF_WARNING in str(e.data)]


def test_outputs(default_stack: Synthesized) -> None:
    assert set(default_stack.json["Outputs"]) == {
        "FunctionName", "StateMachineArn", "QueueUrl", "DeadLetterQueueUrl", "WatchedUri",
        "OutputUri", "WorkflowResultsUri", "AlarmTopicArn"}


# ----------------------------------------------------------------------------- bounds
def test_concurrency_is_bounded_by_default(default_stack: Synthesized) -> None:
    """The queue may run at most 10 invocations at once and the map 100: together far
    below Lambda's default 1,000 per account."""
    default_stack.template.has_resource_properties("AWS::Lambda::EventSourceMapping", {
        "ScalingConfig": {"MaximumConcurrency": 10}})
    state = state_machine_definition(default_stack.json)["States"]["ProcessObjects"]
    assert state["MaxConcurrency"] == 100


def test_state_machine_times_out(default_stack: Synthesized,
                                 imported_stack: Synthesized) -> None:
    assert state_machine_definition(default_stack.json)["TimeoutSeconds"] == 24 * 3600
    assert state_machine_definition(imported_stack.json)["TimeoutSeconds"] == 6 * 3600


def test_data_bucket_expires_noncurrent_versions(default_stack: Synthesized) -> None:
    i = ids(default_stack)
    bucket = default_stack.json["Resources"][i["data"]]["Properties"]
    assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}
    assert bucket["LifecycleConfiguration"] == {"Rules": [{
        "NoncurrentVersionExpiration": {"NoncurrentDays": 30},
        "ExpiredObjectDeleteMarker": True,
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7},
        "Status": "Enabled"}, {
        # a timed-out function's upload under the output prefix (s3slice_cdk.uploads)
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
        "Prefix": "results/",
        "Status": "Enabled"}]}


def test_variant_settings_reach_the_template(stand_in_layer: Path, tmp_path: Path) -> None:
    """A prefix without its "/" is granted and watched as a folder; a reserved concurrency
    shrinks the map's default to fit beside the queue's; an e-mail subscribes to the
    stack's topic; noncurrentVersionDays reaches the data bucket."""
    from aws_cdk.assertions import Template

    app, stack = build_app({**cdk_json_context(), "nag": False,
                            "layerDir": str(stand_in_layer), "sourcePrefix": "landing",
                            "reservedConcurrency": "50", "alarmEmail": "ops@acme.example",
                            "noncurrentVersionDays": "7"}, outdir=str(tmp_path))
    template = Template.from_stack(stack)
    synth = Synthesized(app=app, stack=stack, template=template, json=template.to_json())
    i = ids(synth)
    (statements,) = policy_statements(synth, i["function_role"]).values()
    (get,) = [s for s in statements if s["Action"] == "s3:GetObject"]
    assert get["Resource"][0] == join(get_att(i["data"]), "/landing/*")
    assert all("_partials/" in json.dumps(r) for r in get["Resource"][1:])
    (notifications,) = synth.resources("Custom::S3BucketNotifications").values()
    for configuration in notifications["Properties"]["NotificationConfiguration"][
            "QueueConfigurations"]:
        assert {"Name": "prefix", "Value": "landing/"} in configuration["Filter"]["Key"][
            "FilterRules"]
    assert state_machine_definition(synth.json)["States"]["ProcessObjects"][
        "MaxConcurrency"] == 40
    template.has_resource_properties("AWS::Lambda::EventSourceMapping", {
        "ScalingConfig": {"MaximumConcurrency": 10}})
    template.has_resource_properties("AWS::Lambda::Function", {
        "ReservedConcurrentExecutions": 50})
    template.has_resource_properties("AWS::SNS::Subscription", {
        "Protocol": "email", "Endpoint": "ops@acme.example",
        "TopicArn": {"Ref": synth.logical_id(stack.owned_alarm_topic)}})
    template.has_resource_properties("AWS::S3::Bucket", {"LifecycleConfiguration": {
        "Rules": Match.array_with([
            Match.object_like({"NoncurrentVersionExpiration": {"NoncurrentDays": 7}})])}})
    assert not [w for w in warnings(synth) if "no subscriber" in w]


def test_stack_is_environment_agnostic(default_stack: Synthesized) -> None:
    assert default_stack.stack.environment == "aws://unknown-account/unknown-region"


# ----------------------------------------------------------------------------- glueTables
#: Two tables of one database and one of another, as the command line gives them.
GLUE_TABLES = "sales.orders, sales.items,ops.run_log-2"


@pytest.fixture(scope="module")
def glue_stack(stand_in_layer: Path, tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The default stack with ``glueTables`` (and nothing else) set."""
    return synthesize({"layerDir": str(stand_in_layer), "glueTables": GLUE_TABLES},
                      tmp_path_factory.mktemp("glue"))


def glue_arn(resource: str) -> dict[str, Any]:
    """``arn:${Partition}:glue:${Region}:${AccountId}:<resource>``: this account's catalog."""
    return join("arn:", {"Ref": "AWS::Partition"}, ":glue:", {"Ref": "AWS::Region"}, ":",
                ACCOUNT, f":{resource}")


def test_glue_tables_grant_get_table_on_exactly_those_tables(
        glue_stack: Synthesized, default_stack: Synthesized) -> None:
    """The function's policy is the default's plus one statement: ``glue:GetTable`` on the
    catalog, each named database and each named table, nothing else (no wildcard, no
    other action, no other role)."""
    i = ids(glue_stack)
    (statements,) = policy_statements(glue_stack, i["function_role"]).values()
    glue = [s for s in statements if "glue:" in json.dumps(s["Action"])]
    assert canonical(glue) == canonical([
        {"Action": "glue:GetTable", "Effect": "Allow",
         "Resource": [glue_arn("catalog"), glue_arn("database/ops"), glue_arn("database/sales"),
                      glue_arn("table/sales/orders"), glue_arn("table/sales/items"),
                      glue_arn("table/ops/run_log-2")]}])
    (default,) = policy_statements(default_stack, ids(default_stack)["function_role"]).values()
    assert canonical([s for s in statements if s not in glue]) == canonical(default)
    # ... and no other resource of the stack differs from the default stack's.
    policy = next(name for name in policy_statements(glue_stack, i["function_role"]))
    assert {k: v for k, v in glue_stack.json["Resources"].items() if k != policy} == {
        k: v for k, v in default_stack.json["Resources"].items() if k != policy}
    assert glue_stack.json["Resources"].keys() == default_stack.json["Resources"].keys()
    for name, other in glue_stack.resources("AWS::IAM::Policy").items():
        if name != policy:
            assert "glue:" not in json.dumps(other), name


@pytest.mark.parametrize("which", ["default_stack", "imported_stack", "snap_start_stack"])
def test_no_glue_grant_without_glue_tables(which: str, request: pytest.FixtureRequest) -> None:
    synth: Synthesized = request.getfixturevalue(which)
    assert synth.stack.settings.glue_tables == ()
    assert ":glue:" not in json.dumps(synth.json)
    assert "glue:" not in json.dumps(synth.json)


def test_glue_tables_leave_cdk_nag_clean(glue_stack: Synthesized) -> None:
    from cdk_nag import AwsSolutionsChecks

    report = AwsSolutionsChecks().validate_scope(glue_stack.stack)
    assert [(v.rule_name, [r.template_path for r in v.violating_resources])
            for v in report.violations] == []
    assert report.success


def test_a_duplicated_glue_table_is_granted_once(stand_in_layer: Path, tmp_path: Path) -> None:
    synth = synthesize({"layerDir": str(stand_in_layer),
                        "glueTables": ["sales.orders", "sales.orders"]}, tmp_path)
    (statements,) = policy_statements(synth, ids(synth)["function_role"]).values()
    (glue,) = [s for s in statements if s["Action"] == "glue:GetTable"]
    assert glue["Resource"] == [glue_arn("catalog"), glue_arn("database/sales"),
                                glue_arn("table/sales/orders")]


# ----------------------------------------------------------------------------- failures
def test_missing_layer_fails_synth_with_instructions(tmp_path: Path) -> None:
    with pytest.raises(LayerNotBuiltError, match=r"python layers/build\.py --arch arm64"):
        build_app({**cdk_json_context(), "layerDir": str(tmp_path / "missing")})


def test_output_inside_watched_prefix_fails_synth(stand_in_layer: Path) -> None:
    with pytest.raises(SettingsError, match="outputPrefix"):
        build_app({**cdk_json_context(), "layerDir": str(stand_in_layer),
                   "sourcePrefix": "data/", "outputPrefix": "data/out/"})


@pytest.mark.parametrize(("context", "key"), [
    ({"sourcePrefix": "landing/", "outputPrefix": "landing*/"}, "outputPrefix"),
    ({"outputPrefix": "*/"}, "outputPrefix"),
    ({"sourceBucket": "my-data", "outputBucket": "my-out", "sourcePrefix": "*"},
     "sourcePrefix"),
    ({"sourcePrefix": "landing/", "workflowResultsPrefix": "land?ng/"},
     "workflowResultsPrefix"),
    ({"readUris": "s3://acme-ref/d*"}, "readUris"),
    ({"sourceBucket": "my-data", "readUris": "s3://my-data/results/"}, "readUris"),
    ({"readUris": "s3://acme-ref"}, "readUris"),
    ({"workflowMaxConcurrency": "1000"}, "eventSourceMaxConcurrency + workflowMaxConcurrency"),
    ({"reservedConcurrency": "20", "workflowMaxConcurrency": "20"},
     "eventSourceMaxConcurrency + workflowMaxConcurrency"),
    ({"kmsKeyArns": "arn:aws:kms:eu-west-1:123456789012:alias/data"}, "kmsKeyArns"),
    ({"glueTables": "sales.orders,sales.*"}, "glueTables"),
    ({"glueTables": "orders"}, "glueTables"),
])
def test_escapes_fail_synth(stand_in_layer: Path, context: dict[str, Any], key: str) -> None:
    """Each context that would grant more than it names (an IAM wildcard, a read of the
    output, a whole bucket) or run more than the budget stops synth, naming the key."""
    with pytest.raises(SettingsError, match=f"^{re.escape(key)}"):
        build_app({**cdk_json_context(), "layerDir": str(stand_in_layer), **context})


def test_app_entry_point_prints_the_reason(tmp_path: Path) -> None:
    """``python3 cdk/app.py`` (what cdk.json runs) exits 1 with the message, no traceback.

    Run as the CLI runs it, in a process of its own: the CLI hands the app its context
    in ``CDK_CONTEXT_JSON``, which CDK reads in its jsii (Node.js) process, so setting the
    variable in this test's process, whose jsii process is already running, would not
    reach it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CDK_", "AWS_"))}
    env["CDK_CONTEXT_JSON"] = json.dumps({"layerDir": str(tmp_path / "none")})
    env["CDK_OUTDIR"] = str(tmp_path / "cdk.out")
    result = subprocess.run([sys.executable, str(CDK_DIR / "app.py")], cwd=REPO_DIR, env=env,
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 1, result.stderr[-3000:]
    message = result.stderr
    assert message.startswith("s3slice: the Lambda layer directory"), message[-3000:]
    assert str(tmp_path / "none") in message
    assert "python layers/build.py --arch arm64" in message
    assert "Traceback" not in message
    assert not (tmp_path / "cdk.out" / "S3Slice.template.json").exists()  # nothing synthesized


def test_app_without_the_cli_has_cdk_json_feature_flags(stand_in_layer: Path,
                                                         tmp_path: Path) -> None:
    """Run without the CLI (no cdk.json context passed in), the app still builds with
    cdk.json's feature flags, so it makes the same stack as ``cdk synth``."""
    app, stack = build_app({"layerDir": str(stand_in_layer), "nag": False},
                           outdir=str(tmp_path))
    for flag, value in cdk_json_context().items():
        assert app.node.try_get_context(flag) == value, flag
    assert stack.access_logs_bucket is not None
