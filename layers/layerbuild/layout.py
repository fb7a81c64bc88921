"""Where the build reads and writes: the repository's paths and the output's file names."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
LAYERS_DIR = PACKAGE_DIR.parent
REPO_DIR = LAYERS_DIR.parent
REQUIREMENTS = LAYERS_DIR / "requirements.txt"
BUILD_ROOT = LAYERS_DIR / "build"
FUNCTION_DIR = REPO_DIR / "functions" / "s3slice"
#: Run by ``--check`` (see ``smoke``).
SMOKE_CHECK = LAYERS_DIR / "smoke_check.py"
SIZE_REPORT = "layer-size.json"
ZIP_NAME = "layer.zip"


def default_wheel_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "s3slice-layer" / "wheels"
