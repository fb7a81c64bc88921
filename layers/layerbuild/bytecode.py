"""Bytecode for the runtime's Python: every module of the layer compiled by an interpreter
of the target's version, and shipped without its source.

Lambda extracts a layer into /opt, which is read-only, so without bytecode in the layer
every cold start compiles every module it imports from source, and that CPU is billed.
``compileall -b`` writes ``x.pyc`` beside ``x.py`` (the legacy location, which the import
system loads when there is no ``x.py``), and the source is then removed: the bytecode is
larger than the source, and the two together would not fit arm64's bound. The ``.pyc``
files are ``unchecked-hash`` ones, which the import system never compares with a source or
a modification time (the layer is immutable, and the times of extracted files cannot be
trusted). The few sources in ``KEEP_SOURCE`` stay, with their bytecode in ``__pycache__``
(also unchecked, so they are not compiled either).

The file names compiled into the code objects (tracebacks, ``co_filename``) are where the
layer is loaded from: ``/opt/python/...`` for Lambda, the output directory for a native
build. Tracebacks through the layer show file and line but no source line.

The function's code asset (``code_asset``) is compiled by the same interpreter and the
same ``compileall`` call, into ``__pycache__`` beside every source it keeps
(:func:`compile_sources`).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Container
from pathlib import Path
from typing import Any

from .errors import BuildError
from .files import iter_files
from .smoke import find_python
from .target import Target

#: Where Lambda puts a layer's ``python/`` directory (on ``sys.path``).
LAMBDA_SITE = "/opt/python"
#: ``py_compile.PycInvalidationMode.UNCHECKED_HASH``: the header's flags word.
INVALIDATION_MODE = "unchecked-hash"
UNCHECKED_HASH_FLAGS = 0b01

#: Sources that stay in the layer, with their bytecode in ``__pycache__``, because the
#: library behaves differently without them; path -> why.
KEEP_SOURCE: dict[str, str] = {
    "sqlglot/tokenizer_core.py": (
        "sqlglot.tokens takes a tokenizer_core whose __file__ does not end in .py for the "
        "compiled build (sqlglotc) and sets SQLGLOTC_INSTALLED"),
}

#: Run by the target's interpreter: what the build needs to know about it.
_PROBE = ("import importlib.util, json, sys; print(json.dumps({'version': sys.version, "
          "'release': list(sys.version_info[:3]), 'level': sys.version_info.releaselevel, "
          "'implementation': sys.implementation.name, "
          "'cache_tag': sys.implementation.cache_tag, "
          "'magic': importlib.util.MAGIC_NUMBER.hex()}))")


@dataclasses.dataclass(frozen=True)
class Compiler:
    """The interpreter that compiles the layer: a CPython release of the target's version."""

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
    ``BuildError`` naming what to install when there is none, or saying why the one found
    cannot compile Lambda's bytecode."""
    exe = find_python(python)
    if exe is None:
        raise BuildError(
            f"bytecode for Python {python} is compiled by a CPython {python} on this "
            f"machine, and none was found (looked for python{python} on PATH and "
            f"~/.pyenv/versions/{python}*/bin/python{python}). Install one, e.g. "
            f"`pyenv install {python}`")
    probe = subprocess.run([exe, "-I", "-S", "-c", _PROBE], capture_output=True, text=True,
                           timeout=60, check=False)
    if probe.returncode != 0:
        raise BuildError(f"{exe} failed: {probe.stderr.strip()}")
    facts: dict[str, Any] = json.loads(probe.stdout)
    if facts["implementation"] != "cpython" or facts["level"] != "final":
        raise BuildError(f"{exe} is {facts['implementation']} {facts['version']}: Lambda's "
                         f"bytecode needs a final CPython {python} release (Lambda's runtime "
                         "is one; a pre-release's bytecode format may differ)")
    return Compiler(executable=exe, version=facts["version"],
                    release=".".join(map(str, facts["release"])),
                    cache_tag=facts["cache_tag"], magic=bytes.fromhex(facts["magic"]))


def runtime_site(target: Target, out: Path) -> str:
    """Where the runtime loads the layer's ``python/`` from: the file names compiled in."""
    return str(out / "python") if target.native else LAMBDA_SITE


def compile_layer(site: Path, compiler: Compiler, loaded_from: str) -> dict[str, Any]:
    """Compile every ``.py`` of ``site``, remove the sources but ``KEEP_SOURCE``'s, check the
    result, and return what was done for the size report."""
    sources = [p for p in iter_files(site) if p.suffix == ".py"]
    kept = [p for p in sources if _rel(site, p) in KEEP_SOURCE]
    unknown = set(KEEP_SOURCE) - {_rel(site, p) for p in kept}
    if unknown:
        raise BuildError(f"KEEP_SOURCE names {', '.join(sorted(unknown))}, which the layer "
                         "does not have: review the list against the pinned libraries")
    source_bytes = sum(p.stat().st_size for p in sources)
    # every module beside its source, on every core; then the kept ones into __pycache__
    _compileall(compiler, site, loaded_from, "-b", "-j", "0", str(site))
    if kept:
        _compileall(compiler, site, loaded_from, *map(str, kept))
    for path in sources:
        legacy = path.with_suffix(".pyc")
        if not legacy.is_file():
            raise BuildError(f"compileall wrote no bytecode for {_rel(site, path)}")
        if path in kept:
            legacy.unlink()
        else:
            path.unlink()
    problems = check_bytecode(site, compiler.magic, compiler.cache_tag)
    if problems:
        raise BuildError("the layer's bytecode is not what it must be:\n  "
                         + "\n  ".join(problems[:20]))
    compiled = [p for p in iter_files(site) if p.suffix == ".pyc"]
    return {**compiler.describe(), "loaded_from": loaded_from, "modules": len(compiled),
            "sourceless": len(compiled) - len(kept),
            "bytecode_bytes": sum(p.stat().st_size for p in compiled),
            "source_bytes_removed": source_bytes - sum(p.stat().st_size for p in kept),
            "kept_source": {_rel(site, p): KEEP_SOURCE[_rel(site, p)] for p in kept}}


def compile_sources(site: Path, compiler: Compiler, loaded_from: str) -> int:
    """Compile every ``.py`` of ``site`` into its ``__pycache__``, keeping every source (the
    function's code asset), check the result and return how many modules were compiled.
    ``loaded_from`` is where the runtime loads ``site`` from (the file names compiled in)."""
    sources = {_rel(site, p) for p in iter_files(site) if p.suffix == ".py"}
    _compileall(compiler, site, loaded_from, str(site))
    problems = check_bytecode(site, compiler.magic, compiler.cache_tag, kept=sources)
    if problems:
        raise BuildError(f"the bytecode compiled in {site} is not what it must be:\n  "
                         + "\n  ".join(problems[:20]))
    return len(sources)


def _compileall(compiler: Compiler, site: Path, loaded_from: str, *args: str) -> None:
    """``compileall`` into unchecked-hash bytecode, with the file names under ``site``
    compiled in as under ``loaded_from`` (``-s``/``-p``: a code object's ``co_filename``,
    which tracebacks show, is ``py_compile``'s ``dfile``, not the path compiled)."""
    result = subprocess.run([compiler.executable, "-I", "-m", "compileall", "-q",
                             "--invalidation-mode", INVALIDATION_MODE,
                             "-s", str(site), "-p", loaded_from, *args],
                            capture_output=True, text=True, timeout=1200, check=False)
    if result.returncode != 0:
        raise BuildError(f"compileall with {compiler.executable} failed:\n"
                         + (result.stdout + result.stderr)[-4000:])


def _rel(site: Path, path: Path) -> str:
    return path.relative_to(site).as_posix()


def cached_path(source: Path, cache_tag: str) -> Path:
    """Where the import system looks for the bytecode of a source it has (PEP 3147)."""
    return source.parent / "__pycache__" / f"{source.stem}.{cache_tag}.pyc"


def check_bytecode(site: Path, magic: bytes, cache_tag: str, *,
                   kept: Container[str] = KEEP_SOURCE) -> list[str]:
    """What is wrong with the bytecode of ``site``: a source without bytecode or beside it
    (other than ``kept``'s, whose bytecode is in ``__pycache__``: the layer's
    ``KEEP_SOURCE``, or every source of the function's code asset), bytecode of another
    interpreter or that the import system would check against a source, or a cache that
    belongs to no kept source."""
    problems: list[str] = []
    for path in iter_files(site):
        rel = _rel(site, path)
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
                if (_rel(site, source) not in kept
                        or path != cached_path(source, cache_tag)):
                    problems.append(f"{rel}: a cache of no kept source")
    return problems
