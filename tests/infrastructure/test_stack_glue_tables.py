"""The composed stack with ``glueTables``: ``glue:GetTable`` on exactly those tables
(granted once each), none without them, and cdk-nag still clean."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.infrastructure.stack_iam import ACCOUNT, canonical, ids, join, policy_statements
from tests.infrastructure.support import Synthesized, synthesize

pytestmark = pytest.mark.infrastructure


# ----------------------------------------------------------------------------- glueTables
#: Two tables of one database and one of another, as the command line gives them.
GLUE_TABLES = "sales.orders, sales.items,ops.run_log-2"


@pytest.fixture(scope="module")
def glue_stack(stand_in_layer: Path, tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The default stack with ``glueTables`` (and nothing else) set."""
    return synthesize({"layerDir": str(stand_in_layer), "glueTables": GLUE_TABLES},
                      tmp_path_factory.mktemp("glue"))


def glue_arn(resource: str) -> dict[str, Any]:
    """``arn:${Partition}:glue:${Region}:${AccountId}:<resource>``: this account's catalog."""
    return join("arn:", {"Ref": "AWS::Partition"}, ":glue:", {"Ref": "AWS::Region"}, ":",
                ACCOUNT, f":{resource}")


def test_glue_tables_grant_get_table_on_exactly_those_tables(
        glue_stack: Synthesized, default_stack: Synthesized) -> None:
    """The function's policy is the default's plus one statement: ``glue:GetTable`` on the
    catalog, each named database and each named table, nothing else (no wildcard, no
    other action, no other role)."""
    i = ids(glue_stack)
    (statements,) = policy_statements(glue_stack, i["function_role"]).values()
    glue = [s for s in statements if "glue:" in json.dumps(s["Action"])]
    assert canonical(glue) == canonical([
        {"Action": "glue:GetTable", "Effect": "Allow",
         "Resource": [glue_arn("catalog"), glue_arn("database/ops"), glue_arn("database/sales"),
                      glue_arn("table/sales/orders"), glue_arn("table/sales/items"),
                      glue_arn("table/ops/run_log-2")]}])
    (default,) = policy_statements(default_stack, ids(default_stack)["function_role"]).values()
    assert canonical([s for s in statements if s not in glue]) == canonical(default)
    # ... and no other resource of the stack differs from the default stack's.
    policy = next(name for name in policy_statements(glue_stack, i["function_role"]))
    assert {k: v for k, v in glue_stack.json["Resources"].items() if k != policy} == {
        k: v for k, v in default_stack.json["Resources"].items() if k != policy}
    assert glue_stack.json["Resources"].keys() == default_stack.json["Resources"].keys()
    for name, other in glue_stack.resources("AWS::IAM::Policy").items():
        if name != policy:
            assert "glue:" not in json.dumps(other), name


@pytest.mark.parametrize("which", ["default_stack", "imported_stack", "snap_start_stack"])
def test_no_glue_grant_without_glue_tables(which: str, request: pytest.FixtureRequest) -> None:
    synth: Synthesized = request.getfixturevalue(which)
    assert synth.stack.settings.glue_tables == ()
    assert ":glue:" not in json.dumps(synth.json)
    assert "glue:" not in json.dumps(synth.json)


def test_glue_tables_leave_cdk_nag_clean(glue_stack: Synthesized) -> None:
    from cdk_nag import AwsSolutionsChecks

    report = AwsSolutionsChecks().validate_scope(glue_stack.stack)
    assert [(v.rule_name, [r.template_path for r in v.violating_resources])
            for v in report.violations] == []
    assert report.success


def test_a_duplicated_glue_table_is_granted_once(stand_in_layer: Path, tmp_path: Path) -> None:
    synth = synthesize({"layerDir": str(stand_in_layer),
                        "glueTables": ["sales.orders", "sales.orders"]}, tmp_path)
    (statements,) = policy_statements(synth, ids(synth)["function_role"]).values()
    (glue,) = [s for s in statements if s["Action"] == "glue:GetTable"]
    assert glue["Resource"] == [glue_arn("catalog"), glue_arn("database/sales"),
                                glue_arn("table/sales/orders")]
