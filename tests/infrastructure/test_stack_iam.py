"""The composed stack's least-privilege IAM, statement by statement: the function's, the
state machine's and the notifications handler's roles, by default and on imported
buckets; every role accounted for; resource policies; S3 pinned to the bucket owners."""

from __future__ import annotations

import json
import re

import pytest
from aws_cdk.assertions import Match

from tests.infrastructure.stack_iam import (
    ACCOUNT,
    OWN,
    OWNERS,
    SQS_CONSUME,
    STATES_LOGGING_AND_TRACING,
    VIA_S3,
    XRAY_WRITE,
    canonical,
    get_att,
    ids,
    join,
    policy_statements,
    s3_arn,
)
from tests.infrastructure.support import KMS_KEY_ARNS, Synthesized

pytestmark = pytest.mark.infrastructure


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
