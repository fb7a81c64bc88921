"""The layer as ``layers/build.py`` builds it, for the layer tests: the build, its size
report, and what the trim removes (the fixtures that build it are in conftest.py)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from layers.layerbuild.files import iter_files
from layers.layerbuild.layout import SIZE_REPORT

REPO = Path(__file__).resolve().parents[2]
BUILD_PY = REPO / "layers" / "build.py"
#: pyarrow's libraries the trim removes, and its modules; every other ELF file named
#: them (pyarrow links each library into each module) and no longer does.
TRIMMED_PYARROW_LIBS = ("libarrow_acero", "libarrow_dataset", "libarrow_substrait",
                        "libarrow_python_parquet_encryption")
TRIMMED_PYARROW_MODULES = ("acero", "dataset", "substrait", "csv", "json", "feather",
                           "parquet.encryption", "_acero", "_dataset", "_dataset_parquet",
                           "_dataset_parquet_encryption", "_substrait", "_csv", "_json",
                           "_feather", "_parquet_encryption")

#: Some of sqlglot's named dialects (``sqlglot.dialects.DIALECTS``), trimmed with their
#: parsers, generators and type annotations; and all that stays of those packages: the
#: default dialect's import path.
SQLGLOT_NAMED_DIALECTS = ("athena", "bigquery", "clickhouse", "databricks", "duckdb", "hive",
                          "mysql", "postgres", "presto", "snowflake", "spark", "spark2",
                          "sqlite", "trino", "tsql")
SQLGLOT_KEPT = {"dialects": ("__init__", "dialect"), "generators": ("__init__",),
                "parsers": ("__init__", "base"), "typing": ("__init__",)}
#: sqlglot modules the trim removed: the service must not import them (nor name a dialect).
TRIMMED_SQLGLOT_MODULES = ("sqlglot.executor", "sqlglot.planner", "sqlglot.lineage",
                           *(f"sqlglot.{package}.{dialect}" for package in SQLGLOT_KEPT
                             for dialect in SQLGLOT_NAMED_DIALECTS),
                           # the optimizer's predicate pushdown imports Presto and Athena
                           "sqlglot.optimizer.pushdown_predicates",
                           "sqlglot.optimizer.optimizer", "sqlglot.optimizer.optimize")


@dataclasses.dataclass(frozen=True)
class Built:
    """A layer built by ``layers/build.py`` and its size report."""

    out: Path
    report: dict[str, Any]
    log: str

    @property
    def site(self) -> Path:
        return self.out / "python"

    @property
    def machine(self) -> str:
        return str(self.report["machine"])

    def files(self) -> list[str]:
        return [p.relative_to(self.site).as_posix() for p in iter_files(self.site)]

    def dirs(self) -> list[str]:
        return [p.relative_to(self.site).as_posix() for p in self.site.rglob("*") if p.is_dir()]


def _build(*args: str, out: Path) -> Built:
    proc = subprocess.run([sys.executable, str(BUILD_PY), *args, "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=1700, check=False)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"layers/build.py {' '.join(args)} failed:\n{log}"
    report = json.loads((out / SIZE_REPORT).read_text())
    return Built(out=out, report=report, log=log)
