"""The construct library's pipelines: one construct in a bare stack, several sharing a
function or not, the stack-wide recursion guard and grant overlap checks, the message a
rule sends as the function reads it, cdk-nag and cfn-lint on a stack of three."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Match, Template
from aws_lambda_powertools.utilities.data_classes import SQSRecord
from cdk_nag import AwsSolutionsChecks
from cfnlint.api import ManualArgs, lint

from s3slice.core.model import ObjectRef
from s3slice.entry import events as function_events
from s3slice.entry.config import refuse_unwatched
from s3slice_app import build_app, cdk_json_context
from s3slice_cdk import (
    FunctionSettings,
    Pipeline,
    PipelineConflictError,
    PipelineProps,
    PipelineWorkflowProps,
    ReadFunction,
    ReadFunctionProps,
    SettingsError,
)
from s3slice_cdk.function import HANDLER
from s3slice_cdk.pipeline import PIPELINE_FIELD
from tests.infrastructure.support import EVENTS_DIR, bare_stack, state_machine_definition

pytestmark = pytest.mark.infrastructure

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


@pytest.fixture(scope="module")
def three(stand_in_layer: Path) -> tuple[cdk.Stack, dict[str, Any]]:
    stack = three_pipelines(stand_in_layer)
    template = Template.from_stack(stack).to_json()
    return stack, template


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


# --------------------------------------------------------------------------- one pipeline
def test_a_pipeline_in_a_bare_stack(stand_in_layer: Path) -> None:
    stack = bare_stack()
    function = reader(stack, "Reader", stand_in_layer)
    pipeline(stack, "Sales", function, "acme-landing/sales/", "acme-results/sales/",
             query=QUERIES[0], source_suffixes=(".parquet",))
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::SQS::Queue", 2)
    template.resource_count_is("AWS::Events::Rule", 1)
    template.resource_count_is("AWS::Lambda::EventSourceMapping", 1)
    # DeadLetters, and the function's Errors and Throttles (issue 38).
    template.resource_count_is("AWS::CloudWatch::Alarm", 3)
    template.has_resource_properties("AWS::Events::Rule", {
        "EventPattern": {
            "source": ["aws.s3"], "detail-type": ["Object Created"],
            "detail": {"bucket": {"name": ["acme-landing"]},
                       "object": {"key": [{"wildcard": "sales/*.parquet"}]}}},
        "Targets": [Match.object_like({
            "DeadLetterConfig": Match.any_value(),
            "InputTransformer": Match.object_like({
                "InputPathsMap": {"detail-type": "$.detail-type", "id": "$.id",
                                  "time": "$.time", "detail": "$.detail"}})})]})
    template.has_resource_properties("AWS::Lambda::EventSourceMapping", {
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
        "ScalingConfig": {"MaximumConcurrency": 10}, "BatchSize": 10})
    template.has_resource_properties("AWS::SQS::Queue", {
        "SqsManagedSseEnabled": True, "VisibilityTimeout": 1800,
        "RedrivePolicy": Match.object_like({"maxReceiveCount": 3})})
    # S3 sends to EventBridge: the imported bucket's notifications switched on.
    template.has_resource_properties("Custom::S3BucketNotifications", {
        "BucketName": "acme-landing",
        "NotificationConfiguration": {"EventBridgeConfiguration": {}}})
    # The function has no query or output of its own: the rule's messages carry them.
    [fn] = readers(template.to_json())
    env = fn["Properties"]["Environment"]["Variables"]
    assert not {"S3SLICE_QUERY", "S3SLICE_OUTPUT_URI", "S3SLICE_SOURCE_URIS"} & set(env)


def test_only_the_rule_may_send_to_the_queue(stand_in_layer: Path) -> None:
    stack = bare_stack()
    function = reader(stack, "Reader", stand_in_layer)
    made = pipeline(stack, "Sales", function, "acme-landing/sales/", "acme-results/sales/")
    policies = resources(Template.from_stack(stack).to_json(), "AWS::SQS::QueuePolicy")
    rule_arn = stack.resolve(made.rule.rule_arn)
    senders = [s for p in policies.values() for s in p["Properties"]["PolicyDocument"]
               ["Statement"] if s["Effect"] == "Allow"]
    assert senders, "the rule's send grant"
    for statement in senders:
        assert statement["Principal"] == {"Service": "events.amazonaws.com"}
        assert statement["Condition"] == {"ArnEquals": {"aws:SourceArn": rule_arn}}


@pytest.mark.parametrize(("suffixes", "prefix", "expected"), [
    ((), "in/", {"key": [{"prefix": "in/"}]}),
    ((".csv",), "", {"key": [{"wildcard": "*.csv"}]}),
    ((".csv", ".json"), "in/", {"key": [{"wildcard": "in/*.csv"}, {"wildcard": "in/*.json"}]}),
    ((), "", None),
])
def test_the_rule_matches_the_prefix_and_suffixes(stand_in_layer: Path, suffixes: Any,
                                                  prefix: str, expected: Any) -> None:
    stack = bare_stack()
    function = reader(stack, "Reader", stand_in_layer)
    pipeline(stack, "P", function, f"acme-landing/{prefix}", "acme-results/out/",
             source_suffixes=suffixes)
    [rule] = resources(Template.from_stack(stack).to_json(), "AWS::Events::Rule").values()
    assert rule["Properties"]["EventPattern"]["detail"].get("object") == expected


@pytest.mark.parametrize(("props", "match"), [
    ({"output_prefix": "out"}, "must end with '/'"),
    ({"output_prefix": ""}, "whole bucket"),
    ({"source_prefix": "in/*/"}, "contains"),
    ({"query": {"nope": 1}}, "unknown keys"),
    ({"query": {"filter": "a<b>c"}}, "placeholder"),
    ({"output_format": "xml"}, "output_format"),
    ({"max_concurrency": 1}, "max_concurrency"),
])
def test_bad_props_are_refused(stand_in_layer: Path, props: dict[str, Any],
                               match: str) -> None:
    stack = bare_stack()
    function = reader(stack, "Reader", stand_in_layer)
    base: dict[str, Any] = {"function": function,
                            "source_bucket": bucket(stack, "acme-landing"),
                            "source_prefix": "in/",
                            "output_bucket": bucket(stack, "acme-results"),
                            "output_prefix": "out/"}
    with pytest.raises(SettingsError, match=match):
        Pipeline(stack, "P", props=PipelineProps(**{**base, **props}))


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


def test_function_settings_are_typed_environment(stand_in_layer: Path) -> None:
    stack = bare_stack()
    reader(stack, "Reader", stand_in_layer, query={"columns": ["a"]},
           output_uri="s3://acme-results/out/",
           settings=FunctionSettings(strategy="ranges", read_ahead_mb=96,
                                     request_timeout_s=12.5))
    [fn] = readers(Template.from_stack(stack).to_json())
    env = fn["Properties"]["Environment"]["Variables"]
    assert {k: env[k] for k in env if k.startswith("S3SLICE_")} == {
        "S3SLICE_QUERY": '{"columns":["a"]}', "S3SLICE_OUTPUT_URI": "s3://acme-results/out/",
        "S3SLICE_OUTPUT_FORMAT": "parquet", "S3SLICE_STRATEGY": "ranges",
        "S3SLICE_READ_AHEAD_MB": "96", "S3SLICE_REQUEST_TIMEOUT_S": "12.5"}


def test_function_settings_name_the_functions_variables() -> None:
    """Every field is a variable the function reads, and its strategies are the function's."""
    import dataclasses
    import typing

    from s3slice.core import settings as _settings
    from s3slice_cdk.tuning import Strategy

    source = Path(_settings.__file__).read_text()
    for field in dataclasses.fields(FunctionSettings):
        assert f"S3SLICE_{field.name.upper()}" in source, field.name
    assert set(typing.get_args(Strategy)) == set(_settings.STRATEGIES)


def test_a_layer_zip_of_another_architecture_is_refused(tmp_path: Path) -> None:
    from s3slice_cdk import LayerNotBuiltError, layer_zip_name

    wrong = tmp_path / layer_zip_name("0.1.0", architecture="x86_64", python_version="3.13")
    wrong.write_bytes(b"PK")
    with pytest.raises(LayerNotBuiltError, match="not built for python3.13 on arm64"):
        reader(bare_stack(), "Reader", wrong)
    right = tmp_path / layer_zip_name("0.1.0", architecture="arm64", python_version="3.13")
    right.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip
    reader(bare_stack(), "Reader", right)



def test_a_pipelines_workflow_in_a_bare_stack(stand_in_layer: Path) -> None:
    stack = bare_stack()
    function = reader(stack, "Reader", stand_in_layer)
    made = pipeline(stack, "Sales", function, "acme-landing/sales/", "acme-results/sales/",
                    query=QUERIES[1])
    made.add_workflow(PipelineWorkflowProps(items_per_batch=7))
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::StepFunctions::StateMachine", 1)
    template.resource_count_is("AWS::CloudWatch::Alarm", 4)  # + the function's two
    definition = state_machine_definition(template.to_json())
    defaults = definition["States"]["Defaults"]["Parameters"]["defaults"]
    assert defaults["bucket"] == "acme-landing"
    assert defaults["prefix"] == "sales/"
    assert defaults["query"] == QUERIES[1]
    assert defaults["output"] == {"uri": "s3://acme-results/sales/", "format": "parquet"}
    machine = grants_of(template.to_json(), "SalesWorkflowStateMachineRole")
    assert machine["s3:PutObject"] == {json.dumps({"Fn::Join": ["", [
        "arn:", {"Ref": "AWS::Partition"}, ":s3:::acme-results/workflow-results/Sales/*"]]},
        sort_keys=True)}
    assert "s3:GetObject" in machine and "s3:DeleteObject" not in machine
    listing = [(name, s["Condition"]["StringLike"]["s3:prefix"])
               for name, p in resources(template.to_json(), "AWS::IAM::Policy").items()
               for s in p["Properties"]["PolicyDocument"]["Statement"]
               if s["Action"] == "s3:ListBucket"]
    # The state machine lists only the source prefix; the function its partials too.
    assert [prefixes for name, prefixes in listing if name.startswith("SalesWorkflow")] == [
        ["sales/*"]]
    assert sorted(prefixes for name, prefixes in listing if name.startswith("Reader")) == [
        ["sales/*"], ["sales/_partials/*", "sales/*/_partials/*"]]
    with pytest.raises(SettingsError, match="added already"):
        made.add_workflow()


def test_a_workflows_results_are_guarded(stand_in_layer: Path) -> None:
    stack = bare_stack()
    function = reader(stack, "Reader", stand_in_layer)
    made = pipeline(stack, "Sales", function, "acme-landing/sales/", "acme-results/sales/")
    pipeline(stack, "Other", function, "acme-results/incoming/", "acme-results/other/")
    with pytest.raises(PipelineConflictError, match="watches"):
        made.add_workflow(PipelineWorkflowProps(results_prefix="incoming/runs/"))
