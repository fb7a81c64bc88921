"""The example app (``examples/two_pipelines``): a user's own CDK app with two pipelines
sharing one function, synthesized through the CDK CLI with cdk-nag as a plugin, then
checked: its stack id and names are the app's, each rule carries its own query."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.infrastructure.support import CDK_DIR, REPO_DIR
from tests.infrastructure.test_cli_synth import CDK_CLI, _missing, offline_env

pytestmark = pytest.mark.infrastructure

EXAMPLE_DIR = REPO_DIR / "examples" / "two_pipelines"


def synth_example(tmp_path: Path, layer: Path, *context: str,
                  python_path: str | None = str(CDK_DIR)) -> subprocess.CompletedProcess[str]:
    if not CDK_CLI.exists():
        _missing("the CDK CLI is not installed: run `npm ci --prefix cdk`")
    env = offline_env(tmp_path)
    if python_path is not None:
        env["PYTHONPATH"] = python_path  # s3slice_cdk from the clone (installed: no need)
    command = [str(CDK_CLI), "synth", "--no-version-reporting", "--no-notices",
               "--no-lookups", "--quiet", "--output", str(tmp_path / "cdk.out"),
               "--context", f"layer={layer}"]
    for item in context:
        command += ["--context", item]
    return subprocess.run(command, cwd=EXAMPLE_DIR, env=env, text=True,
                          capture_output=True, timeout=900, check=False)


def check_example_output(out: Path, stack_name: str) -> dict[str, Any]:
    """The synthesized example: two pipelines on one function, cdk-nag clean."""
    template = json.loads((out / f"{stack_name}.template.json").read_text())
    resources = template["Resources"]
    rules = [r for r in resources.values() if r["Type"] == "AWS::Events::Rule"]
    assert len(rules) == 2
    templates = [r["Properties"]["Targets"][0]["InputTransformer"]["InputTemplate"]
                 for r in rules]
    assert any("orders-large/" in t and "amount >= 100" in t for t in templates)
    assert any("clicks-by-page/" in t and "GROUP BY page" in t for t in templates)
    functions = [r for r in resources.values() if r["Type"] == "AWS::Lambda::Function"
                 and r["Properties"].get("Handler") == "s3slice.handler.lambda_handler"]
    assert len(functions) == 1
    mappings = [r for r in resources.values()
                if r["Type"] == "AWS::Lambda::EventSourceMapping"]
    assert len(mappings) == 2
    assert sum(r["Type"] == "AWS::StepFunctions::StateMachine" for r in resources.values()) == 1
    report = json.loads((out / "validation-report.json").read_text())
    violations = [(plugin["pluginName"], v["ruleName"])
                  for plugin in report.get("pluginReports", [])
                  for v in plugin.get("violations", [])]
    assert violations == []
    return template


def test_the_example_app_synthesizes_through_the_cli(tmp_path: Path,
                                                     stand_in_layer: Path) -> None:
    result = synth_example(tmp_path, stand_in_layer, "stackName=TeamSlices")
    assert result.returncode == 0, result.stderr[-4000:]
    assert not (tmp_path / "cdk.out" / "S3Slice.template.json").exists()
    check_example_output(tmp_path / "cdk.out", "TeamSlices")


def test_the_example_app_asks_for_its_layer() -> None:
    env = {**os.environ, "PYTHONPATH": str(CDK_DIR)}
    result = subprocess.run([sys.executable, "app.py"], cwd=EXAMPLE_DIR, env=env, text=True,
                            capture_output=True, timeout=300, check=False)
    assert result.returncode == 1
    assert "--context layer=PATH" in result.stderr


THREE_PIPELINES_APP = '''
import sys

import aws_cdk as cdk
import cdk_nag

from tests.infrastructure.pipelines import three_pipelines

stack = three_pipelines(Path(sys.argv[1]))
if len(sys.argv) > 2:  # the control: one grant no acknowledgment covers
    from aws_cdk import aws_iam as iam

    role = stack.node.find_child("Shared").node.find_child("Role")
    iam.Policy(stack, "Extra", roles=[role], statements=[iam.PolicyStatement(
        actions=["s3:GetObject"], resources=["arn:aws:s3:::acme-landing/*"])])
# As a team does once its buckets abort incomplete uploads by a rule of their own.
cdk.Annotations.of(stack).acknowledge_warning(
    "s3slice:multipartUploadsUnmanaged", "the buckets' own lifecycle rules abort uploads")
app = stack.node.root
cdk.Validations.of(app).add_plugins(cdk_nag.AwsSolutionsChecks(app, verbose=True))
app.synth()
'''


def test_three_pipelines_synthesize_through_the_cli_with_nag_and_cfn_lint(
        tmp_path: Path, stand_in_layer: Path) -> None:
    """test_pipeline.py's stack of three pipelines (two functions), as an app of its own."""
    from cfnlint.api import ManualArgs, lint

    if not CDK_CLI.exists():
        _missing("the CDK CLI is not installed: run `npm ci --prefix cdk`")
    app = tmp_path / "three.py"
    app.write_text("from pathlib import Path\n" + THREE_PIPELINES_APP)
    env = {**offline_env(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(REPO_DIR), str(CDK_DIR)])}

    def synth(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(CDK_CLI), "synth", "--app",
             " ".join([sys.executable, str(app), str(stand_in_layer), *extra]),
             "--no-version-reporting", "--no-notices", "--no-lookups", "--quiet",
             "--output", str(tmp_path / "cdk.out")],
            cwd=tmp_path, env=env, text=True, capture_output=True, timeout=900, check=False)

    # The control: cdk-nag runs in this synth, and one unacknowledged wildcard fails it.
    control = synth("unacknowledged")
    assert control.returncode != 0
    assert "AwsSolutions-IAM5" in control.stdout + control.stderr
    result = synth()
    assert result.returncode == 0, result.stderr[-4000:]
    out = tmp_path / "cdk.out"
    report = json.loads((out / "validation-report.json").read_text())
    assert [v["ruleName"] for plugin in report.get("pluginReports", [])
            for v in plugin.get("violations", [])] == []
    template = json.loads((out / "Bare.template.json").read_text())
    assert sum(r["Type"] == "AWS::Events::Rule" for r in template["Resources"].values()) == 3
    matches = lint(json.dumps(template), config=ManualArgs(regions=["us-east-1"],
                                                           ignore_checks=["W3005"]))
    assert [f"{m.rule.id} {m.message}" for m in matches] == []


def test_the_readmes_library_example_synthesizes(tmp_path: Path, stand_in_layer: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """cdk/README.md's example stack, as written, with a stand-in for its layer zip."""
    import re
    import zipfile

    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    text = (CDK_DIR / "README.md").read_text()
    section = text[text.index("## A first app"):]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert code is not None
    layer = re.search(r'layer_dir=Path\("([^"]+)"\)', code[1])
    assert layer is not None
    with zipfile.ZipFile(tmp_path / layer[1], "w") as archive:
        for path in sorted(stand_in_layer.rglob("*")):
            archive.write(path, path.relative_to(stand_in_layer).as_posix())
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    exec(compile(code[1], "cdk/README.md", "exec"), namespace)  # noqa: S102
    stack = namespace["Slices"](cdk.App(), "Slices")
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::Events::Rule", 2)
    template.resource_count_is("AWS::Lambda::EventSourceMapping", 2)
