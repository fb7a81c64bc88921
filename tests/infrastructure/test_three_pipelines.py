"""Three pipelines in one stack, two sharing a function: the message each rule sends as
the function reads it, each pipeline's own grants, the stack-wide recursion guard and
grant overlap checks, cdk-nag and cfn-lint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from aws_lambda_powertools.utilities.data_classes import SQSRecord
from cdk_nag import AwsSolutionsChecks
from cfnlint.api import ManualArgs, lint

from s3slice.core.model import ObjectRef
from s3slice.entry import events as function_events
from s3slice.entry.config import refuse_unwatched
from s3slice_app import build_app, cdk_json_context
from s3slice_cdk import PipelineConflictError
from s3slice_cdk.pipeline import PIPELINE_FIELD
from tests.infrastructure.pipelines import (
    QUERIES,
    TOPIC,
    grants_of,
    pipeline,
    reader,
    readers,
    resources,
    three_pipelines,
    transform,
)
from tests.infrastructure.support import EVENTS_DIR, bare_stack

pytestmark = pytest.mark.infrastructure


@pytest.fixture(scope="module")
def three(stand_in_layer: Path) -> tuple[cdk.Stack, dict[str, Any]]:
    stack = three_pipelines(stand_in_layer)
    template = Template.from_stack(stack).to_json()
    return stack, template


# --------------------------------------------------------------------- the message it sends
def test_each_rule_sends_its_own_query_and_output_as_the_function_reads_them(
        three: tuple[cdk.Stack, dict[str, Any]]) -> None:
    _, template = three
    rules = resources(template, "AWS::Events::Rule")
    assert len(rules) == 3
    sample = json.loads((EVENTS_DIR / "eventbridge-object-created.json").read_text())
    seen = {}
    for rule in rules.values():
        [target] = rule["Properties"]["Targets"]
        bucket_name = rule["Properties"]["EventPattern"]["detail"]["bucket"]["name"][0]
        event = {**sample, "detail": {**sample["detail"], "bucket": {"name": bucket_name}}}
        body = transform(target, event)
        record = SQSRecord({"messageId": "m", "body": body, "eventSource": "aws:sqs"})
        [obj] = function_events.sqs_body_objects(record)
        assert not isinstance(obj, function_events.Skipped)
        assert (obj.bucket, obj.key) == (bucket_name, sample["detail"]["object"]["key"])
        found = function_events.sqs_body_pipeline(record)
        assert found is not None and found.name is not None
        seen[found.name.rsplit("/", 1)[-1]] = (found, json.loads(body)[PIPELINE_FIELD])
    assert set(seen) == {"Orders", "Clicks", "Audit"}
    for name, query, uri, fmt, source in (
            ("Orders", QUERIES[0], "s3://acme-results/orders/", "parquet",
             ("acme-landing", "orders/")),
            ("Clicks", QUERIES[1], "s3://acme-results/clicks/", "csv",
             ("acme-landing", "clicks/")),
            ("Audit", QUERIES[2], "s3://acme-results/audit/", "parquet", ("acme-audit", ""))):
        found, raw = seen[name]
        assert raw["query"] == query
        assert found.output.uri == uri
        assert found.output.format == fmt
        # Its watched source, against which the function checks each message's object.
        assert found.sources == (source,)
        bucket_name, prefix = source
        inside = ObjectRef(bucket=bucket_name, key=f"{prefix}x.parquet")
        assert refuse_unwatched(inside, found.sources, named_by=name) is None
        outside = [ObjectRef(bucket="acme-other", key=inside.key)]
        if prefix:  # a sibling folder sharing the prefix's letters
            outside.append(ObjectRef(bucket=bucket_name, key=f"{prefix[:-1]}2/x.parquet"))
        for obj in outside:
            assert refuse_unwatched(obj, found.sources, named_by=name) is not None


def test_the_message_field_is_the_functions() -> None:
    assert PIPELINE_FIELD == function_events.PIPELINE_FIELD


# --------------------------------------------------------------------- several pipelines
def test_three_pipelines_two_functions(three: tuple[cdk.Stack, dict[str, Any]]) -> None:
    _, template = three
    assert len(readers(template)) == 2
    assert len(resources(template, "AWS::SQS::Queue")) == 6
    mappings = resources(template, "AWS::Lambda::EventSourceMapping")
    assert len(mappings) == 3
    alarms = resources(template, "AWS::CloudWatch::Alarm")
    # Three dead-letter queues, one workflow, and each of the two functions' Errors and
    # Throttles (issue 38).
    assert len(alarms) == 8
    for alarm in alarms.values():
        assert alarm["Properties"]["AlarmActions"] == [TOPIC]


def test_grants_are_each_pipelines_own(three: tuple[cdk.Stack, dict[str, Any]]) -> None:
    _, template = three

    def arn(bucket_and_prefix: str) -> str:
        return json.dumps({"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"},
                                             f":s3:::{bucket_and_prefix}*"]]}, sort_keys=True)

    shared, own = grants_of(template, "SharedRole"), grants_of(template, "OwnRole")
    assert shared["s3:GetObject"] == {arn("acme-landing/orders/"), arn("acme-landing/clicks/")}
    assert shared["s3:PutObject"] == {arn("acme-results/orders/"), arn("acme-results/clicks/")}
    assert own["s3:GetObject"] == {arn("acme-audit/"), arn("acme-results/audit/_partials/"),
                                   arn("acme-results/audit/*/_partials/")}
    assert own["s3:PutObject"] == {arn("acme-results/audit/")}
    assert shared["s3:DeleteObject"] == shared["s3:PutObject"]
    # Nothing readable is writable (but the workflow's partials, under the output).
    assert not shared["s3:GetObject"] & shared["s3:PutObject"]
    assert own["s3:GetObject"] & own["s3:PutObject"] == set()


@pytest.mark.parametrize(("layout", "conflict"), [
    # two pipelines, one function
    ([("a", "src/in/a/", "src/out/a/"), ("a", "src/in/b/", "src/out/b/")], None),
    ([("a", "src/in/a/", "src/out/a/"), ("a", "src/in/b/", "src/in/a/x/")], "watches"),
    ([("a", "src/in/a/", "src/out/a/"), ("a", "src/", "other/out/")], "watches"),
    ([("a", "src/in/a/", "src/out/a/"), ("a", "src/in/b/", "src/out/")], "output"),
    ([("a", "src/in/", "src/in/out/")], "watches"),
    # two pipelines, two functions: the guard is the stack's, not the function's
    ([("a", "src/in/a/", "src/out/a/"), ("b", "src/in/b/", "src/in/a/")], "watches"),
    ([("a", "src/in/a/", "src/out/a/"), ("b", "src/out/", "dst/out/")], "watches"),
    ([("a", "src/in/a/", "dst/a/"), ("b", "src/in/b/", "dst/b/")], None),
    # three pipelines
    ([("a", "src/in/a/", "dst/a/"), ("a", "src/in/b/", "dst/b/"), ("b", "dst/", "xyz/y/")],
     "watches"),
    ([("a", "src/in/a/", "dst/a/"), ("a", "src/in/b/", "dst/b/"), ("b", "src/in/c/", "dst/b/c/")],
     "output"),
    ([("a", "src/in/a/", "dst/a/"), ("a", "src/in/b/", "dst/b/"), ("b", "src/in/c/", "dst/c/")],
     None),
    ([("a", "src/", "dst/a/"), ("b", "other/", "dst/b/"), ("b", "third/", "src/deep/out/")],
     "watches"),
])
def test_pipelines_of_a_stack_never_feed_or_share_each_other(
        stand_in_layer: Path, layout: list[tuple[str, str, str]], conflict: str | None) -> None:
    stack = bare_stack()
    functions = {name: reader(stack, f"Fn{name}", stand_in_layer)
                 for name in sorted({f for f, _, _ in layout})}

    def build() -> None:
        for number, (fn, source, output) in enumerate(layout):
            pipeline(stack, f"P{number}", functions[fn], source, output)

    if conflict is None:
        build()
        template = Template.from_stack(stack).to_json()
        assert len(resources(template, "AWS::Events::Rule")) == len(layout)
    else:
        with pytest.raises(PipelineConflictError, match=conflict):
            build()


def test_a_pipeline_added_to_the_apps_stack_is_guarded_too(stand_in_layer: Path,
                                                           tmp_path: Path) -> None:
    """The repository's stack registers its watched prefix, readUris and outputs."""
    _, stack = build_app({**cdk_json_context(), "nag": False, "layerDir": str(stand_in_layer),
                          "sourceBucket": "acme-landing", "outputBucket": "acme-results"},
                         outdir=str(tmp_path))
    with pytest.raises(PipelineConflictError, match="watches"):
        pipeline(stack, "Extra", stack.read_function, "other-bucket/in/",
                 "acme-landing/incoming/x/")
    with pytest.raises(PipelineConflictError, match="output"):
        pipeline(stack, "Extra2", stack.read_function, "other-bucket/in/",
                 "acme-results/results/mine/")
    pipeline(stack, "Fine", stack.read_function, "other-bucket/in/", "acme-results/mine/")


# --------------------------------------------------------------------- nag and cfn-lint
def test_three_pipelines_pass_cdk_nag_with_the_existing_acknowledgments(
        three: tuple[cdk.Stack, dict[str, Any]], stand_in_layer: Path) -> None:
    stack, _ = three
    report = AwsSolutionsChecks().validate_scope(stack)
    assert [(v.rule_name, [r.template_path for r in v.violating_resources])
            for v in report.violations] == []
    # Every acknowledgment is one the repository's stack makes, with the same reason.
    from s3slice_cdk.nag import PARTIALS_REASON, PREFIX_REASON, RUNTIME_REASON, XRAY_REASON

    reasons = {entry.data[rule] for node in stack.node.find_all()
               for entry in node.node.metadata if entry.type == "aws:cdk:acknowledged-rules"
               for rule in entry.data}
    handler = {r for r in reasons if "Custom::S3BucketNotifications" in r}
    workflow = {r for r in reasons if "Step Functions" in r or "Map Run" in r
                or "Distributed Map" in r or "LambdaInvoke" in r}
    assert reasons - handler - workflow == {PREFIX_REASON, XRAY_REASON, PARTIALS_REASON,
                                            RUNTIME_REASON.format(version="3.13")}
    assert len(handler) == 2
    # The workflow's, word for word those of the repository's stack.
    _, app_stack = build_app({**cdk_json_context(), "nag": False,
                              "layerDir": str(stand_in_layer)})
    assert workflow <= {a.reason for a in app_stack.nag_acknowledgments}
    # Logs and X-Ray, the results prefix, a table's items in _partials/, child
    # executions, Map Runs; no ``function:*`` invoke grant to acknowledge: the SnapStart
    # function's tasks invoke its alias.
    assert len(workflow) == 5


def test_three_pipelines_pass_cfn_lint(three: tuple[cdk.Stack, dict[str, Any]]) -> None:
    _, template = three
    matches = lint(json.dumps(template),
                   config=ManualArgs(regions=["us-east-1", "eu-west-1"],
                                     ignore_checks=["W3005"]))
    assert [f"{m.rule.id} {m.message}" for m in matches] == []
