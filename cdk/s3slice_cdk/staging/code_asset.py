"""The function's code asset, staged: a copy of its code with every module's bytecode.

Lambda extracts the code asset into ``/var/task``, which is read-only: without bytecode in
the asset, every cold start compiles each of the function's modules from source (about
0.15 CPU s for s3slice's 65), and that CPU is billed. :func:`stage_code` copies the code
(what ``EXCLUDED`` leaves) and compiles every source with a CPython of the runtime's version
into ``__pycache__/<name>.<cache_tag>.pyc``, ``unchecked-hash``, by ``bytecode``'s
``compileall`` call (the layer build's too). The sources stay: the asset is small, and tracebacks
show their lines (the file names compiled in are ``/var/task/...``, where Lambda loads the
code from).

The construct library stages the asset with it at synth; the layer build (its size
report) and the benchmark stage the code with it, so that they measure what is deployed.
The same inputs make the same files (``compileall`` is deterministic), in a directory
named by their digest: a later call with the same inputs reuses it, and concurrent calls
never write into the same one.

Without an interpreter of the runtime's version here, the asset is staged with its
sources only and ``StagedCode.without_bytecode`` says why (the CDK app warns).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from .bytecode import Compiler, CompilerError, compile_sources, find_compiler, iter_files

#: Where Lambda puts the function's code asset (``LAMBDA_TASK_ROOT``, on ``sys.path``).
LAMBDA_TASK_ROOT = "/var/task"
#: What never goes into the code asset from the source tree, by file or directory name:
#: caches (the bytecode is compiled afresh) and packaging metadata.
EXCLUDED = ("__pycache__", "*.pyc", "*.pyo", ".mypy_cache", ".pytest_cache", ".ruff_cache",
            "*.egg-info", ".DS_Store")
#: Staged directories not used for this long are removed when another is staged.
KEEP_UNUSED_SECONDS = 3600
#: This module and the compiler's: a change to either stages again.
_STAGING_CODE = (Path(__file__), Path(__file__).with_name("bytecode.py"))


@dataclasses.dataclass(frozen=True)
class StagedCode:
    """A staged code asset: ``path`` holds the code, with bytecode when ``compiler``."""

    path: Path
    python: str  #: the runtime's version, "3.13"
    compiler: Compiler | None
    #: Why there is no bytecode (no CPython of the runtime's version here); None with it.
    without_bytecode: str | None
    modules: int  #: sources in the asset

    def describe(self) -> str:
        if self.compiler is None:
            return f"{self.modules} sources, no bytecode: {self.without_bytecode}"
        return (f"{self.modules} sources, each with {self.compiler.cache_tag} unchecked-hash "
                f"bytecode compiled by CPython {self.compiler.release} "
                f"({self.compiler.executable})")


def excluded(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in EXCLUDED)


def shipped_files(source: Path) -> list[Path]:
    """The files of ``source`` that go into the asset (relative paths, in a stable order):
    every regular file but ``EXCLUDED``'s and those in an excluded directory."""
    return [path.relative_to(source) for path in iter_files(source, skip_dirs=EXCLUDED)
            if not excluded(path.name)]


def stage_code(source: Path, build_root: Path, python: str, *,
               loaded_from: str | None = LAMBDA_TASK_ROOT) -> StagedCode:
    """The code of ``source`` staged under ``build_root`` with bytecode for Python
    ``python``, compiled with the file names it has under ``loaded_from`` (None: the staged
    directory itself, for code run where it is staged)."""
    try:
        compiler: Compiler | None = find_compiler(python)
        why_not = None
    except CompilerError as e:
        compiler, why_not = None, str(e)
    files = shipped_files(source)
    digest = hashlib.sha256()
    for part in (compiler.version if compiler else "sources only", loaded_from or "itself"):
        digest.update(part.encode() + b"\0")
    for code in _STAGING_CODE:
        digest.update(code.read_bytes())
    for rel in files:
        digest.update(rel.as_posix().encode() + b"\0")
        digest.update(hashlib.sha256((source / rel).read_bytes()).digest())
    build_root.mkdir(parents=True, exist_ok=True)
    # no dot in the name: the CDK would take what follows it as the asset's extension
    final = build_root / f"python{python.replace('.', '_')}-{digest.hexdigest()[:20]}"
    modules = sum(rel.suffix == ".py" for rel in files)
    staged = StagedCode(path=final, python=python, compiler=compiler,
                        without_bytecode=why_not, modules=modules)
    if final.is_dir():
        os.utime(final)  # in use: not removed as unused
        return staged
    tmp = Path(tempfile.mkdtemp(prefix=".staging-", dir=build_root))
    try:
        tmp.chmod(0o755)  # mkdtemp's 0700 would reach the asset's zip
        for rel in files:
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source / rel, tmp / rel)  # contents and permission bits
        if compiler is not None:
            compile_sources(tmp, compiler, loaded_from or str(final))
        try:
            tmp.rename(final)
        except OSError:
            if not final.is_dir():
                raise
            # staged by a concurrent call from the same inputs
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _remove_unused(build_root, keep=final)
    return staged


def _remove_unused(build_root: Path, *, keep: Path) -> None:
    """Staged directories (and abandoned staging ones) untouched for
    ``KEEP_UNUSED_SECONDS``: each code change stages a new directory."""
    now = time.time()
    for path in build_root.iterdir():
        if path != keep and path.is_dir() and not path.is_symlink():
            try:
                unused = now - path.stat().st_mtime > KEEP_UNUSED_SECONDS
            except OSError:
                continue
            if unused:
                shutil.rmtree(path, ignore_errors=True)

