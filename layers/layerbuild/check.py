"""What the finished layer must hold and must not: the static checks of a trimmed,
stripped layer."""

from __future__ import annotations

import fnmatch
from pathlib import Path

from .elf import check_elf_closure
from .errors import BuildError
from .files import iter_files
from .target import Target
from .trim import TRIM_RULES

#: Files that must be in the trimmed layer (globs relative to ``python/``).
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

#: Paths that must not be in the trimmed layer (``fnmatch`` over relative posix paths).
FORBIDDEN: tuple[str, ...] = (
    *(p for rule in TRIM_RULES for p in rule.patterns),
    "pyarrow/libarrow_python.so", "pyarrow/*.so.*.*.*",
)


def check_layer(site: Path, target: Target) -> None:
    """Static checks of a trimmed, stripped layer; raises ``BuildError`` on any problem."""
    problems = [f"missing {g}" for g in REQUIRED if not any(site.glob(g))]
    for path in iter_files(site):
        rel = path.relative_to(site).as_posix()
        parts = rel.split("/")
        prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        hits = [p for p in FORBIDDEN if any(fnmatch.fnmatchcase(x, p) for x in prefixes)]
        if hits:
            problems.append(f"{rel} should have been trimmed ({hits[0]})")
    problems += check_elf_closure(site, target)
    if problems:
        raise BuildError("the layer is broken:\n  " + "\n  ".join(problems))
