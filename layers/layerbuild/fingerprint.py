"""The reuse rule: a build is reused only when everything that decides its content is
unchanged: the pins, the target, the bytecode compiler, every file of this package and
the compiling code it shares with the construct library (``s3slice_cdk.staging.bytecode``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

from s3slice_cdk.staging import bytecode as shared_bytecode

from .files import iter_files
from .layout import PACKAGE_DIR
from .target import Target


def package_files(package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """Every file of the build package, in a stable order (bytecode caches left out:
    they are generated, and written by whichever interpreter imported the package)."""
    return [p for p in iter_files(package_dir, skip_dirs=("__pycache__",))
            if p.suffix != ".pyc"]


def fingerprint(target: Target, requirements: Path, strip: bool, compiler: str, *,
                package_dir: Path = PACKAGE_DIR) -> str:
    """What decides the layer's content: the pins, the target, the build's code, and the
    interpreter that compiles the bytecode (``compiler``: its ``sys.version``).

    The code is all of this package, each file by its path and bytes, so that any change
    to the build (a step, a rule, a check, even a message) means a rebuild; nothing needs
    to remember which functions matter."""
    h = hashlib.sha256()
    h.update(requirements.read_bytes())
    h.update(json.dumps([dataclasses.asdict(target), target.platforms(), strip,
                         compiler]).encode())
    for path in package_files(package_dir):
        rel = path.relative_to(package_dir).as_posix().encode()
        data = path.read_bytes()
        h.update(b"%d:%s%d:" % (len(rel), rel, len(data)))
        h.update(data)
    h.update(Path(shared_bytecode.__file__).read_bytes())  # how the layer is compiled
    if target.native:
        h.update(sys.version.encode())
    return h.hexdigest()
