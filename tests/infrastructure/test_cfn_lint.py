"""cfn-lint on the synthesized templates: no errors, and no warnings but one kind.

W3005 ("dependency already enforced by a GetAtt") is ignored: aws-cdk-lib itself writes an
explicit ``DependsOn`` beside an ``Fn::GetAtt`` to the same resource (a function's and a
state machine's role, the queue of the S3 notifications), to order them with the policies
it also depends on. The redundancy is CDK's, harmless, and not something this app
configures; every other warning still fails the test.
"""

from __future__ import annotations

import json

import pytest
from cfnlint.api import ManualArgs, lint

from tests.infrastructure.support import Synthesized

pytestmark = pytest.mark.infrastructure

#: Regions the default settings (arm64, python3.13) must deploy to.
REGIONS = ["us-east-1", "eu-west-1", "ap-southeast-2"]
#: Checks that flag what aws-cdk-lib generates, not what this app configures (see above).
IGNORED = ["W3005"]


@pytest.mark.parametrize("which", ["default_stack", "imported_stack", "snap_start_stack"])
def test_template_passes_cfn_lint(which: str, request: pytest.FixtureRequest) -> None:
    synth: Synthesized = request.getfixturevalue(which)
    matches = lint(json.dumps(synth.json),
                   config=ManualArgs(regions=REGIONS, ignore_checks=IGNORED))
    findings = [f"{m.rule.id} {m.message} at {'/'.join(map(str, m.path))}" for m in matches]
    errors = [f for f in findings if f.startswith("E")]
    assert errors == []
    assert findings == []
