"""The composed stack: wiring, settings, assets, alarms, bounds, and what fails synth (its
IAM in ``test_stack_iam.py``, ``glueTables`` in ``test_stack_glue_tables.py``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Match

from s3slice_app import NAG_OFF_WARNING, build_app, cdk_json_context
from s3slice_cdk.function import LayerNotBuiltError
from s3slice_cdk.settings import SettingsError
from tests.infrastructure.stack_iam import get_att, ids, join, policy_statements
from tests.infrastructure.support import CDK_DIR, REPO_DIR, Synthesized, state_machine_definition

pytestmark = pytest.mark.infrastructure


# ----------------------------------------------------------------------------- function
def test_function_environment_default(default_stack: Synthesized) -> None:
    i = ids(default_stack)
    function = default_stack.json["Resources"][i["function"]]["Properties"]
    assert function["Environment"]["Variables"] == {
        "S3SLICE_QUERY": "{}",
        "S3SLICE_OUTPUT_URI": join("s3://", {"Ref": i["data"]}, "/results/"),
        "S3SLICE_OUTPUT_FORMAT": "parquet",
        "S3SLICE_SOURCE_URIS": join("s3://", {"Ref": i["data"]}, "/incoming/"),
        "POWERTOOLS_SERVICE_NAME": "s3slice",
        "POWERTOOLS_METRICS_NAMESPACE": "S3Slice",
        "POWERTOOLS_LOG_LEVEL": "INFO",
    }
    assert function["Runtime"] == "python3.13"
    assert function["Architectures"] == ["arm64"]
    assert (function["MemorySize"], function["EphemeralStorage"], function["Timeout"]) == (
        3008, {"Size": 4096}, 300)
    assert function["TracingConfig"] == {"Mode": "Active"}
    assert "ReservedConcurrentExecutions" not in function


def test_function_settings_imported(imported_stack: Synthesized) -> None:
    i = ids(imported_stack)
    function = imported_stack.json["Resources"][i["function"]]["Properties"]
    assert function["Environment"]["Variables"] == {
        "S3SLICE_QUERY": '{"columns":["a","b"],"filter":"a <= 1000"}',
        "S3SLICE_OUTPUT_URI": "s3://acme-results/sliced/",
        "S3SLICE_OUTPUT_FORMAT": "csv",
        "S3SLICE_SOURCE_URIS": ("s3://acme-landing/events/,s3://acme-reference/dim/,"
                                "s3://acme-landing/manual/"),
        "POWERTOOLS_SERVICE_NAME": "s3slice",
        "POWERTOOLS_METRICS_NAMESPACE": "S3Slice",
        "POWERTOOLS_LOG_LEVEL": "INFO",
    }
    assert function["Runtime"] == "python3.12"
    assert function["Architectures"] == ["x86_64"]
    assert (function["MemorySize"], function["EphemeralStorage"], function["Timeout"]) == (
        4096, {"Size": 10240}, 600)
    assert function["ReservedConcurrentExecutions"] == 600
    imported_stack.template.has_resource_properties("AWS::Lambda::LayerVersion", {
        "CompatibleRuntimes": ["python3.12"], "CompatibleArchitectures": ["x86_64"]})
    imported_stack.template.has_resource_properties("AWS::Logs::LogGroup",
                                                    {"RetentionInDays": 14})


def test_code_asset_is_the_functions_package(default_stack: Synthesized) -> None:
    i = ids(default_stack)
    key = default_stack.json["Resources"][i["function"]]["Properties"]["Code"]["S3Key"]
    staged = Path(default_stack.app.outdir) / f"asset.{key.removesuffix('.zip')}"
    assert (staged / "s3slice" / "handler.py").is_file()
    # with its bytecode (test_code_asset.py) and nothing but the package: test_layer.py
    # adds the staged asset's size to the layer's and checks the sum against Lambda's limit
    assert (staged / "s3slice" / "__pycache__").is_dir()
    assert [p.name for p in staged.iterdir()] == ["s3slice"]


# ----------------------------------------------------------------------------- triggers
@pytest.mark.parametrize("which", ["default_stack", "imported_stack"])
def test_output_prefix_can_never_trigger(which: str, request: pytest.FixtureRequest) -> None:
    synth: Synthesized = request.getfixturevalue(which)
    settings = synth.stack.settings
    (notifications,) = synth.resources("Custom::S3BucketNotifications").values()
    configurations = notifications["Properties"]["NotificationConfiguration"][
        "QueueConfigurations"]
    assert len(configurations) == len(settings.source_suffixes)
    for configuration in configurations:
        rules = {r["Name"]: r["Value"] for r in configuration["Filter"]["Key"]["FilterRules"]}
        assert rules["prefix"] == settings.source_prefix
        for written in (settings.output_prefix, settings.workflow_results_prefix):
            same_bucket = settings.output.bucket == settings.source_bucket
            assert not same_bucket or not (written.startswith(rules["prefix"])
                                           or rules["prefix"].startswith(written))


def test_queue_visibility_is_six_times_the_timeout(default_stack: Synthesized,
                                                   imported_stack: Synthesized) -> None:
    for synth, expected in ((default_stack, 6 * 300), (imported_stack, 6 * 600 + 5)):
        queue = synth.json["Resources"][ids(synth)["queue"]]["Properties"]
        assert queue["VisibilityTimeout"] == expected
        assert queue["SqsManagedSseEnabled"] is True


def test_imported_bucket_notifications_keep_existing_ones(imported_stack: Synthesized) -> None:
    (notifications,) = imported_stack.resources("Custom::S3BucketNotifications").values()
    assert notifications["Properties"]["BucketName"] == "acme-landing"
    assert notifications["Properties"]["Managed"] is False


# ----------------------------------------------------------------------------- workflow
def test_workflow_defaults_and_results_location(imported_stack: Synthesized) -> None:
    definition = state_machine_definition(imported_stack.json)
    defaults = definition["States"]["Defaults"]["Parameters"]["defaults"]
    assert defaults == {"bucket": "acme-landing", "prefix": "events/",
                        "query": {"columns": ["a", "b"], "filter": "a <= 1000"},
                        "output": {"uri": "s3://acme-results/sliced/", "format": "csv"},
                        "toleratedFailurePercentage": 10}
    state = definition["States"]["ProcessObjects"]
    assert state["ResultWriter"]["Parameters"] == {"Bucket": "acme-results", "Prefix": "runs/"}
    assert state["MaxConcurrency"] == 500
    assert state["ItemBatcher"]["MaxItemsPerBatch"] == 25
    assert state["ToleratedFailurePercentagePath"] == "$.toleratedFailurePercentage"
    assert "ToleratedFailurePercentage" not in state


@pytest.mark.parametrize("which", ["default_stack", "imported_stack"])
def test_workflow_retries_and_catches_every_error_type_by_name(
        which: str, request: pytest.FixtureRequest) -> None:
    """Step Functions matches ``errorType`` by exact name: the composed template lists every
    name ``s3slice.error_types`` gives, not only the bases of the error tree."""
    from s3slice import error_types

    synth: Synthesized = request.getfixturevalue(which)
    processor = state_machine_definition(synth.json)["States"]["ProcessObjects"][
        "ItemProcessor"]
    task = processor["States"][processor["StartAt"]]
    retried = [error for retrier in task["Retry"] for error in retrier["ErrorEquals"]]
    (catch,) = task["Catch"]
    assert "UnknownColumnError" in catch["ErrorEquals"]
    assert catch["ErrorEquals"] == list(error_types(retryable=False))
    assert set(error_types(retryable=True)) <= set(retried)
    assert not set(retried) & set(catch["ErrorEquals"])
    assert processor["States"][catch["Next"]]["Type"] == "Fail"


# ----------------------------------------------------------------------------- alarms
def warnings(synth: Synthesized) -> list[str]:
    """The CDK warnings on the stack (what synth prints), by their ids."""
    return [str(entry.data) for entry in synth.stack.node.metadata
            if entry.type == "aws:cdk:warning"]


def test_alarms_default_notify_the_stacks_own_topic(default_stack: Synthesized) -> None:
    """Without alarmTopicArn the stack creates a TLS-only topic the five alarms notify, and
    synth warns that nobody is subscribed to it."""
    topic = default_stack.stack.owned_alarm_topic
    assert topic is not None
    ref = {"Ref": default_stack.logical_id(topic)}
    default_stack.template.resource_count_is("AWS::CloudWatch::Alarm", 5)
    default_stack.template.all_resources_properties("AWS::CloudWatch::Alarm", {
        "AlarmActions": [ref], "OKActions": [ref]})
    default_stack.template.resource_count_is("AWS::SNS::Subscription", 0)
    (policy,) = default_stack.resources("AWS::SNS::TopicPolicy").values()
    deny, allow = policy["Properties"]["PolicyDocument"]["Statement"]
    assert (deny["Effect"], deny["Action"]) == ("Deny", "sns:Publish")
    alarms = sorted(default_stack.logical_id(a) for a in default_stack.stack.alarms.all)
    assert allow["Action"] == "sns:Publish"
    assert allow["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert sorted(a["Fn::GetAtt"][0] for a in allow["Condition"]["ArnLike"]["aws:SourceArn"]
                  ) == alarms
    assert default_stack.json["Outputs"]["AlarmTopicArn"]["Value"] == ref
    assert any("no subscriber" in w for w in warnings(default_stack))


def test_alarms_notify_the_topic(imported_stack: Synthesized) -> None:
    topic = "arn:aws:sns:eu-west-1:123456789012:ops-alerts"
    imported_stack.template.all_resources_properties("AWS::CloudWatch::Alarm", {
        "AlarmActions": [topic], "OKActions": [topic]})
    imported_stack.template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "MetricName": "Duration", "ExtendedStatistic": "p99", "Threshold": 0.9 * 600_000})
    imported_stack.template.resource_count_is("AWS::SNS::Topic", 0)
    imported_stack.template.has_resource_properties("AWS::SNS::Subscription", {
        "Protocol": "email", "Endpoint": "ops@acme.example", "TopicArn": topic})
    assert not [w for w in warnings(imported_stack) if "no subscriber" in w]


def test_nag_off_is_announced(default_stack: Synthesized, stand_in_layer: Path,
                              tmp_path: Path) -> None:
    """The fixtures synthesize with nag=false: synth carries the warning; with nag on
    (the default) it does not."""
    assert NAG_OFF_WARNING in "".join(warnings(default_stack))
    _, stack = build_app({**cdk_json_context(), "layerDir": str(stand_in_layer)},
                         outdir=str(tmp_path))
    assert not [e for e in stack.node.metadata
                if e.type == "aws:cdk:warning" and NAG_OFF_WARNING in str(e.data)]


def test_outputs(default_stack: Synthesized) -> None:
    assert set(default_stack.json["Outputs"]) == {
        "FunctionName", "StateMachineArn", "QueueUrl", "DeadLetterQueueUrl", "WatchedUri",
        "OutputUri", "WorkflowResultsUri", "AlarmTopicArn"}


# ----------------------------------------------------------------------------- bounds
def test_concurrency_is_bounded_by_default(default_stack: Synthesized) -> None:
    """The queue may run at most 10 invocations at once and the map 100: together far
    below Lambda's default 1,000 per account."""
    default_stack.template.has_resource_properties("AWS::Lambda::EventSourceMapping", {
        "ScalingConfig": {"MaximumConcurrency": 10}})
    state = state_machine_definition(default_stack.json)["States"]["ProcessObjects"]
    assert state["MaxConcurrency"] == 100


def test_state_machine_times_out(default_stack: Synthesized,
                                 imported_stack: Synthesized) -> None:
    assert state_machine_definition(default_stack.json)["TimeoutSeconds"] == 24 * 3600
    assert state_machine_definition(imported_stack.json)["TimeoutSeconds"] == 6 * 3600


def test_data_bucket_expires_noncurrent_versions(default_stack: Synthesized) -> None:
    i = ids(default_stack)
    bucket = default_stack.json["Resources"][i["data"]]["Properties"]
    assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}
    assert bucket["LifecycleConfiguration"] == {"Rules": [{
        "NoncurrentVersionExpiration": {"NoncurrentDays": 30},
        "ExpiredObjectDeleteMarker": True,
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7},
        "Status": "Enabled"}, {
        # a timed-out function's upload under the output prefix (s3slice_cdk.uploads)
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
        "Prefix": "results/",
        "Status": "Enabled"}]}


def test_variant_settings_reach_the_template(stand_in_layer: Path, tmp_path: Path) -> None:
    """A prefix without its "/" is granted and watched as a folder; a reserved concurrency
    shrinks the map's default to fit beside the queue's; an e-mail subscribes to the
    stack's topic; noncurrentVersionDays reaches the data bucket."""
    from aws_cdk.assertions import Template

    app, stack = build_app({**cdk_json_context(), "nag": False,
                            "layerDir": str(stand_in_layer), "sourcePrefix": "landing",
                            "reservedConcurrency": "50", "alarmEmail": "ops@acme.example",
                            "noncurrentVersionDays": "7"}, outdir=str(tmp_path))
    template = Template.from_stack(stack)
    synth = Synthesized(app=app, stack=stack, template=template, json=template.to_json())
    i = ids(synth)
    (statements,) = policy_statements(synth, i["function_role"]).values()
    (get,) = [s for s in statements if s["Action"] == "s3:GetObject"]
    assert get["Resource"][0] == join(get_att(i["data"]), "/landing/*")
    assert all("_partials/" in json.dumps(r) for r in get["Resource"][1:])
    (notifications,) = synth.resources("Custom::S3BucketNotifications").values()
    for configuration in notifications["Properties"]["NotificationConfiguration"][
            "QueueConfigurations"]:
        assert {"Name": "prefix", "Value": "landing/"} in configuration["Filter"]["Key"][
            "FilterRules"]
    assert state_machine_definition(synth.json)["States"]["ProcessObjects"][
        "MaxConcurrency"] == 40
    template.has_resource_properties("AWS::Lambda::EventSourceMapping", {
        "ScalingConfig": {"MaximumConcurrency": 10}})
    template.has_resource_properties("AWS::Lambda::Function", {
        "ReservedConcurrentExecutions": 50})
    template.has_resource_properties("AWS::SNS::Subscription", {
        "Protocol": "email", "Endpoint": "ops@acme.example",
        "TopicArn": {"Ref": synth.logical_id(stack.owned_alarm_topic)}})
    template.has_resource_properties("AWS::S3::Bucket", {"LifecycleConfiguration": {
        "Rules": Match.array_with([
            Match.object_like({"NoncurrentVersionExpiration": {"NoncurrentDays": 7}})])}})
    assert not [w for w in warnings(synth) if "no subscriber" in w]


def test_stack_is_environment_agnostic(default_stack: Synthesized) -> None:
    assert default_stack.stack.environment == "aws://unknown-account/unknown-region"


# ----------------------------------------------------------------------------- failures
def test_missing_layer_fails_synth_with_instructions(tmp_path: Path) -> None:
    with pytest.raises(LayerNotBuiltError, match=r"python layers/build\.py --arch arm64"):
        build_app({**cdk_json_context(), "layerDir": str(tmp_path / "missing")})


def test_output_inside_watched_prefix_fails_synth(stand_in_layer: Path) -> None:
    with pytest.raises(SettingsError, match="outputPrefix"):
        build_app({**cdk_json_context(), "layerDir": str(stand_in_layer),
                   "sourcePrefix": "data/", "outputPrefix": "data/out/"})


@pytest.mark.parametrize(("context", "key"), [
    ({"sourcePrefix": "landing/", "outputPrefix": "landing*/"}, "outputPrefix"),
    ({"outputPrefix": "*/"}, "outputPrefix"),
    ({"sourceBucket": "my-data", "outputBucket": "my-out", "sourcePrefix": "*"},
     "sourcePrefix"),
    ({"sourcePrefix": "landing/", "workflowResultsPrefix": "land?ng/"},
     "workflowResultsPrefix"),
    ({"readUris": "s3://acme-ref/d*"}, "readUris"),
    ({"sourceBucket": "my-data", "readUris": "s3://my-data/results/"}, "readUris"),
    ({"readUris": "s3://acme-ref"}, "readUris"),
    ({"workflowMaxConcurrency": "1000"}, "eventSourceMaxConcurrency + workflowMaxConcurrency"),
    ({"reservedConcurrency": "20", "workflowMaxConcurrency": "20"},
     "eventSourceMaxConcurrency + workflowMaxConcurrency"),
    ({"kmsKeyArns": "arn:aws:kms:eu-west-1:123456789012:alias/data"}, "kmsKeyArns"),
    ({"glueTables": "sales.orders,sales.*"}, "glueTables"),
    ({"glueTables": "orders"}, "glueTables"),
])
def test_escapes_fail_synth(stand_in_layer: Path, context: dict[str, Any], key: str) -> None:
    """Each context that would grant more than it names (an IAM wildcard, a read of the
    output, a whole bucket) or run more than the budget stops synth, naming the key."""
    with pytest.raises(SettingsError, match=f"^{re.escape(key)}"):
        build_app({**cdk_json_context(), "layerDir": str(stand_in_layer), **context})


def test_app_entry_point_prints_the_reason(tmp_path: Path) -> None:
    """``python3 cdk/app.py`` (what cdk.json runs) exits 1 with the message, no traceback.

    Run as the CLI runs it, in a process of its own: the CLI hands the app its context
    in ``CDK_CONTEXT_JSON``, which CDK reads in its jsii (Node.js) process, so setting the
    variable in this test's process, whose jsii process is already running, would not
    reach it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CDK_", "AWS_"))}
    env["CDK_CONTEXT_JSON"] = json.dumps({"layerDir": str(tmp_path / "none")})
    env["CDK_OUTDIR"] = str(tmp_path / "cdk.out")
    result = subprocess.run([sys.executable, str(CDK_DIR / "app.py")], cwd=REPO_DIR, env=env,
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 1, result.stderr[-3000:]
    message = result.stderr
    assert message.startswith("s3slice: the Lambda layer directory"), message[-3000:]
    assert str(tmp_path / "none") in message
    assert "python layers/build.py --arch arm64" in message
    assert "Traceback" not in message
    assert not (tmp_path / "cdk.out" / "S3Slice.template.json").exists()  # nothing synthesized


def test_app_without_the_cli_has_cdk_json_feature_flags(stand_in_layer: Path,
                                                         tmp_path: Path) -> None:
    """Run without the CLI (no cdk.json context passed in), the app still builds with
    cdk.json's feature flags, so it makes the same stack as ``cdk synth``."""
    app, stack = build_app({"layerDir": str(stand_in_layer), "nag": False},
                           outdir=str(tmp_path))
    for flag, value in cdk_json_context().items():
        assert app.node.try_get_context(flag) == value, flag
    assert stack.access_logs_bucket is not None
