"""The Workflow construct in a bare stack, for the workflow tests: building it, its task
states, and its role's statements resolved and asked what they allow."""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from s3slice_cdk.workflow import Workflow, WorkflowProps
from tests.infrastructure.support import bare_stack

FUNCTION_ARN = "arn:aws:lambda:eu-west-1:123456789012:function:s3slice"


def build(**overrides: Any) -> tuple[Workflow, Template]:
    stack = bare_stack()
    props: dict[str, Any] = {
        "function": lambda_.Function.from_function_arn(stack, "Fn", FUNCTION_ARN),
        "default_bucket_name": "acme-in",
        "default_prefix": "incoming/",
        "default_query": {"columns": ["a"]},
        "default_output_uri": "s3://acme-out/results/",
        "results_bucket": s3.Bucket.from_bucket_name(stack, "Results", "acme-out"),
        "results_prefix": "workflow-results/",
    }
    workflow = Workflow(stack, "Workflow", props=WorkflowProps(**{**props, **overrides}))
    return workflow, Template.from_stack(stack)


def task_state(distributed_map: dict[str, Any]) -> dict[str, Any]:
    processor = distributed_map["ItemProcessor"]
    task = processor["States"][processor["StartAt"]]
    assert task["Type"] == "Task"
    assert isinstance(task, dict)
    return task


# --------------------------------------------------------------------- the partials' grants
#: The pseudo parameters of the imported stack's ARNs, resolved for the evaluation.
PSEUDO = {"AWS::Partition": "aws", "AWS::AccountId": "123456789012"}


def resolved(value: Any) -> Any:
    """A policy value with ``Ref`` to pseudo parameters and ``Fn::Join`` resolved; any
    other token stays ``<token>`` (it then matches nothing)."""
    if isinstance(value, list):
        return [resolved(v) for v in value]
    if isinstance(value, dict):
        if "Fn::Join" in value:
            separator, parts = value["Fn::Join"]
            return separator.join(str(resolved(p)) for p in parts)
        if set(value) == {"Ref"}:
            return PSEUDO.get(value["Ref"], "<token>")
        if len(value) == 1 and next(iter(value)).startswith("Fn::"):
            return "<token>"
        return {k: resolved(v) for k, v in value.items()}
    return value


def listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def allows(statements: list[dict[str, Any]], action: str, resource: str,
           context: dict[str, str]) -> bool:
    """Whether an Allow statement covers the request: IAM's wildcards (``*`` any run of
    characters, ``/`` included; ``?`` one) in actions, resources and ``StringLike``;
    ``StringEquals`` exactly. (The stack's policies have no Deny and no other operator.)"""
    import fnmatch

    def like(text: str, pattern: str) -> bool:
        return fnmatch.fnmatchcase(text, pattern.replace("[", "[[]"))

    for statement in statements:
        assert statement["Effect"] == "Allow"
        if not any(like(action.lower(), a.lower()) for a in listed(statement["Action"])):
            continue
        if not any(like(resource, str(r)) for r in listed(statement["Resource"])):
            continue
        conditions = statement.get("Condition", {})
        assert set(conditions) <= {"StringEquals", "StringLike"}, conditions
        if all(context.get(key) in listed(values)
               for key, values in conditions.get("StringEquals", {}).items()) and all(
                context.get(key) is not None
                and any(like(context[key], v) for v in listed(values))
                for key, values in conditions.get("StringLike", {}).items()):
            return True
    return False


def role_statements(synth: Any, role: Any) -> list[dict[str, Any]]:
    role_id = synth.logical_id(role)
    return [resolved(statement)
            for policy in synth.resources("AWS::IAM::Policy").values()
            if {"Ref": role_id} in policy["Properties"]["Roles"]
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]]
