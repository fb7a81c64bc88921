"""The function's code asset: ``functions/`` staged with bytecode for the runtime's Python.

The staging is the layer build's (``layers/layerbuild/code_asset.py``: the same
interpreter lookup and ``compileall`` call as the layer's bytecode), which the benchmark
also uses. That package imports nothing but the standard library. In a clone, ``layers/``
is put on ``sys.path`` (last) to import it, as ``layers/build.py`` does; the wheel ships
it as the package ``layerbuild``, and an installed ``s3slice[cdk]`` stages the installed
``s3slice`` package alone (copied out of site-packages) under the user's cache directory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

from aws_cdk import Annotations
from aws_cdk import aws_lambda as lambda_
from constructs import IConstruct

from .contract import FUNCTION_CODE_DIR, FUNCTION_PACKAGE_DIR, IN_REPOSITORY

REPO_DIR = Path(__file__).resolve().parents[2]
LAYERS_DIR = REPO_DIR / "layers"


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "s3slice" / "code-asset"


#: Where the asset is staged at synth (git-ignored in a clone), one directory per content.
CODE_BUILD_DIR = REPO_DIR / "build" / "code-asset" if IN_REPOSITORY else _cache_dir()

if IN_REPOSITORY and str(LAYERS_DIR) not in sys.path:
    sys.path.append(str(LAYERS_DIR))  # installed, the wheel ships layerbuild itself

from layerbuild.code_asset import StagedCode, excluded, stage_code  # noqa: E402

#: The warning added to the function when the asset ships no bytecode.
NO_BYTECODE_WARNING = "s3slice:codeAssetWithoutBytecode"


def installed_package_source(build_dir: Path) -> Path:
    """A directory holding only the installed ``s3slice`` package (a copy, by content)."""
    digest = hashlib.sha256()
    files = sorted(p for p in FUNCTION_PACKAGE_DIR.rglob("*")
                   if p.is_file() and not any(excluded(part) for part in
                                              p.relative_to(FUNCTION_PACKAGE_DIR).parts))
    for path in files:
        digest.update(path.relative_to(FUNCTION_PACKAGE_DIR).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    build_dir.parent.mkdir(parents=True, exist_ok=True)
    source = build_dir.parent / f"source-{digest.hexdigest()[:20]}"
    if not (source / "s3slice").is_dir():
        tmp = build_dir.parent / f".source-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(FUNCTION_PACKAGE_DIR, tmp / "s3slice",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        try:
            tmp.rename(source)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)  # staged by a concurrent synth
    return source


def function_code(function: IConstruct, code_dir: Path, python_version: str, *,
                  build_dir: Path = CODE_BUILD_DIR) -> tuple[lambda_.Code, StagedCode]:
    """The code asset of ``function`` (Python ``python_version``), staged from
    ``code_dir``; with a warning on ``function`` when it has to ship sources only."""
    if not IN_REPOSITORY and code_dir == FUNCTION_CODE_DIR:
        code_dir = installed_package_source(build_dir)  # not the whole site-packages
    staged = stage_code(code_dir, build_dir, python_version)
    if staged.without_bytecode is not None:
        Annotations.of(function).add_warning_v2(
            NO_BYTECODE_WARNING,
            f"The function's code asset ships its {staged.modules} Python sources without "
            f"bytecode, so every cold start compiles them (about 0.15 CPU s, billed): "
            f"{staged.without_bytecode}, then synthesize again.")
    return lambda_.Code.from_asset(str(staged.path)), staged
