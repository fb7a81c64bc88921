"""The ReadFunction construct in a bare stack: function, layer, role, log group, env."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import Stack
from aws_cdk.assertions import Match, Template

from s3slice_cdk.contract import FUNCTION_CODE_DIR
from s3slice_cdk.function import (
    HANDLER,
    LayerNotBuiltError,
    ReadFunction,
    ReadFunctionProps,
    check_layer_dir,
    function_environment,
)
from tests.infrastructure.support import bare_stack

pytestmark = pytest.mark.infrastructure

QUERY = {"columns": ["a", "b"], "filter": "a <= 1000"}


def build(layer: Path, **overrides: Any) -> tuple[ReadFunction, Template]:
    stack = bare_stack()
    props: dict[str, Any] = {
        "code_dir": FUNCTION_CODE_DIR, "layer_dir": layer, "query": QUERY,
        "output_uri": "s3://acme-out/results/", "source_uris": ["s3://acme-in/incoming/"],
    }
    construct = ReadFunction(stack, "Reader", props=ReadFunctionProps(**{**props, **overrides}))
    return construct, Template.from_stack(stack)


@pytest.fixture(scope="module")
def default(stand_in_layer: Path) -> tuple[ReadFunction, Template]:
    return build(stand_in_layer)


def test_function_defaults(default: tuple[ReadFunction, Template]) -> None:
    _, template = default
    template.resource_count_is("AWS::Lambda::Function", 1)
    template.has_resource_properties("AWS::Lambda::Function", {
        "Handler": HANDLER,
        "Runtime": "python3.13",
        "Architectures": ["arm64"],
        "MemorySize": 3008,
        "EphemeralStorage": {"Size": 4096},
        "Timeout": 300,
        "TracingConfig": {"Mode": "Active"},
        "Layers": [{"Ref": Match.string_like_regexp("^ReaderDependencies")}],
        "LoggingConfig": {"LogGroup": {"Ref": Match.string_like_regexp("^ReaderLogs")}},
        "ReservedConcurrentExecutions": Match.absent(),
    })


def test_environment_is_the_contract(default: tuple[ReadFunction, Template]) -> None:
    _, template = default
    (function,) = template.find_resources("AWS::Lambda::Function").values()
    assert function["Properties"]["Environment"]["Variables"] == {
        "S3SLICE_QUERY": json.dumps(QUERY, sort_keys=True, separators=(",", ":")),
        "S3SLICE_OUTPUT_URI": "s3://acme-out/results/",
        "S3SLICE_OUTPUT_FORMAT": "parquet",
        "S3SLICE_SOURCE_URIS": "s3://acme-in/incoming/",
        "POWERTOOLS_SERVICE_NAME": "s3slice",
        "POWERTOOLS_METRICS_NAMESPACE": "S3Slice",
        "POWERTOOLS_LOG_LEVEL": "INFO",
    }
    assert json.loads(function_environment(
        query={"sql": "SELECT 1"}, output_uri="s3://b/p/", output_format="json",
        source_uris=["s3://b/a/", "s3://c/"])["S3SLICE_QUERY"]) == {"sql": "SELECT 1"}
    assert function_environment(
        query={}, output_uri="s3://b/p/", output_format="json",
        source_uris=["s3://b/a/", "s3://c/"])["S3SLICE_SOURCE_URIS"] == "s3://b/a/,s3://c/"


def test_layer_matches_runtime_and_architecture(default: tuple[ReadFunction, Template]) -> None:
    _, template = default
    template.resource_count_is("AWS::Lambda::LayerVersion", 1)
    template.has_resource_properties("AWS::Lambda::LayerVersion", {
        "CompatibleRuntimes": ["python3.13"],
        "CompatibleArchitectures": ["arm64"],
    })


def test_role_has_only_logs_and_tracing(default: tuple[ReadFunction, Template]) -> None:
    construct, template = default
    template.resource_count_is("AWS::IAM::Role", 1)
    template.has_resource_properties("AWS::IAM::Role", {
        "AssumeRolePolicyDocument": {"Statement": [{
            "Action": "sts:AssumeRole", "Effect": "Allow",
            "Principal": {"Service": "lambda.amazonaws.com"}}]},
        "ManagedPolicyArns": Match.absent(),
    })
    (policy,) = template.find_resources("AWS::IAM::Policy").values()
    log_group_id = Stack.of(construct).get_logical_id(construct.log_group.node.default_child)
    assert policy["Properties"]["PolicyDocument"]["Statement"] == [
        {"Action": ["logs:CreateLogStream", "logs:PutLogEvents"], "Effect": "Allow",
         "Resource": {"Fn::GetAtt": [log_group_id, "Arn"]}},
        {"Action": ["xray:PutTelemetryRecords", "xray:PutTraceSegments"], "Effect": "Allow",
         "Resource": "*"},
    ]


def test_log_group_has_retention(default: tuple[ReadFunction, Template]) -> None:
    _, template = default
    template.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 30})


def test_exposes_its_resources(default: tuple[ReadFunction, Template]) -> None:
    construct, _ = default
    assert construct.function.role is construct.role
    assert construct.timeout.to_seconds() == 300
    assert construct.layer.layer_version_arn


def test_every_setting_reaches_the_template(stand_in_layer: Path) -> None:
    _, template = build(stand_in_layer, architecture="x86_64", python_version="3.12",
                        memory_size=1769, ephemeral_storage_size=10240, timeout_seconds=900,
                        reserved_concurrency=7, log_retention_days=90,
                        output_format="csv")
    template.has_resource_properties("AWS::Lambda::Function", {
        "Runtime": "python3.12", "Architectures": ["x86_64"], "MemorySize": 1769,
        "EphemeralStorage": {"Size": 10240}, "Timeout": 900,
        "ReservedConcurrentExecutions": 7,
        "Environment": {"Variables": Match.object_like({"S3SLICE_OUTPUT_FORMAT": "csv"})},
    })
    template.has_resource_properties("AWS::Lambda::LayerVersion", {
        "CompatibleRuntimes": ["python3.12"], "CompatibleArchitectures": ["x86_64"]})
    template.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 90})


def test_missing_layer_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(LayerNotBuiltError,
                       match=r"does not exist.*python layers/build\.py --arch x86_64"):
        check_layer_dir(tmp_path / "nope", architecture="x86_64", python_version="3.13")
    with pytest.raises(LayerNotBuiltError, match=r"no python/ subdirectory.*layerDir"):
        check_layer_dir(tmp_path, architecture="arm64", python_version="3.13")
    with pytest.raises(LayerNotBuiltError):
        build(tmp_path / "nope")
