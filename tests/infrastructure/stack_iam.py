"""Reading the stack's IAM, for the stack tests: the actions some services need, each
role's statements in a canonical form, and the ARNs and conditions they name."""

from __future__ import annotations

import json
from typing import Any

from tests.infrastructure.support import Synthesized

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
