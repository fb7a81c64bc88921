"""The function's code asset: ``functions/`` staged with bytecode for the runtime's Python.

The staging is the layer build's (``layers/layerbuild/code_asset.py``: the same
interpreter lookup and ``compileall`` call as the layer's bytecode), which the benchmark
also uses. That package imports nothing but the standard library; ``layers/`` is put on
``sys.path`` (last) to import it, as ``layers/build.py`` does.
"""

from __future__ import annotations

import sys
from pathlib import Path

from aws_cdk import Annotations
from aws_cdk import aws_lambda as lambda_
from constructs import IConstruct

REPO_DIR = Path(__file__).resolve().parents[2]
#: Where the asset is staged at synth (git-ignored), one directory per distinct content.
CODE_BUILD_DIR = REPO_DIR / "build" / "code-asset"
LAYERS_DIR = REPO_DIR / "layers"
if str(LAYERS_DIR) not in sys.path:
    sys.path.append(str(LAYERS_DIR))

from layerbuild.code_asset import StagedCode, stage_code  # noqa: E402

#: The warning added to the function when the asset ships no bytecode.
NO_BYTECODE_WARNING = "s3slice:codeAssetWithoutBytecode"


def function_code(function: IConstruct, code_dir: Path, python_version: str, *,
                  build_dir: Path = CODE_BUILD_DIR) -> tuple[lambda_.Code, StagedCode]:
    """The code asset of ``function`` (Python ``python_version``), staged from
    ``code_dir``; with a warning on ``function`` when it has to ship sources only."""
    staged = stage_code(code_dir, build_dir, python_version)
    if staged.without_bytecode is not None:
        Annotations.of(function).add_warning_v2(
            NO_BYTECODE_WARNING,
            f"The function's code asset ships its {staged.modules} Python sources without "
            f"bytecode, so every cold start compiles them (about 0.15 CPU s, billed): "
            f"{staged.without_bytecode}, then synthesize again.")
    return lambda_.Code.from_asset(str(staged.path)), staged
