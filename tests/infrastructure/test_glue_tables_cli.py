"""``cdk synth --context glueTables=...`` through the CDK CLI (as a user deploys it): the
setting reaches the function's policy and cdk-nag, run by synth itself, stays clean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.infrastructure.test_cli_synth import run_cdk_synth

pytestmark = pytest.mark.infrastructure


def test_cdk_synth_with_glue_tables(tmp_path: Path, stand_in_layer: Path) -> None:
    result = run_cdk_synth(tmp_path, f"layerDir={stand_in_layer}",
                           "glueTables=sales.orders,ops.runs")
    assert result.returncode == 0, result.stderr[-4000:]
    out = tmp_path / "cdk.out"
    template = json.loads((out / "S3Slice.template.json").read_text())
    statements = [s for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Policy"
                  for s in r["Properties"]["PolicyDocument"]["Statement"]
                  if "glue:" in json.dumps(s["Action"])]
    (statement,) = statements
    assert statement["Action"] == "glue:GetTable"
    rendered = ["".join(p if isinstance(p, str) else "<token>" for p in r["Fn::Join"][1])
                for r in statement["Resource"]]
    arn = "arn:<token>:glue:<token>:<token>:"
    assert sorted(rendered) == sorted(f"{arn}{resource}" for resource in (
        "catalog", "database/ops", "database/sales", "table/sales/orders", "table/ops/runs"))
    report = json.loads((out / "validation-report.json").read_text())
    violations = {(plugin["pluginName"], v["ruleName"])
                  for plugin in report.get("pluginReports", [])
                  for v in plugin.get("violations", [])}
    assert violations <= {("Construct Annotations", "Annotation::s3slice:alarms-unsubscribed")}


def test_cdk_synth_refuses_a_glue_table_that_is_not_database_dot_table(
        tmp_path: Path, stand_in_layer: Path) -> None:
    result = run_cdk_synth(tmp_path, f"layerDir={stand_in_layer}", "glueTables=sales.*")
    assert result.returncode != 0
    assert "s3slice: glueTables: 'sales.*' is not 'database.table'" in result.stderr, (
        result.stderr[-4000:])
    assert not (tmp_path / "cdk.out" / "S3Slice.template.json").exists()
