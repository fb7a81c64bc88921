"""Synth refuses what the function would refuse for every object or what CloudFormation
and Lambda would refuse at deploy: a pipeline's or workflow's query that does not parse
or leaves the sandbox (named by construct and S3 Select's error), and a function's props
out of the services' ranges."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3

from s3slice.core.errors import QueryError, RequestError
from s3slice.core.model import parse_query
from s3slice.query.analyzer import analyze
from s3slice.query.check import check_query
from s3slice_cdk import (
    Pipeline,
    PipelineProps,
    ReadFunction,
    ReadFunctionProps,
    SettingsError,
    Workflow,
    WorkflowProps,
)
from tests.infrastructure.support import CDK_DIR, bare_stack

pytestmark = pytest.mark.infrastructure

#: Queries the function refuses for every object, and the error name the message carries.
BAD = [
    ({"sql": "SELECT a FROM s3object WHERE"}, "ParseExpectedExpression"),
    ({"filter": "a >"}, "ParseExpectedExpression"),
    ({"sql": "SELECT * FROM self"}, "ForbiddenQueryError"),
    ({"sql": "SELECT * FROM read_parquet('s3://other/x.parquet')"}, "ForbiddenQueryError"),
    ({"sql": "SELECT a FROM s3object WHERE a IN (SELECT * FROM scan_csv('x'))"},
     "ForbiddenQueryError"),
    ({"filter": "a IN (SELECT b FROM s3object)"}, "ForbiddenQueryError"),
    ({"sql": "DELETE FROM s3object"}, "ForbiddenQueryError"),
    ({"sql": "SELECT (a FROM s3object"}, "FilterSyntaxError"),
    ({"filter": "name = 'open"}, "LexerInvalidLiteral"),
    ({"sql": "SELECT a FROM s3object", "filter": "a > 1"}, "RequestError"),
    ({"columns": ["a", "a"]}, "RequestError"),
    ({"limit": -1}, "RequestError"),
]
GOOD = [
    {},
    {"columns": ["a", "b"], "filter": "a <= 1000"},
    {"filter": "s.tags[0] = 'x' AND name LIKE 'a%'"},
    {"sql": "SELECT region, SUM(v) AS v FROM s3object GROUP BY region"},
    {"sql": "SELECT s.a FROM s3object s WHERE s.b.c > 1 LIMIT 5"},
    {"sql": "SELECT a FROM s3object WHERE d > TO_TIMESTAMP('2024-01-01T00:00:00Z')"},
]


def _pipeline(stack: cdk.Stack, layer: Path, query: dict[str, Any], name: str = "Orders"
              ) -> Pipeline:
    function = ReadFunction(stack, f"{name}Fn", props=ReadFunctionProps(layer_dir=layer))
    return Pipeline(stack, name, props=PipelineProps(
        function=function, source_bucket=s3.Bucket.from_bucket_name(stack, f"{name}In", "acme-in"),
        source_prefix="orders/", output_bucket=s3.Bucket.from_bucket_name(
            stack, f"{name}Out", "acme-out"), output_prefix="results/", query=query))


@pytest.mark.parametrize(("query", "error"), BAD)
def test_a_pipeline_with_a_query_the_function_refuses_fails_at_synth(
        stand_in_layer: Path, query: dict[str, Any], error: str) -> None:
    with pytest.raises(SettingsError) as raised:
        _pipeline(bare_stack(), stand_in_layer, query)
    text = str(raised.value)
    assert text.startswith("Bare/Orders: query: "), text
    assert error in text


@pytest.mark.parametrize("query", GOOD)
def test_a_pipeline_with_a_good_query_synthesizes(stand_in_layer: Path,
                                                  query: dict[str, Any]) -> None:
    stack = bare_stack()
    _pipeline(stack, stand_in_layer, query)
    cdk.assertions.Template.from_stack(stack)


def test_a_workflow_with_a_query_the_function_refuses_fails_at_synth(
        stand_in_layer: Path) -> None:
    stack = bare_stack()
    function = ReadFunction(stack, "Fn", props=ReadFunctionProps(layer_dir=stand_in_layer))
    results = s3.Bucket.from_bucket_name(stack, "Results", "acme-results")
    props: dict[str, Any] = {
        "function": function.function, "default_bucket_name": "acme-in", "default_prefix": "x/",
        "default_output_uri": "s3://acme-out/y/", "results_bucket": results,
        "results_prefix": "runs/"}
    Workflow(stack, "Good", props=WorkflowProps(default_query=GOOD[1], **props))
    with pytest.raises(SettingsError, match=r"^Bare/Scan: query: .*'self'"):
        Workflow(stack, "Scan", props=WorkflowProps(
            default_query={"sql": "SELECT * FROM self"}, **props))


def test_a_pipelines_workflow_carries_the_checked_query(stand_in_layer: Path) -> None:
    """The workflow a pipeline adds takes its query, already refused at the pipeline."""
    stack = bare_stack()
    _pipeline(stack, stand_in_layer, GOOD[3]).add_workflow()
    cdk.assertions.Template.from_stack(stack)


@pytest.mark.parametrize("query", [q for q, _ in BAD] + GOOD + [
    {"filter": "a > 1 AND b < 'x'"}, {"filter": "median(a) > 1"},
    {"sql": "SELECT median(a) OVER () FROM s3object"},
    {"sql": "SELECT a FROM s3object WHERE a IN (1, 2) ORDER BY a DESC LIMIT 3"},
    {"filter": "a >> 1"}, {"sql": "SELECT a, FROM s3object"},
])
def test_synth_refuses_only_what_the_function_refuses(query: dict[str, Any]) -> None:
    """The oracle is the function's own analysis: a query synth refuses, the function
    refuses with the same error type and message."""
    refused: QueryError | RequestError | None = None
    try:
        check_query(query)
    except (QueryError, RequestError) as e:
        refused = e
    if refused is not None:
        with pytest.raises(type(refused)) as raised:
            analyze(parse_query(query))
        assert str(raised.value) == str(refused)


def test_the_check_imports_neither_polars_nor_pyarrow(stand_in_layer: Path) -> None:
    """A CDK app without the engine: polars, pyarrow and obstore cannot even be imported,
    and a bad pipeline still fails, named."""
    script = textwrap.dedent(f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("polars", "pyarrow", "obstore"):
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        from pathlib import Path
        import aws_cdk as cdk
        from aws_cdk import aws_s3 as s3
        from s3slice_cdk import Pipeline, PipelineProps, ReadFunction, ReadFunctionProps
        from s3slice_cdk import SettingsError
        stack = cdk.Stack(cdk.App(), "Stack")
        layer = Path({str(stand_in_layer)!r})
        fn = ReadFunction(stack, "Fn", props=ReadFunctionProps(layer_dir=layer))
        b = s3.Bucket.from_bucket_name(stack, "B", "acme-in")
        o = s3.Bucket.from_bucket_name(stack, "O", "acme-out")
        Pipeline(stack, "Good", props=PipelineProps(function=fn, source_bucket=b,
                 source_prefix="a/", output_bucket=o, output_prefix="r/",
                 query={{"sql": "SELECT a FROM s3object WHERE a > 1"}}))
        try:
            Pipeline(stack, "Bad", props=PipelineProps(function=fn, source_bucket=b,
                     source_prefix="c/", output_bucket=o, output_prefix="s/",
                     query={{"filter": "a >"}}))
        except SettingsError as e:
            print(e)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("polars", "pyarrow"))
        print("heavy:", loaded)
    """)
    # The construct library from cdk/, as an app with the s3slice-cdk wheel has it.
    path = os.pathsep.join(filter(None, [str(CDK_DIR), os.environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": path}, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "Stack/Bad: query: FilterSyntaxError: filter: cannot parse 'a >'" in done.stdout
    assert "heavy: []" in done.stdout


@pytest.mark.parametrize(("props", "prop", "says"), [
    ({"memory_size": 20000}, "memory_size", "128 to 10240"),
    ({"memory_size": 127}, "memory_size", "128 to 10240"),
    ({"ephemeral_storage_size": 511}, "ephemeral_storage_size", "512 to 10240"),
    ({"timeout_seconds": 901}, "timeout_seconds", "1 to 900"),
    ({"timeout_seconds": 3}, "timeout_seconds", "stops 3 s before its timeout"),
    ({"timeout_seconds": 1}, "timeout_seconds", "every invocation would fail"),
    ({"python_version": "3.10"}, "python_version", "3.11, 3.12, 3.13, 3.14"),
    ({"snap_start": True, "ephemeral_storage_size": 4096}, "ephemeral_storage_size",
     "set ephemeral_storage_size=512"),
    ({"snap_start": True, "ephemeral_storage_size": 512, "python_version": "3.11"},
     "python_version", "SnapStart supports"),
    ({"reserved_concurrency": -1}, "reserved_concurrency", "0 or more"),
])
def test_function_props_out_of_lambdas_ranges_fail_at_synth(
        stand_in_layer: Path, props: dict[str, Any], prop: str, says: str) -> None:
    with pytest.raises(SettingsError) as raised:
        ReadFunction(bare_stack(), "Reader", props=ReadFunctionProps(
            layer_dir=stand_in_layer, **props))
    assert str(raised.value).startswith(f"Bare/Reader: {prop}: "), raised.value
    assert says in str(raised.value)


@pytest.mark.parametrize("props", [
    {"memory_size": 128, "timeout_seconds": 4}, {"memory_size": 10240, "timeout_seconds": 900},
    {"snap_start": True, "ephemeral_storage_size": 512, "python_version": "3.12"},
])
def test_function_props_at_lambdas_bounds_synthesize(stand_in_layer: Path,
                                                     props: dict[str, Any]) -> None:
    stack = bare_stack()
    ReadFunction(stack, "Reader", props=ReadFunctionProps(layer_dir=stand_in_layer, **props))
    template = cdk.assertions.Template.from_stack(stack)
    template.has_resource_properties("AWS::Lambda::Function", {
        "MemorySize": props["memory_size"]} if "memory_size" in props else {})


def test_the_apps_timeout_must_outlast_the_functions_margin() -> None:
    from s3slice_app.settings import StackSettings
    with pytest.raises(SettingsError, match="timeoutSeconds: must be between 4 and 900"):
        StackSettings(timeout_seconds=3)
    assert StackSettings(timeout_seconds=4).timeout_seconds == 4


def test_a_missing_layer_speaks_to_a_library_user(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside the repository there is no layers/build.py and no --context layerDir."""
    from s3slice_cdk import function
    monkeypatch.setattr(function, "IN_REPOSITORY", False)
    with pytest.raises(function.LayerNotBuiltError) as raised:
        ReadFunction(bare_stack(), "Reader", props=ReadFunctionProps(
            layer_dir=tmp_path / "missing"))
    text = str(raised.value)
    assert "layers/build.py" not in text and "--context" not in text
    assert "layer_dir" in text and "s3slice-layer-<version>-python3.13-arm64.zip" in text
    monkeypatch.setattr(function, "IN_REPOSITORY", True)
    with pytest.raises(function.LayerNotBuiltError, match="layers/build.py"):
        ReadFunction(bare_stack(), "Reader2", props=ReadFunctionProps(
            layer_dir=tmp_path / "missing"))


# ------------------------------------------------------------------ alarms and outputs
def _warnings(stack: cdk.Stack) -> list[str]:
    found = cdk.assertions.Annotations.from_stack(stack).find_warning(
        "*", cdk.assertions.Match.string_like_regexp(".*alarm_topic.*"))
    return [str(w.entry.data) for w in found]


def test_a_pipeline_without_alarm_topic_is_flagged_at_synth(stand_in_layer: Path) -> None:
    stack = bare_stack()
    _pipeline(stack, stand_in_layer, {})
    [warning] = _warnings(stack)
    assert "Bare/Orders: alarm_topic is not set" in warning and "notify nobody" in warning
    template = cdk.assertions.Template.from_stack(stack)
    for alarm in template.find_resources("AWS::CloudWatch::Alarm").values():
        assert "AlarmActions" not in alarm["Properties"]


def test_a_pipeline_with_alarm_topic_routes_every_alarm(stand_in_layer: Path) -> None:
    from aws_cdk import aws_sns as sns
    stack = bare_stack()
    topic = sns.Topic(stack, "Ops")
    function = ReadFunction(stack, "Fn", props=ReadFunctionProps(layer_dir=stand_in_layer))
    # Two pipelines share the function: its alarms are made once.
    made = [Pipeline(stack, name, props=PipelineProps(
        function=function, source_bucket=s3.Bucket.from_bucket_name(
            stack, f"{name}In", f"acme-{name.lower()}-in"),
        source_prefix="x/", output_bucket=s3.Bucket.from_bucket_name(
            stack, f"{name}Out", f"acme-{name.lower()}-out"), output_prefix="y/",
        alarm_topic=topic)) for name in ("A", "B")]
    made[0].add_workflow()
    assert _warnings(stack) == []
    assert made[0].function_alarms is made[1].function_alarms
    template = cdk.assertions.Template.from_stack(stack)
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    # Two DeadLetters, one workflow's Failures, the function's Errors and Throttles.
    assert len(alarms) == 5
    described = sorted(a["Properties"]["AlarmDescription"].split(":")[1] for a in
                       alarms.values() if a["Properties"]["AlarmDescription"].startswith(
                           "s3slice function"))
    assert described == [" invocations failed (its log's 'message failed' lines say why)",
                         " invocations were throttled (concurrency limits)"]
    for alarm in alarms.values():
        assert len(alarm["Properties"]["AlarmActions"]) == 1
        assert len(alarm["Properties"]["OKActions"]) == 1


def test_each_pipeline_outputs_its_parts(stand_in_layer: Path) -> None:
    stack = bare_stack()
    made = _pipeline(stack, stand_in_layer, {})
    made.add_workflow()
    outputs = cdk.assertions.Template.from_stack(stack).find_outputs("*")
    mine = {o["Description"].split(": ", 1)[1]: o["Value"] for o in outputs.values()
            if o.get("Description", "").startswith("s3slice Bare/Orders")}
    assert made.workflow is not None
    assert mine == {
        "the function its messages invoke": stack.resolve(
            made.props.function.invoked.function_name),
        "the queue of its objects' events": stack.resolve(made.queue.queue_url),
        "the dead-letter queue (inspect and redrive)": stack.resolve(
            made.dead_letter_queue.queue_url),
        "its workflow's state machine (runs the query over the whole prefix)": stack.resolve(
            made.workflow.state_machine.state_machine_arn),
    }


def test_a_standalone_workflow_outputs_its_parts() -> None:
    """A ``Workflow`` of its own has outputs for its state machine, function and log; the
    composing constructs that name them already turn them off."""
    from tests.infrastructure.workflow_construct import build

    workflow, template = build()
    stack = cdk.Stack.of(workflow)
    outputs = template.find_outputs("*")
    mine = {o["Description"].split(": ", 1)[1]: o["Value"] for o in outputs.values()
            if o.get("Description", "").startswith(f"s3slice {workflow.node.path}:")}
    assert mine == {
        "the state machine (start an execution to run the query over a prefix)":
            stack.resolve(workflow.state_machine.state_machine_arn),
        "the function its tasks invoke": "s3slice",  # the name in build()'s function ARN
        "the state machine's execution log": stack.resolve(workflow.log_group.log_group_name),
    }
    _, quiet = build(outputs=False)
    assert quiet.find_outputs("*") == {}
