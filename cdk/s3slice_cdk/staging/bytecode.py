"""Bytecode for the runtime's Python, compiled by a CPython of that version.

Lambda loads the function's code from ``/var/task`` and its layers from ``/opt``, both
read-only: without bytecode there, every cold start compiles each module it imports from
source, and that CPU is billed. :func:`compile_sources` compiles a tree with
``compileall`` into ``unchecked-hash`` bytecode (never compared with a source or a
modification time: the code is immutable, and the times of extracted files cannot be
trusted), with the file names the runtime loads it from compiled in; :func:`check_bytecode`
says what is wrong with a compiled tree.

The construct library stages the function's code asset with it (``code_asset``), and the
repository's layer build compiles the layer with it (``layers/layerbuild/bytecode.py``).
Standard library only.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Container, Iterable, Iterator
from pathlib import Path
from typing import Any

#: ``py_compile.PycInvalidationMode.UNCHECKED_HASH``: the header's flags word.
INVALIDATION_MODE = "unchecked-hash"
UNCHECKED_HASH_FLAGS = 0b01


class CompilerError(Exception):
    """No CPython of the runtime's version here, or compiling with it failed."""


#: Run by the interpreter found: what compiling needs to know about it.
_PROBE = ("import importlib.util, json, sys; print(json.dumps({'version': sys.version, "
          "'release': list(sys.version_info[:3]), 'level': sys.version_info.releaselevel, "
          "'implementation': sys.implementation.name, "
          "'cache_tag': sys.implementation.cache_tag, "
          "'magic': importlib.util.MAGIC_NUMBER.hex()}))")


@dataclasses.dataclass(frozen=True)
class Compiler:
    """The interpreter that compiles: a CPython release of the runtime's version."""

    executable: str
    version: str  #: its ``sys.version``
    release: str  #: "3.13.0"
    cache_tag: str  #: "cpython-313"
    magic: bytes  #: the first four bytes of every ``.pyc`` it writes

    def describe(self) -> dict[str, str]:
        return {"python": self.release, "executable": self.executable,
                "magic": self.magic.hex(), "invalidation_mode": INVALIDATION_MODE}


def find_compiler(python: str) -> Compiler:
    """A CPython of version ``python`` ("3.13": ``pythonX.Y`` on PATH, then pyenv's); a
    ``CompilerError`` naming what to install when there is none, or saying why the one found
    cannot compile Lambda's bytecode."""
    exe = find_python(python)
    if exe is None:
        raise CompilerError(
            f"bytecode for Python {python} is compiled by a CPython {python} on this "
            f"machine, and none was found (looked for python{python} on PATH and "
            f"~/.pyenv/versions/{python}*/bin/python{python}). Install one, e.g. "
            f"`pyenv install {python}`")
    probe = subprocess.run([exe, "-I", "-S", "-c", _PROBE], capture_output=True, text=True,
                           timeout=60, check=False)
    if probe.returncode != 0:
        raise CompilerError(f"{exe} failed: {probe.stderr.strip()}")
    facts: dict[str, Any] = json.loads(probe.stdout)
    if facts["implementation"] != "cpython" or facts["level"] != "final":
        raise CompilerError(f"{exe} is {facts['implementation']} {facts['version']}: Lambda's "
                            f"bytecode needs a final CPython {python} release (Lambda's runtime "
                            "is one; a pre-release's bytecode format may differ)")
    return Compiler(executable=exe, version=facts["version"],
                    release=".".join(map(str, facts["release"])),
                    cache_tag=facts["cache_tag"], magic=bytes.fromhex(facts["magic"]))


def find_python(version: str) -> str | None:
    """A CPython ``version`` interpreter for this machine: ``pythonX.Y`` on PATH, or one
    installed by pyenv (whose shims only answer for the selected versions)."""
    candidates: list[str] = []
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == version:
        candidates.append(sys.executable)
    on_path = shutil.which(f"python{version}")
    if on_path:
        candidates.append(on_path)
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates += sorted((str(p) for p in pyenv.glob(f"versions/{version}*/bin/python{version}")),
                         reverse=True)
    for exe in candidates:
        try:
            r = subprocess.run([exe, "-I", "-S", "-c",
                                "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0 and r.stdout.strip() == version:
            return exe
    return None


def compile_sources(site: Path, compiler: Compiler, loaded_from: str) -> int:
    """Compile every ``.py`` of ``site`` into its ``__pycache__``, keeping every source (the
    function's code asset), check the result and return how many modules were compiled.
    ``loaded_from`` is where the runtime loads ``site`` from (the file names compiled in)."""
    sources = {relative(site, p) for p in iter_files(site) if p.suffix == ".py"}
    run_compileall(compiler, site, loaded_from, str(site))
    problems = check_bytecode(site, compiler.magic, compiler.cache_tag, kept=sources)
    if problems:
        raise CompilerError(f"the bytecode compiled in {site} is not what it must be:\n  "
                            + "\n  ".join(problems[:20]))
    return len(sources)


def run_compileall(compiler: Compiler, site: Path, loaded_from: str, *args: str) -> None:
    """``compileall`` into unchecked-hash bytecode, with the file names under ``site``
    compiled in as under ``loaded_from`` (``-s``/``-p``: a code object's ``co_filename``,
    which tracebacks show, is ``py_compile``'s ``dfile``, not the path compiled)."""
    result = subprocess.run([compiler.executable, "-I", "-m", "compileall", "-q",
                             "--invalidation-mode", INVALIDATION_MODE,
                             "-s", str(site), "-p", loaded_from, *args],
                            capture_output=True, text=True, timeout=1200, check=False)
    if result.returncode != 0:
        raise CompilerError(f"compileall with {compiler.executable} failed:\n"
                            + (result.stdout + result.stderr)[-4000:])


def relative(site: Path, path: Path) -> str:
    return path.relative_to(site).as_posix()


def cached_path(source: Path, cache_tag: str) -> Path:
    """Where the import system looks for the bytecode of a source it has (PEP 3147)."""
    return source.parent / "__pycache__" / f"{source.stem}.{cache_tag}.pyc"


def check_bytecode(site: Path, magic: bytes, cache_tag: str, *,
                   kept: Container[str]) -> list[str]:
    """What is wrong with the bytecode of ``site``: a source without bytecode or beside it
    (other than ``kept``'s, whose bytecode is in ``__pycache__``: the layer's
    few kept sources, or every source of the function's code asset), bytecode of another
    interpreter or that the import system would check against a source, or a cache that
    belongs to no kept source."""
    problems: list[str] = []
    for path in iter_files(site):
        rel = relative(site, path)
        if path.suffix == ".py":
            if rel not in kept:
                problems.append(f"{rel}: a source that should not be shipped")
            elif not cached_path(path, cache_tag).is_file():
                problems.append(f"{rel}: no {cache_tag} bytecode in __pycache__")
            if path.with_suffix(".pyc").exists():
                problems.append(f"{rel}: beside its sourceless .pyc")
        elif path.suffix == ".pyc":
            with path.open("rb") as f:
                header = f.read(8)
            if header[:4] != magic:
                problems.append(f"{rel}: bytecode of another Python (magic {header[:4].hex()},"
                                f" not {magic.hex()})")
            elif int.from_bytes(header[4:8], "little") != UNCHECKED_HASH_FLAGS:
                problems.append(f"{rel}: not {INVALIDATION_MODE} bytecode")
            if path.parent.name == "__pycache__":
                source = path.parent.parent / (path.name.split(".", 1)[0] + ".py")
                if (relative(site, source) not in kept
                        or path != cached_path(source, cache_tag)):
                    problems.append(f"{rel}: a cache of no kept source")
    return problems


def iter_files(root: Path, *, skip_dirs: Iterable[str] = ()) -> Iterator[Path]:
    """Regular files under ``root`` (symlinks are not followed), in a stable order; no
    directory whose name matches a ``skip_dirs`` pattern (``fnmatch``, case-sensitive) is
    entered."""
    skip = tuple(skip_dirs)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if not any(fnmatch.fnmatchcase(d, p) for p in skip))
        for name in sorted(filenames):
            path = Path(dirpath, name)
            if path.is_file() and not path.is_symlink():
                yield path

