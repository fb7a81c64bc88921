"""Pipelines of the construct library in a bare stack, for the pipeline tests (and the
example's and the table workflow's): a function, imported buckets, a pipeline between
them, a stack of three, and reading their template."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns

from s3slice_cdk import (
    FunctionSettings,
    Pipeline,
    PipelineProps,
    PipelineWorkflowProps,
    ReadFunction,
    ReadFunctionProps,
)
from s3slice_cdk.function import HANDLER
from tests.infrastructure.support import bare_stack

QUERIES = ({"columns": ["a", "b"], "filter": "a <= 1000"},
           {"sql": "SELECT region, SUM(v) AS v FROM s3object GROUP BY region"},
           {})
TOPIC = "arn:aws:sns:eu-west-1:123456789012:ops-alerts"


def reader(stack: cdk.Stack, construct_id: str, layer: Path, **props: Any) -> ReadFunction:
    return ReadFunction(stack, construct_id, props=ReadFunctionProps(layer_dir=layer, **props))


def bucket(stack: cdk.Stack, name: str) -> s3.IBucket:
    """The bucket ``name``, imported once per stack."""
    imported: dict[str, s3.IBucket] = stack.__dict__.setdefault("_test_buckets", {})
    if name not in imported:
        imported[name] = s3.Bucket.from_bucket_name(stack, f"Bucket-{name}", name)
    return imported[name]


def pipeline(stack: cdk.Stack, construct_id: str, function: ReadFunction, source: str,
             output: str, **props: Any) -> Pipeline:
    """A pipeline from ``bucket/prefix`` to ``bucket/prefix`` (imported buckets)."""
    source_bucket, _, source_prefix = source.partition("/")
    output_bucket, _, output_prefix = output.partition("/")
    return Pipeline(stack, construct_id, props=PipelineProps(
        function=function, source_bucket=bucket(stack, source_bucket),
        source_prefix=source_prefix, output_bucket=bucket(stack, output_bucket),
        output_prefix=output_prefix, **props))


def three_pipelines(layer: Path) -> cdk.Stack:
    """Two pipelines sharing one function, a third with its own, all alarmed."""
    stack = bare_stack()
    topic = sns.Topic.from_topic_arn(stack, "Ops", TOPIC)
    shared = reader(stack, "Shared", layer, settings=FunctionSettings(concurrency=16))
    own = reader(stack, "Own", layer, architecture="arm64", memory_size=1024,
                 ephemeral_storage_size=512, snap_start=True)
    pipeline(stack, "Orders", shared, "acme-landing/orders/", "acme-results/orders/",
             query=QUERIES[0], source_suffixes=(".parquet", ".csv"), alarm_topic=topic)
    pipeline(stack, "Clicks", shared, "acme-landing/clicks/", "acme-results/clicks/",
             query=QUERIES[1], output_format="csv", alarm_topic=topic)
    audit = pipeline(stack, "Audit", own, "acme-audit/", "acme-results/audit/",
                     query=QUERIES[2], alarm_topic=topic)
    audit.add_workflow(PipelineWorkflowProps(items_per_batch=25, max_concurrency=50))
    return stack


def resources(template: Mapping[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def readers(template: Mapping[str, Any]) -> list[Any]:
    """The s3slice functions (not CDK's notifications handler)."""
    return [f for f in resources(template, "AWS::Lambda::Function").values()
            if f["Properties"].get("Handler") == HANDLER]


def transform(target: Mapping[str, Any], event: Mapping[str, Any]) -> str:
    """What EventBridge sends for ``event`` through ``target``'s input transformer: each
    ``<name>`` of the template replaced by the JSON of its path's value."""
    transformer = target["InputTransformer"]
    template = transformer["InputTemplate"]
    assert isinstance(template, str), "the template holds only literals here"

    def value(path: str) -> Any:
        node: Any = event
        for part in path.removeprefix("$.").split("."):
            node = node[part]
        return node

    paths = transformer["InputPathsMap"]
    return re.sub(r"<([\w-]+)>", lambda m: json.dumps(value(paths[m.group(1)])), template)


def grants_of(template: Mapping[str, Any], role_prefix: str) -> dict[str, set[str]]:
    """action → resources (rendered) of the role's default policy."""
    out: dict[str, set[str]] = {}
    for name, policy in resources(template, "AWS::IAM::Policy").items():
        if not name.startswith(role_prefix):
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"]
            for action in [actions] if isinstance(actions, str) else actions:
                targets = statement["Resource"]
                for target in targets if isinstance(targets, list) else [targets]:
                    out.setdefault(action, set()).add(json.dumps(target, sort_keys=True))
    return out
