"""What is removed after pip has installed the wheels, and why: the trim rules, the
duplicate copies of shared libraries under their link-time names, and the ``DT_NEEDED``
entries that name a library the rules removed."""

from __future__ import annotations

import dataclasses
import fnmatch
import os
from pathlib import Path

from .elf import drop_needed, elf_files, read_elf, search_dirs
from .files import path_size, remove


@dataclasses.dataclass(frozen=True)
class TrimRule:
    """Paths (``fnmatch`` patterns over the posix path relative to ``python/``) to remove,
    except those that ``keep`` matches."""

    name: str
    reason: str
    patterns: tuple[str, ...]
    keep: tuple[str, ...] = ()

    def matches(self, rel: str) -> bool:
        return (any(fnmatch.fnmatchcase(rel, p) for p in self.patterns)
                and not any(fnmatch.fnmatchcase(rel, k) for k in self.keep))


#: What is removed after pip has installed the wheels, and why. A pattern matching a
#: directory removes the whole directory.
TRIM_RULES: tuple[TrimRule, ...] = (
    TrimRule("bytecode", "bytecode shipped in the wheels, compiled by and for whichever "
             "interpreter built them; the build compiles the layer's own, for the target's "
             "Python, after trimming (bytecode.py)",
             ("__pycache__", "*/__pycache__", "*.pyc")),
    TrimRule("tests", "test suites and their data",
             ("*/tests", "pyarrow/_pyarrow_cpp_tests.*")),
    TrimRule("headers-and-sources", "C/C++ headers and sources, only needed to build "
             "extensions against pyarrow",
             ("pyarrow/include", "pyarrow/src", "*.h", "*.hpp", "*.hh", "*.cc", "*.cpp",
              "*.c")),
    TrimRule("cython", "Cython sources and declarations, only needed to build extensions",
             ("pyarrow/includes", "*.pyx", "*.pxd", "*.pxi")),
    TrimRule("stubs", "type stubs, read by type checkers only", ("*.pyi",)),
    TrimRule("scripts", "console scripts (jp.py); the layer is imported, never run",
             ("bin",)),
    TrimRule("pyarrow-flight", "Arrow Flight RPC; the service never serves or calls Flight",
             ("pyarrow/_flight.*", "pyarrow/flight.py", "pyarrow/libarrow_flight.so*",
              "pyarrow/libarrow_python_flight.so*")),
    TrimRule("pyarrow-remote-filesystems", "pyarrow's S3/GCS/Azure/HDFS filesystems; S3 is "
             "read with obstore (and boto3), and pyarrow.fs imports these optionally",
             ("pyarrow/_s3fs.*", "pyarrow/libarrow_s3.so*", "pyarrow/_gcsfs.*",
              "pyarrow/_azurefs.*", "pyarrow/_hdfs.*")),
    TrimRule("pyarrow-orc", "ORC reader/writer; the service reads Parquet, CSV and JSON",
             ("pyarrow/_orc.*", "pyarrow/orc.py", "pyarrow/_dataset_orc.*")),
    TrimRule("pyarrow-dataset-acero", "the Dataset API and Acero, its query engine: the "
             "service reads one object at a time through pq.ParquetFile, and pq.read_table "
             "(called without filters, partitioning, schema or a list of files) falls back to "
             "ParquetFile when pyarrow.dataset is absent; Acero serves only Dataset and "
             "Table.join/group_by/filter(Expression), which the service never calls",
             ("pyarrow/dataset.py", "pyarrow/_dataset.*", "pyarrow/_dataset_parquet.*",
              "pyarrow/_dataset_parquet_encryption.*", "pyarrow/libarrow_dataset.so*",
              "pyarrow/acero.py", "pyarrow/_acero.*", "pyarrow/libarrow_acero.so*")),
    TrimRule("pyarrow-substrait", "Substrait query plans; only Dataset and explicit "
             "pyarrow.substrait calls load them",
             ("pyarrow/substrait.py", "pyarrow/_substrait.*", "pyarrow/libarrow_substrait.so*")),
    TrimRule("pyarrow-parquet-encryption", "Parquet modular encryption; the service reads and "
             "writes unencrypted Parquet, and pyarrow.parquet imports these on demand",
             ("pyarrow/parquet/encryption.py", "pyarrow/_parquet_encryption.*",
              "pyarrow/libarrow_python_parquet_encryption.so*")),
    TrimRule("pyarrow-csv-json-feather", "pyarrow's CSV and JSON readers and Feather files: "
             "polars parses CSV and JSON (pyarrow only decompresses them, with libarrow's "
             "codecs), and only polars' use_pyarrow=True, which the service never passes, "
             "imports pyarrow.csv",
             ("pyarrow/csv.py", "pyarrow/_csv.*", "pyarrow/json.py", "pyarrow/_json.*",
              "pyarrow/feather.py", "pyarrow/_feather.*")),
    TrimRule("sqlglot-executor", "sqlglot's Python executor with its planner and Python "
             "generator, and column lineage: only sqlglot.executor.execute and "
             "sqlglot.lineage.lineage, which the service never calls, import them",
             ("sqlglot/executor", "sqlglot/planner.py", "sqlglot/lineage.py",
              "sqlglot/generators/python.py")),
    TrimRule("sqlglot-dialects", "sqlglot's named dialects (BigQuery, DuckDB, Spark, ...) "
             "with their parsers, generators and type annotations: the service parses and "
             "writes SQL only in sqlglot's default dialect (subclassed in "
             "functions/s3slice/query/sqlglot/dialect.py), whose import needs only "
             "dialects/dialect.py, parsers/base.py and the packages' __init__; sqlglot "
             "imports a named dialect only when one is asked for by name (read=, write=, "
             "dialect=, Dialect.get_or_raise)",
             ("sqlglot/dialects/*.py", "sqlglot/generators/*.py", "sqlglot/parsers/*.py",
              "sqlglot/typing/*.py"),
             keep=("sqlglot/*/__init__.py", "sqlglot/dialects/dialect.py",
                   "sqlglot/parsers/base.py")),
    TrimRule("fastavro-writers", "fastavro's compiled writers and validators: the service "
             "only reads Avro (Iceberg's manifests), and fastavro.write, logical_writers and "
             "validation fall back to their pure-Python modules when these are absent",
             ("fastavro/_write.*", "fastavro/_logical_writers.*", "fastavro/_validation.*")),
    TrimRule("ijson-c-backend", "ijson's compiled yajl backend and its libyajl: thriftpy2 "
             "imports ijson only for its Apache JSON protocol, which the service never uses "
             "(Parquet's footers are Thrift's compact protocol), and ijson falls back to its "
             "pure-Python backend when the compiled one is absent",
             ("ijson/backends/_yajl2.*", "ijson.libs")),
    TrimRule("powertools-swagger-ui", "Swagger UI's script and style sheet, served only by "
             "an event handler's enable_swagger(); the service has no HTTP resolver and never "
             "imports aws_lambda_powertools.event_handler",
             ("aws_lambda_powertools/event_handler/openapi/swagger_ui/*.js",
              "aws_lambda_powertools/event_handler/openapi/swagger_ui/*.css")),
)
DUPLICATE_LIBS_RULE = "duplicate-shared-libs"
DUPLICATE_LIBS_REASON = ("copies of a shared library under its link-time names "
                         "(wheels cannot hold symlinks); the loader opens only the SONAME")
UNLINKED_REASON = ("DT_NEEDED entries naming a library a trim rule removed (pyarrow links "
                   "every library into every module); the build's check then proves that "
                   "every undefined symbol is still defined in the file's lookup scope")


@dataclasses.dataclass
class Trimmed:
    """What ``trim`` did: bytes removed per rule, and per ELF file the ``DT_NEEDED``
    entries dropped because they named a removed library."""

    removed: dict[str, int]
    unlinked: dict[str, list[str]]


def trim(site: Path) -> Trimmed:
    """Apply ``TRIM_RULES``, remove duplicate shared libraries, and unlink what the rules
    removed from the ELF files that still name it."""
    sonames = {p: info.soname for p in elf_files(site) if (info := read_elf(p)).soname}
    removed: dict[str, int] = {rule.name: 0 for rule in TRIM_RULES}
    for dirpath, dirnames, filenames in os.walk(site, topdown=True):
        base = Path(dirpath)
        keep: list[str] = []
        for name in sorted(dirnames) + sorted(filenames):
            path = base / name
            rel = path.relative_to(site).as_posix()
            rule = next((r for r in TRIM_RULES if r.matches(rel)), None)
            if rule is None:
                if name in dirnames:
                    keep.append(name)
                continue
            removed[rule.name] += path_size(path)
            remove(path)
        dirnames[:] = keep
    gone = {soname for p, soname in sonames.items() if not p.exists()}
    removed[DUPLICATE_LIBS_RULE] = remove_duplicate_libs(site)
    return Trimmed(removed=removed, unlinked=unlink_removed(site, gone))


def unlink_removed(site: Path, gone: set[str]) -> dict[str, list[str]]:
    """Drop from every ELF file the ``DT_NEEDED`` entries naming a library in ``gone`` that
    it can no longer find; the loader would otherwise refuse to load the file. Whether it
    used any symbol of them is for the build's check (``check_elf_closure``) to say."""
    unlinked: dict[str, list[str]] = {}
    for path in elf_files(site):
        info = read_elf(path)
        dirs = search_dirs(path, info)
        dangling = {lib for lib in info.needed
                    if lib in gone and not any((d / lib).is_file() for d in dirs)}
        if dangling:
            unlinked[path.relative_to(site).as_posix()] = list(drop_needed(path, dangling))
    return unlinked


def remove_duplicate_libs(site: Path) -> int:
    """Remove ``libX.so`` and ``libX.so.N.M.P`` when ``libX.so.N`` (the SONAME, what the
    loader opens) sits beside them and no ELF file in the layer needs them by name."""
    elves = {p: read_elf(p) for p in elf_files(site)}
    needed = {lib for info in elves.values() for lib in info.needed}
    removed = 0
    for path, info in elves.items():
        if (info.soname and path.name != info.soname and path.name not in needed
                and path.name.startswith("lib") and (path.parent / info.soname).is_file()):
            removed += path.stat().st_size
            path.unlink()
    return removed
