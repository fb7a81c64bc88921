"""The function's code asset: the ``s3slice`` package staged with bytecode for the
runtime's Python (``staging.code_asset``, the layer build's compiler).

In a clone the package is the repository's ``functions/s3slice``; installed, it is the copy
the ``s3slice-cdk`` distribution carries (``s3slice_cdk/function_code/s3slice``, the
engine release the constructs were built with), so the deployed code always matches the
constructs. Either way only the package is staged, under ``build/code-asset`` in a clone
or the user's cache directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from aws_cdk import Annotations
from aws_cdk import aws_lambda as lambda_
from constructs import IConstruct

from .contract import IN_REPOSITORY, REPO_DIR
from .staging.code_asset import StagedCode, stage_code


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "s3slice" / "code-asset"


#: Where the asset is staged at synth (git-ignored in a clone), one directory per content.
CODE_BUILD_DIR = REPO_DIR / "build" / "code-asset" if IN_REPOSITORY else _cache_dir()

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
