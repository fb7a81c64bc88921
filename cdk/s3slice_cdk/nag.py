"""cdk-nag (AwsSolutions) acknowledgments, each with the reason it is safe here.

cdk-nag 3 reads CDK's own acknowledgments (``Validations.of(c).acknowledge``), one per
finding: ``AwsSolutions-IAM5[Resource::<arn>]`` names the exact resource. Wildcard
resources are acknowledged only when they are the ones this stack means to grant (a
prefix, a service without resource-level permissions, a CDK-generated ARN pattern) and
only for the actions expected with them; any other wildcard stays a finding and fails
the check.

These are the constructs' own; the repository's stack adds its review record with
``s3slice_app.nag.add_suppressions``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import IConstruct, Node

from .grants import BucketPrefix
from .workflow import Workflow

#: The singleton CDK adds for ``Custom::S3BucketNotifications``.
NOTIFICATIONS_HANDLER_ID = "BucketNotificationsHandler050a0587b7544547bf325f094a3db834"

#: The reasons shared with ``library_nag`` (a pipeline's function).
RUNTIME_REASON = (
    "The runtime is the pythonVersion setting (python{version} by default) and must match "
    "the CPython version the layer's compiled wheels (polars, pyarrow) are built for by "
    "layers/build.py; moving to a newer runtime is a deliberate change of both.")
PREFIX_REASON = (
    "Object access is limited to keys under a configured prefix "
    "(arn:aws:s3:::bucket/prefix*): reads under the watched prefix and readUris, writes (and "
    "the removal of a failed invocation's own outputs) under the output prefix. A prefix "
    "cannot be granted without a trailing wildcard.")
PARTIALS_REASON = (
    "The workflow's reduce step reads back the partial answers its map batches wrote, only "
    "in _partials/ folders under the output prefix (bucket/prefix_partials/* and "
    "bucket/prefix*/_partials/*).")
XRAY_REASON = (
    "Active X-Ray tracing: PutTraceSegments and PutTelemetryRecords support no "
    "resource-level permissions, so their resource must be '*'.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Acknowledged:
    """One acknowledged finding, kept on the stack for tests and review."""

    path: str
    rule: str
    reason: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class WildcardAllowance:
    """A wildcard resource (a regex over cdk-nag's rendering) and the actions allowed on it."""

    pattern: str
    actions: frozenset[str]
    reason: str

    def allows(self, resource: str, actions: Sequence[str]) -> bool:
        return re.fullmatch(self.pattern, resource) is not None and set(actions) <= self.actions


def acknowledge(construct: IConstruct, rule: str, reason: str,
                log: list[Acknowledged]) -> None:
    if not reason.strip():
        raise ValueError(f"{rule} on {construct.node.path}: an acknowledgment needs a reason")
    cdk.Validations.of(construct).acknowledge(cdk.Acknowledgment(id=rule, reason=reason))
    log.append(Acknowledged(path=construct.node.path, rule=rule, reason=reason))


def nag_rendering(value: Any) -> str:
    """A resolved CloudFormation value as cdk-nag writes it in a finding id."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((key, arg),) = value.items()
        if key == "Ref":
            return f"<{arg}>"
        if key == "Fn::GetAtt":
            return f"<{arg[0]}.{arg[1]}>"
        if key == "Fn::Join":
            separator, parts = arg
            return str(separator).join(nag_rendering(part) for part in parts)
    return json.dumps(value, separators=(",", ":"))


def wildcard_statements(policy: iam.Policy) -> Iterator[tuple[str, list[str]]]:
    """(resource as cdk-nag renders it, actions) for every Allow resource with a ``*``."""
    document = cdk.Stack.of(policy).resolve(policy.document)
    for statement in document.get("Statement", []):
        if statement.get("Effect") != "Allow":
            continue
        actions = statement.get("Action", [])
        actions = [actions] if isinstance(actions, str) else list(actions)
        resources = statement.get("Resource", [])
        for resource in resources if isinstance(resources, list) else [resources]:
            rendered = nag_rendering(resource)
            if "*" in rendered:
                yield rendered, actions


def acknowledge_wildcards(policy: iam.Policy, allowances: Sequence[WildcardAllowance],
                          log: list[Acknowledged]) -> None:
    """Acknowledge IAM5 for each wildcard resource that one of ``allowances`` allows."""
    done: set[str] = set()
    for resource, actions in wildcard_statements(policy):
        for allowance in allowances:
            if resource not in done and allowance.allows(resource, actions):
                acknowledge(policy, f"AwsSolutions-IAM5[Resource::{resource}]",
                            allowance.reason, log)
                done.add(resource)


class _Resolves(Protocol):
    def resolve(self, obj: Any) -> Any: ...


def exact(stack: _Resolves, value: str) -> str:
    """A resolved ARN as a regular expression matching its cdk-nag rendering exactly."""
    return re.escape(nag_rendering(stack.resolve(value)))


class _HasNode(Protocol):
    @property
    def node(self) -> Node: ...


def acknowledge_notifications_handler(stack: _HasNode, log: list[Acknowledged]) -> None:
    """CDK's ``Custom::S3BucketNotifications`` handler in ``stack``, if any, once."""
    handler = stack.node.try_find_child(NOTIFICATIONS_HANDLER_ID)
    if handler is None or any(entry.type == "aws:cdk:acknowledged-rules"
                              for entry in handler.node.metadata):
        return  # none, or acknowledged already (by another pipeline's function)
    role = handler.node.try_find_child("Role")
    if role is not None:
        acknowledge(
            role,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/"
            "service-role/AWSLambdaBasicExecutionRole]",
            "CDK's own handler for Custom::S3BucketNotifications, which runs only while "
            "CloudFormation deploys to set the bucket's notifications, gets this AWS "
            "managed policy from aws-cdk-lib, and it grants logs:CreateLogGroup, "
            "logs:CreateLogStream and logs:PutLogEvents on every log group in the "
            "account and region (Resource '*'), not only on its own.", log)
    acknowledge(
        handler, "AwsSolutions-L1",
        "CDK's own handler for Custom::S3BucketNotifications: its runtime is chosen and "
        "updated by aws-cdk-lib, not by this app.", log)


def acknowledge_workflow(workflow: Workflow, function: lambda_.IFunction,
                         results: BucketPrefix, log: list[Acknowledged], *,
                         items: Sequence[BucketPrefix]) -> None:
    """The workflow's findings: invoking ``function`` (and its versions), vended logs and
    X-Ray, the Map Run results under ``results`` (``bucket/prefix*``), a table's planned
    items read from the ``_partials/`` folders ``items``, and the Distributed Maps' own
    child executions and Map Runs."""
    stack = cdk.Stack.of(workflow)
    state_machine = workflow.state_machine
    machine_policy = state_machine.role.node.find_child("DefaultPolicy")
    assert isinstance(machine_policy, iam.Policy)
    acknowledge_wildcards(machine_policy, [
        WildcardAllowance(
            pattern=exact(stack, f"{function.function_arn}:*"),
            actions=frozenset({"lambda:InvokeFunction"}),
            reason="CDK's LambdaInvoke grants invoking the function and its versions and "
                   "aliases (function ARN + ':*'); it is this one function only."),
        WildcardAllowance(
            pattern=r"\*",
            actions=frozenset({
                "logs:CreateLogDelivery", "logs:DeleteLogDelivery", "logs:DescribeLogGroups",
                "logs:DescribeResourcePolicies", "logs:GetLogDelivery",
                "logs:ListLogDeliveries", "logs:PutResourcePolicy", "logs:UpdateLogDelivery",
                "xray:GetSamplingRules", "xray:GetSamplingTargets",
                "xray:PutTelemetryRecords", "xray:PutTraceSegments"}),
            reason="Step Functions logging to CloudWatch Logs (vended log delivery) and X-Ray "
                   "tracing: these actions support no resource-level permissions."),
        WildcardAllowance(
            pattern=exact(stack, results.objects_arn),
            actions=frozenset({"s3:PutObject", "s3:GetObject", "s3:ListMultipartUploadParts",
                               "s3:AbortMultipartUpload"}),
            reason="The Distributed Map's ResultWriter writes Map Run results under the "
                   "workflow results prefix only (bucket/prefix*)."),
        WildcardAllowance(
            pattern="|".join(exact(stack, location.objects_arn) for location in items),
            actions=frozenset({"s3:GetObject"}),
            reason="The table path's Distributed Map reads the data files a table's "
                   "planning step wrote as its items (<output>_partials/<run>/items.json), "
                   "only in _partials/ folders under the output prefix "
                   "(bucket/prefix_partials/* and bucket/prefix*/_partials/*)."),
    ], log)
    distributed_map_policy = state_machine.node.try_find_child("DistributedMapPolicy")
    if isinstance(distributed_map_policy, iam.Policy):
        acknowledge_wildcards(distributed_map_policy, [
            WildcardAllowance(
                pattern=(r"arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:"
                         r"execution:.*:\*"),
                actions=frozenset({"states:DescribeExecution", "states:StopExecution",
                                   "states:RedriveExecution"}),
                reason="A Distributed Map runs child executions of its own state machine "
                       "with generated names; CDK grants describing, stopping and "
                       "redriving this state machine's executions only."),
            WildcardAllowance(
                pattern=(r"arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:"
                         r"mapRun:.*/s3slice(-table)?:\*"),
                actions=frozenset({"states:DescribeMapRun"}),
                reason="Map Runs have generated ids; the workflow counts its batches by "
                       "describing the Map Runs of its own state machine's labelled "
                       "Distributed Map only."),
        ], log)
