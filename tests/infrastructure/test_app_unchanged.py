"""``cdk synth`` with today's context gives today's resources: the repository's app, now a
user of the construct library, synthesizes the same templates as before the library
(``baseline/*.json``, synthesized from the code before the refactoring).

Only content hashes are normalized: the code asset's key (the function's code changes
with every commit) and the SnapStart version's logical id, which CDK derives from it.
A deliberate change to the app's resources updates the baselines:
``python -m tests.infrastructure.test_app_unchanged`` rewrites them.
"""

from __future__ import annotations

import collections
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.infrastructure.support import Synthesized

pytestmark = pytest.mark.infrastructure

BASELINE_DIR = Path(__file__).resolve().parent / "baseline"
STACKS = {"default": "default_stack", "imported": "imported_stack", "snap": "snap_start_stack"}


def normalized(template: Any) -> str:
    text = json.dumps(template, indent=1, sort_keys=True)
    text = re.sub(r"[0-9a-f]{64}\.zip", "<asset>.zip", text)
    text = re.sub(r"(CurrentVersion[0-9A-F]{8})[0-9a-f]{32}", r"\1<hash>", text)
    return text + "\n"


@pytest.mark.parametrize("name", sorted(STACKS))
def test_the_apps_template_is_unchanged(name: str, request: pytest.FixtureRequest) -> None:
    synth: Synthesized = request.getfixturevalue(STACKS[name])
    baseline = (BASELINE_DIR / f"{name}.json").read_text()
    before, after = json.loads(baseline), json.loads(normalized(synth.json))
    count = collections.Counter
    assert count(r["Type"] for r in after["Resources"].values()) == count(
        r["Type"] for r in before["Resources"].values())
    assert sorted(after["Resources"]) == sorted(before["Resources"])  # the logical ids
    for logical_id, resource in before["Resources"].items():
        assert after["Resources"][logical_id] == resource, logical_id
    assert after == before


if __name__ == "__main__":  # rewrite the baselines from the current code
    from tests.infrastructure.support import (
        IMPORTED_CONTEXT,
        SNAP_START_CONTEXT,
        make_stand_in_layer,
        synthesize,
    )

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cdk"))
    root = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp())
    layer = make_stand_in_layer(root / "layer")
    for name, context in (("default", {}), ("imported", IMPORTED_CONTEXT),
                          ("snap", SNAP_START_CONTEXT)):
        synth = synthesize({**context, "layerDir": str(layer)}, root / name)
        (BASELINE_DIR / f"{name}.json").write_text(normalized(synth.json))
