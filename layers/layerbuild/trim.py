"""What is removed after pip has installed the wheels, and why: the trim rules, and the
duplicate copies of shared libraries under their link-time names."""

from __future__ import annotations

import dataclasses
import fnmatch
import os
from pathlib import Path

from .elf import elf_files, read_elf
from .files import path_size, remove


@dataclasses.dataclass(frozen=True)
class TrimRule:
    """Paths (``fnmatch`` patterns over the posix path relative to ``python/``) to remove."""

    name: str
    reason: str
    patterns: tuple[str, ...]

    def matches(self, rel: str) -> bool:
        return any(fnmatch.fnmatchcase(rel, p) for p in self.patterns)


#: What is removed after pip has installed the wheels, and why. A pattern matching a
#: directory removes the whole directory.
TRIM_RULES: tuple[TrimRule, ...] = (
    TrimRule("bytecode", "compiled for the build interpreter, not the runtime's; "
             "/opt is read-only on Lambda, so caches are never written there either",
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
)
DUPLICATE_LIBS_RULE = "duplicate-shared-libs"
DUPLICATE_LIBS_REASON = ("copies of a shared library under its link-time names "
                         "(wheels cannot hold symlinks); the loader opens only the SONAME")


def trim(site: Path) -> dict[str, int]:
    """Apply ``TRIM_RULES`` and remove duplicate shared libraries; bytes removed per rule."""
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
    removed[DUPLICATE_LIBS_RULE] = remove_duplicate_libs(site)
    return removed


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
