"""``cdk synth`` through the CDK CLI (cdk.json → ``python3 cdk/app.py``), offline.

The CLI is pinned in ``cdk/package.json`` and installed with ``npm ci --prefix cdk``.
Synth runs with version checks, notices, telemetry and version reporting off and with no
credentials or instance metadata to find, so it makes no network call: the stack is
environment-agnostic and does no lookups.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest

from tests.infrastructure.support import CDK_DIR, REPO_DIR

pytestmark = pytest.mark.infrastructure

CDK_CLI = CDK_DIR / "node_modules" / ".bin" / "cdk"
INSTALL = "npm ci --prefix cdk"


def offline_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "CDK_")) and k != "JSII_RUNTIME"}
    empty = tmp_path / "empty"
    empty.write_text("")
    env.update({
        # cdk.json runs `python3 cdk/app.py`: this interpreter (the venv's) comes first.
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        "CDK_DISABLE_VERSION_CHECK": "1",
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(empty),
        "AWS_SHARED_CREDENTIALS_FILE": str(empty),
        "AWS_REGION": "us-east-1",
        "CI": "true",
    })
    return env


def _missing(reason: str) -> NoReturn:
    """Skip locally; in CI (``make test`` installs the CLI first) a missing CLI fails."""
    if os.environ.get("CI", "").lower() in ("1", "true"):
        pytest.fail(reason)
    pytest.skip(reason)


def run_cdk_synth(tmp_path: Path, *context: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("node") is None:
        _missing(f"node is not installed (the CDK CLI needs Node.js; then `{INSTALL}`)")
    if not CDK_CLI.exists():
        _missing(f"the CDK CLI is not installed: run `{INSTALL}` in the repository root")
    command = [str(CDK_CLI), "synth", "--no-version-reporting", "--no-notices",
               "--no-lookups", "--quiet", "--output", str(tmp_path / "cdk.out")]
    for item in context:
        command += ["--context", item]
    return subprocess.run(command, cwd=REPO_DIR, env=offline_env(tmp_path), text=True,
                          capture_output=True, timeout=900, check=False)


def test_cdk_synth_with_stand_in_layer(tmp_path: Path, stand_in_layer: Path) -> None:
    result = run_cdk_synth(tmp_path, f"layerDir={stand_in_layer}")
    assert result.returncode == 0, result.stderr[-4000:]
    out = tmp_path / "cdk.out"
    template = json.loads((out / "S3Slice.template.json").read_text())
    types = {r["Type"] for r in template["Resources"].values()}
    assert {"AWS::Lambda::Function", "AWS::Lambda::LayerVersion", "AWS::SQS::Queue",
            "AWS::StepFunctions::StateMachine", "AWS::CloudWatch::Alarm"} <= types
    # cdk-nag ran as a validation plugin and found nothing left unacknowledged; the one
    # other entry is the stack's own warning that nobody subscribes to its alarm topic.
    report = json.loads((out / "validation-report.json").read_text())
    violations = {(plugin["pluginName"], v["ruleName"], v.get("severity"))
                  for plugin in report.get("pluginReports", [])
                  for v in plugin.get("violations", [])}
    assert violations <= {("Construct Annotations", "Annotation::s3slice:alarms-unsubscribed",
                           "warning")}
    assert "CDKMetadata" not in template["Resources"]


def test_cdk_synth_says_when_nag_is_off(tmp_path: Path, stand_in_layer: Path) -> None:
    """``--context nag=false`` synthesizes, but the CLI prints that cdk-nag did not run."""
    result = run_cdk_synth(tmp_path, f"layerDir={stand_in_layer}", "nag=false")
    assert result.returncode == 0, result.stderr[-4000:]
    output = result.stdout + result.stderr
    assert "cdk-nag's AwsSolutions checks are OFF" in output, output[-4000:]
