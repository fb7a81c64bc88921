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

The interpreter, the ``compileall`` call and the checks are the construct library's
(``s3slice_cdk.staging.bytecode``, standard library only), which compiles the function's
code asset with them: the function's code and its layer are compiled alike.
"""

from __future__ import annotations

from collections.abc import Container
from pathlib import Path
from typing import Any

from s3slice_cdk.staging import bytecode as shared
from s3slice_cdk.staging.bytecode import (
    INVALIDATION_MODE,
    UNCHECKED_HASH_FLAGS,
    Compiler,
    cached_path,
    find_compiler,
    iter_files,
    relative,
    run_compileall,
)

from .errors import BuildError
from .target import Target

__all__ = ["INVALIDATION_MODE", "KEEP_SOURCE", "LAMBDA_SITE", "UNCHECKED_HASH_FLAGS",
           "Compiler", "cached_path", "check_bytecode", "compile_layer", "find_compiler",
           "runtime_site"]

#: Where Lambda puts a layer's ``python/`` directory (on ``sys.path``).
LAMBDA_SITE = "/opt/python"
#: Sources that stay in the layer, with their bytecode in ``__pycache__``, because the
#: library behaves differently without them; path -> why.
KEEP_SOURCE: dict[str, str] = {
    "sqlglot/tokenizer_core.py": (
        "sqlglot.tokens takes a tokenizer_core whose __file__ does not end in .py for the "
        "compiled build (sqlglotc) and sets SQLGLOTC_INSTALLED"),
}

def runtime_site(target: Target, out: Path) -> str:
    """Where the runtime loads the layer's ``python/`` from: the file names compiled in."""
    return str(out / "python") if target.native else LAMBDA_SITE


def compile_layer(site: Path, compiler: Compiler, loaded_from: str) -> dict[str, Any]:
    """Compile every ``.py`` of ``site``, remove the sources but ``KEEP_SOURCE``'s, check the
    result, and return what was done for the size report."""
    sources = [p for p in iter_files(site) if p.suffix == ".py"]
    kept = [p for p in sources if relative(site, p) in KEEP_SOURCE]
    unknown = set(KEEP_SOURCE) - {relative(site, p) for p in kept}
    if unknown:
        raise BuildError(f"KEEP_SOURCE names {', '.join(sorted(unknown))}, which the layer "
                         "does not have: review the list against the pinned libraries")
    source_bytes = sum(p.stat().st_size for p in sources)
    # every module beside its source, on every core; then the kept ones into __pycache__
    run_compileall(compiler, site, loaded_from, "-b", "-j", "0", str(site))
    if kept:
        run_compileall(compiler, site, loaded_from, *map(str, kept))
    for path in sources:
        legacy = path.with_suffix(".pyc")
        if not legacy.is_file():
            raise BuildError(f"compileall wrote no bytecode for {relative(site, path)}")
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
            "kept_source": {relative(site, p): KEEP_SOURCE[relative(site, p)] for p in kept}}


def check_bytecode(site: Path, magic: bytes, cache_tag: str, *,
                   kept: Container[str] = KEEP_SOURCE) -> list[str]:
    """What is wrong with the layer's bytecode (``KEEP_SOURCE``'s sources kept):
    :func:`s3slice_cdk.staging.bytecode.check_bytecode`."""
    return shared.check_bytecode(site, magic, cache_tag, kept=kept)
