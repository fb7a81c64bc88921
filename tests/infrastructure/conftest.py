"""Fixtures for the CDK tests: a stand-in layer, and stacks synthesized once per session;
and for the layer tests (``test_layer*.py``), the real layers, built once per session.

The real layer (``layers/build/<arch>``: 199 MiB for arm64, 225 MiB for x86_64) is built
and measured by ``test_layer.py``; here a tiny directory with ``python/`` stands in for
it, so that synthesis is fast and needs nothing built beforehand.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.infrastructure.support import (
    CDK_DIR,
    IMPORTED_CONTEXT,
    SNAP_START_CONTEXT,
    Synthesized,
    make_stand_in_layer,
    synthesize,
)

if TYPE_CHECKING:
    from tests.infrastructure.layer_build import Built

# jsii's node runtime prints a banner on Node versions past their end of life; the CDK
# works on them all the same. (Set before aws_cdk is first imported.)
for _warning in ("END_OF_LIFE", "DEPRECATED", "UNTESTED"):
    os.environ.setdefault(f"JSII_SILENCE_WARNING_{_warning}_NODE_VERSION",
                          ",".join(str(v) for v in range(14, 30)))

# The app's package lives in cdk/ (``python3 cdk/app.py`` finds it the same way).
if str(CDK_DIR) not in sys.path:
    sys.path.insert(0, str(CDK_DIR))


@pytest.fixture(scope="session")
def stand_in_layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_stand_in_layer(tmp_path_factory.mktemp("layer"))


@pytest.fixture(scope="session")
def default_stack(stand_in_layer: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The stack as ``cdk synth`` makes it with no settings (it creates the data bucket)."""
    return synthesize({"layerDir": str(stand_in_layer)}, tmp_path_factory.mktemp("default"))


@pytest.fixture(scope="session")
def imported_stack(stand_in_layer: Path,
                   tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The stack on existing buckets, with every optional setting given."""
    return synthesize({**IMPORTED_CONTEXT, "layerDir": str(stand_in_layer)},
                      tmp_path_factory.mktemp("imported"))


@pytest.fixture(scope="session")
def snap_start_stack(stand_in_layer: Path,
                     tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The default stack with ``snapStart=true`` (and the 512 MB of /tmp SnapStart allows)."""
    return synthesize({**SNAP_START_CONTEXT, "layerDir": str(stand_in_layer)},
                      tmp_path_factory.mktemp("snap-start"))


@pytest.fixture(scope="session", params=["arm64", "x86_64"])
def layer(request: pytest.FixtureRequest) -> Built:
    """The deployable layer for one architecture, Python 3.13, in layers/build/<arch>."""
    from layers.layerbuild.layout import BUILD_ROOT
    from tests.infrastructure.layer_build import _build

    arch: str = request.param
    built = _build("--arch", arch, "--python", "3.13", out=BUILD_ROOT / arch)
    assert (built.report["arch"], built.report["python"]) == (arch, "3.13")
    return built


@pytest.fixture(scope="session")
def native_layer() -> Built:
    """The same requirements built for this machine and this interpreter."""
    from layers.layerbuild.layout import BUILD_ROOT
    from tests.infrastructure.layer_build import _build

    return _build("--native", out=BUILD_ROOT / "native")
