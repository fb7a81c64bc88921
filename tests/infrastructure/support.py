"""Helpers for the CDK tests (imported by the test modules and by conftest.py)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from s3slice_app import S3SliceStack
    from s3slice_app.settings import StackSettings

REPO_DIR = Path(__file__).resolve().parents[2]
CDK_DIR = REPO_DIR / "cdk"
#: AWS's sample events (what the function's tests use too).
EVENTS_DIR = REPO_DIR / "events"


def make_stand_in_layer(root: Path) -> Path:
    """A directory shaped like a built layer: ``python/`` with one tiny module."""
    (root / "python").mkdir(parents=True, exist_ok=True)
    (root / "python" / "s3slice_layer_stand_in.py").write_text(
        '"""Stands in for the real dependency layer in CDK tests."""\n')
    return root


@dataclasses.dataclass(frozen=True)
class Synthesized:
    app: cdk.App
    stack: S3SliceStack
    template: Template
    #: The synthesized template as plain JSON.
    json: Mapping[str, Any]

    def resources(self, resource_type: str) -> dict[str, Any]:
        return {name: resource for name, resource in self.json["Resources"].items()
                if resource["Type"] == resource_type}

    def logical_id(self, construct: Any) -> str:
        """The logical id of an L2 construct's default CloudFormation resource."""
        import aws_cdk as cdk

        child = construct.node.default_child
        assert isinstance(child, cdk.CfnElement)
        return str(self.stack.resolve(child.logical_id))


def synthesize(context: Mapping[str, Any], outdir: Path) -> Synthesized:
    """Build the app with cdk.json's context plus ``context`` and synthesize it once."""
    from aws_cdk.assertions import Template

    from s3slice_app import build_app, cdk_json_context

    # cdk-nag runs separately (test_nag.py) so that its report can be read in full.
    app, stack = build_app({**cdk_json_context(), "nag": False, **context},
                           outdir=str(outdir))
    template = Template.from_stack(stack)
    return Synthesized(app=app, stack=stack, template=template, json=template.to_json())


#: The SSE-KMS keys of the imported buckets.
KMS_KEY_ARNS = (
    "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
    "arn:aws:kms:eu-west-1:210987654321:key/mrk-1234abcd12ab34cd56ef1234567890ab",
)

#: A deployment on existing buckets with every optional setting given.
IMPORTED_CONTEXT: dict[str, Any] = {
    "sourceBucket": "acme-landing",
    "sourcePrefix": "events/",
    "sourceSuffixes": ".parquet",
    "readUris": "s3://acme-reference/dim/,s3://acme-landing/manual/",
    "outputBucket": "acme-results",
    "outputPrefix": "sliced",
    "outputFormat": "csv",
    "query": '{"columns": ["a", "b"], "filter": "a <= 1000"}',
    "memorySize": "4096",
    "ephemeralStorageSize": "10240",
    "timeoutSeconds": "600",
    "architecture": "x86_64",
    "pythonVersion": "3.12",
    "reservedConcurrency": "600",
    "logRetentionDays": "14",
    "batchSize": "20",
    "maxBatchingWindowSeconds": "5",
    "maxReceiveCount": "5",
    "eventSourceMaxConcurrency": "40",
    "workflowMaxConcurrency": "500",
    "workflowItemsPerBatch": "25",
    "workflowToleratedFailurePercentage": "10",
    "workflowResultsPrefix": "runs/",
    "workflowTimeoutHours": "6",
    "alarmTopicArn": "arn:aws:sns:eu-west-1:123456789012:ops-alerts",
    "alarmEmail": "ops@acme.example",
    "kmsKeyArns": ",".join(KMS_KEY_ARNS),
    "bucketAccounts": "210987654321",
    "durationAlarmRatio": "0.9",
}


#: SnapStart on: the default deployment, with the most /tmp SnapStart supports.
SNAP_START_CONTEXT: dict[str, Any] = {"snapStart": "true", "ephemeralStorageSize": "512"}


def bare_stack() -> cdk.Stack:
    """An empty, environment-agnostic stack (with cdk.json's feature flags) for one construct."""
    import aws_cdk as cdk

    from s3slice_app import cdk_json_context

    return cdk.Stack(cdk.App(context=cdk_json_context()), "Bare")


def state_machine_definition(template_json: Mapping[str, Any]) -> dict[str, Any]:
    """The one state machine's definition, with every CloudFormation token as ``<token>``."""
    (machine,) = [r for r in template_json["Resources"].values()
                  if r["Type"] == "AWS::StepFunctions::StateMachine"]
    definition = machine["Properties"]["DefinitionString"]
    if isinstance(definition, dict):
        _, parts = definition["Fn::Join"]
        definition = "".join(p if isinstance(p, str) else "<token>" for p in parts)
    parsed = json.loads(definition)
    assert isinstance(parsed, dict)
    return parsed


def from_context(**context: Any) -> StackSettings:
    """The app's settings from ``context`` alone (no cdk.json)."""
    from s3slice_app.settings import StackSettings

    return StackSettings.from_context(context.get)
