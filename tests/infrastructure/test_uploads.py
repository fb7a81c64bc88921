"""Incomplete multipart uploads a timed-out function leaves under its output prefix: a
lifecycle rule aborts them where the app defines the output bucket; where it imports it,
synth warns, naming the bucket, the prefix and the rule to add (``s3slice_cdk.uploads``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3

from s3slice_cdk import Pipeline, PipelineProps, ReadFunction, ReadFunctionProps
from s3slice_cdk.uploads import UNMANAGED_WARNING
from tests.infrastructure.support import Synthesized, bare_stack

pytestmark = pytest.mark.infrastructure

ABORT = {"AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}


def _warnings(stack: cdk.Stack) -> list[str]:
    found = cdk.assertions.Annotations.from_stack(stack).find_warning(
        "*", cdk.assertions.Match.string_like_regexp(".*multipart.*"))
    return [str(w.entry.data) for w in found]


def _rules(template: dict[str, Any], bucket: str) -> list[dict[str, Any]]:
    properties = template["Resources"][bucket]["Properties"]
    rules: list[dict[str, Any]] = properties.get("LifecycleConfiguration", {}).get("Rules", [])
    return rules


def _pipelines(stack: cdk.Stack, layer: Path, output: s3.IBucket,
               prefixes: tuple[str, ...]) -> list[Pipeline]:
    function = ReadFunction(stack, "Fn", props=ReadFunctionProps(layer_dir=layer))
    source = s3.Bucket.from_bucket_name(stack, "In", "acme-in")
    made = [Pipeline(stack, f"P{n}", props=PipelineProps(
        function=function, source_bucket=source, source_prefix=f"in{n}/",
        output_bucket=output, output_prefix=prefix)) for n, prefix in enumerate(prefixes)]
    return made


def test_an_output_bucket_of_the_app_gets_one_abort_rule_per_output_prefix(
        stand_in_layer: Path) -> None:
    stack = bare_stack()
    output = s3.Bucket(stack, "Out")
    made = _pipelines(stack, stand_in_layer, output, ("orders/", "clicks/"))
    made[0].add_workflow()  # its partials and answers are under the same prefix
    template = cdk.assertions.Template.from_stack(stack).to_json()
    [bucket] = [k for k, v in template["Resources"].items() if v["Type"] == "AWS::S3::Bucket"]
    assert _rules(template, bucket) == [
        {**ABORT, "Prefix": "orders/", "Status": "Enabled"},
        {**ABORT, "Prefix": "clicks/", "Status": "Enabled"}]
    assert _warnings(stack) == []


def test_an_imported_output_bucket_is_flagged_with_what_to_add(stand_in_layer: Path) -> None:
    stack = bare_stack()
    output = s3.Bucket.from_bucket_name(stack, "Out", "acme-results")
    _pipelines(stack, stand_in_layer, output, ("orders/",))
    [warning] = _warnings(stack)
    assert warning.startswith("Bare/P0: the output bucket acme-results is imported")
    assert "AbortIncompleteMultipartUpload (DaysAfterInitiation 1)" in warning
    assert "prefix 'orders/'" in warning
    entries = stack.node.find_child("P0").node.metadata
    assert any(UNMANAGED_WARNING in str(e.data) for e in entries)


def test_the_apps_stack_aborts_uploads_in_its_bucket_and_warns_for_an_imported_one(
        default_stack: Synthesized, imported_stack: Synthesized) -> None:
    owned = default_stack.logical_id(default_stack.stack.data_bucket)
    prefix = default_stack.stack.settings.output_prefix
    assert {**ABORT, "Prefix": prefix, "Status": "Enabled"} in _rules(
        dict(default_stack.json), owned)
    assert _warnings(default_stack.stack) == []
    [warning] = _warnings(imported_stack.stack)
    assert imported_stack.stack.settings.output.bucket in warning
    assert f"prefix '{imported_stack.stack.settings.output_prefix}'" in warning
