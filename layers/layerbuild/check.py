"""What the finished layer must hold and must not: the static checks of a trimmed,
stripped, compiled layer."""

from __future__ import annotations

import fnmatch
from pathlib import Path

from .elf import check_elf_closure
from .errors import BuildError
from .files import iter_files
from .target import Target
from .trim import TRIM_RULES

#: Files that must be in the trimmed layer (globs relative to ``python/``); a module named
#: ``x.py`` here is there as ``x.pyc`` once compiled (see ``bytecode``).
REQUIRED: tuple[str, ...] = (
    "polars/__init__.py",
    "_polars_runtime_32/_polars_runtime*.so",
    "pyarrow/__init__.py",
    "pyarrow/lib.*.so",
    "pyarrow/_parquet.*.so",
    "pyarrow/_compute.*.so",
    "pyarrow/_fs.*.so",
    "pyarrow/libarrow.so.*",
    "pyarrow/libparquet.so.*",
    "pyarrow/libarrow_compute.so.*",
    "pyarrow/libarrow_python.so.*",
    "pyarrow/compute.py",
    "pyarrow/fs.py",
    "pyarrow/ipc.py",
    "pyarrow/parquet/__init__.py",
    "pyarrow/parquet/core.py",
    "obstore/__init__.py",
    "obstore/_obstore*.so",
    "aws_lambda_powertools/__init__.py",
    "sqlglot/__init__.py",
    "jmespath/__init__.py",
    "typing_extensions.py",
    "aws_xray_sdk/core/__init__.py",
    "wrapt/__init__.py",
    "wrapt/_wrappers.*.so",
    "thriftpy2/__init__.py",
    "thriftpy2/protocol/compact.py",
    "ply/yacc.py",
    "xxhash/__init__.py",
    "xxhash/_xxhash*.so",
)

#: Paths that must not be in the trimmed layer besides what ``TRIM_RULES`` remove
#: (``fnmatch`` over relative posix paths).
FORBIDDEN: tuple[str, ...] = ("pyarrow/libarrow_python.so", "pyarrow/*.so.*.*.*")
#: The trim rules that still hold once the layer is compiled: all but the one that removes
#: the wheels' bytecode (the layer's own is ``bytecode.check_bytecode``'s to judge).
CHECKED_RULES = tuple(rule for rule in TRIM_RULES if rule.name != "bytecode")


def present(site: Path, pattern: str) -> bool:
    """Whether ``pattern`` names a file of ``site``, a ``.py`` module as its source or as
    sourceless bytecode."""
    return any(site.glob(pattern)) or (pattern.endswith(".py") and any(site.glob(pattern + "c")))


def source_name(rel: str) -> str:
    """The source a compiled file stands for: ``a/b.pyc`` and
    ``a/__pycache__/b.cpython-313.pyc`` for ``a/b.py``; any other path for itself."""
    if not rel.endswith(".pyc"):
        return rel
    head, _, name = rel.rpartition("/")
    if head == "__pycache__" or head.endswith("/__pycache__"):
        head = head.removesuffix("__pycache__").rstrip("/")
        name = name.split(".", 1)[0] + ".pyc"
    return f"{head}/{name[:-1]}" if head else name[:-1]


def trimmed_by(rel: str) -> str | None:
    """The trim rule (or ``FORBIDDEN`` pattern) that says ``rel``, the module it compiles, or
    a directory holding it must not be in the layer; ``None`` when it may be."""
    parts = source_name(rel).split("/")
    for candidate in dict.fromkeys(["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
                                   + [rel]):
        rule = next((r.name for r in CHECKED_RULES if r.matches(candidate)), None)
        if rule is None:
            rule = next((p for p in FORBIDDEN if fnmatch.fnmatchcase(candidate, p)), None)
        if rule is not None:
            return rule
    return None


def check_layer(site: Path, target: Target) -> None:
    """Static checks of a trimmed, stripped, compiled layer; raises ``BuildError`` on any
    problem."""
    problems = [f"missing {g}" for g in REQUIRED if not present(site, g)]
    for path in iter_files(site):
        rel = path.relative_to(site).as_posix()
        rule = trimmed_by(rel)
        if rule is not None:
            problems.append(f"{rel} should have been trimmed ({rule})")
    problems += check_elf_closure(site, target)
    if problems:
        raise BuildError("the layer is broken:\n  " + "\n  ".join(problems))
