#!/usr/bin/env python3
"""Build the s3slice Lambda dependency layer without Docker, trim it, strip it, measure it.

    python layers/build.py --arch arm64            # Lambda arm64, Python 3.13
    python layers/build.py --arch x86_64 --zip     # ... and write layer.zip
    python layers/build.py --native --check        # this machine's arch and Python, then
                                                   # import and use every library from it

Steps: ``pip install --no-deps --target <out>/python`` of the manylinux wheels pinned in
``layers/requirements.txt`` for the target architecture, CPython version and the Lambda
runtime's glibc; check that the pins are the whole closure (every requirement of every
pinned distribution, for the target, is pinned or provided by the Lambda runtime: see
``RUNTIME_PROVIDED``); remove what the service never loads (see ``TRIM_RULES``); run
``strip --strip-unneeded`` over every ELF file; check that every shared library a kept
ELF file needs is in the layer or in the runtime's base system; measure the unzipped size
(the sum of file sizes, which is what Lambda's 250 MB limit counts) and write
``<out>/layer-size.json``.

The layer content is ``<out>/python``. A build whose inputs (the pins, the target, the
code of the build steps and their rules) are unchanged and whose files still add up to
what was recorded is reused; pass ``--force`` to rebuild. Downloaded wheels are kept
(``--wheel-cache``), so a rebuild installs offline.

For the arm64 layer on an x86_64 machine the aarch64 strip is needed
(Debian: ``apt-get install -y binutils-aarch64-linux-gnu``).
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import hashlib
import importlib
import inspect
import json
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

LAYERS_DIR = Path(__file__).resolve().parent
REPO_DIR = LAYERS_DIR.parent
REQUIREMENTS = LAYERS_DIR / "requirements.txt"
BUILD_ROOT = LAYERS_DIR / "build"
FUNCTION_DIR = REPO_DIR / "functions" / "s3slice"
SIZE_REPORT = "layer-size.json"
ZIP_NAME = "layer.zip"

#: Lambda's limit for the function code plus all its layers, unzipped (250 MiB).
LAMBDA_UNZIPPED_LIMIT = 262_144_000
#: The runtime Lambda targets by default.
DEFAULT_PYTHON = "3.13"

#: Lambda's architecture names -> the machine names used in wheel tags and ELF headers.
ARCHES: dict[str, str] = {"arm64": "aarch64", "x86_64": "x86_64"}
_ELF_MACHINES: dict[int, str] = {183: "aarch64", 62: "x86_64"}

#: Shared libraries the Lambda runtime's base system provides (the manylinux policy's
#: list, less the graphical ones). Anything else an ELF file in the layer needs must be
#: in the layer itself.
SYSTEM_LIBS: frozenset[str] = frozenset({
    "libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0",
    "libgcc_s.so.1", "libstdc++.so.6", "libutil.so.1", "libresolv.so.2", "libnsl.so.1",
    "libcrypt.so.1", "ld-linux-aarch64.so.1", "ld-linux-x86-64.so.2",
})


#: Distributions the Lambda Python runtime ships (with their own dependencies), which the
#: layer therefore neither bundles nor pins. aws-xray-sdk's botocore is one of them.
RUNTIME_PROVIDED: frozenset[str] = frozenset({"boto3", "botocore", "s3transfer"})


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

#: Files that must be in the trimmed layer (globs relative to ``python/``).
REQUIRED: tuple[str, ...] = (
    "polars/__init__.py",
    "_polars_runtime_32/_polars_runtime*.so",
    "pyarrow/__init__.py",
    "pyarrow/lib.*.so",
    "pyarrow/_parquet.*.so",
    "pyarrow/_compute.*.so",
    "pyarrow/_fs.*.so",
    "pyarrow/_dataset.*.so",
    "pyarrow/_dataset_parquet.*.so",
    "pyarrow/libarrow.so.*",
    "pyarrow/libparquet.so.*",
    "pyarrow/libarrow_compute.so.*",
    "pyarrow/libarrow_acero.so.*",
    "pyarrow/libarrow_dataset.so.*",
    "pyarrow/libarrow_substrait.so.*",
    "pyarrow/libarrow_python.so.*",
    "pyarrow/parquet/__init__.py",
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


class BuildError(Exception):
    """The layer could not be built, or the built layer is not what it must be."""


# ---------------------------------------------------------------------------- targets


@dataclasses.dataclass(frozen=True)
class Target:
    """What the layer is built for."""

    arch: str  #: Lambda's name: "arm64" or "x86_64"
    python: str  #: "3.13"
    native: bool = False  #: this machine's own wheels (pip's default tags); for testing

    @property
    def machine(self) -> str:
        return ARCHES[self.arch]

    @property
    def glibc(self) -> tuple[int, int]:
        """The runtime's glibc: Amazon Linux 2 (2.26) up to python3.11, AL2023 (2.34) after."""
        minor = int(self.python.split(".")[1])
        return (2, 34) if minor >= 12 else (2, 26)

    def platforms(self) -> list[str]:
        """pip ``--platform`` tags for this target, most specific first; none when native."""
        if self.native:
            return []
        major, newest = self.glibc
        tags = [f"manylinux_{major}_{m}_{self.machine}" for m in range(newest, 16, -1)]
        tags.append(f"manylinux2014_{self.machine}")
        if self.machine == "x86_64":
            tags += [f"manylinux_2_{m}_x86_64" for m in range(16, 4, -1)]
            tags += ["manylinux2010_x86_64", "manylinux1_x86_64"]
        return tags

    @classmethod
    def host(cls) -> Target:
        machine = platform.machine().lower()
        arch = {"aarch64": "arm64", "arm64": "arm64", "x86_64": "x86_64", "amd64": "x86_64"}
        if machine not in arch or not sys.platform.startswith("linux"):
            raise BuildError(f"--native needs Linux on aarch64 or x86_64, not "
                             f"{sys.platform}/{machine}")
        return cls(arch=arch[machine], python=f"{sys.version_info[0]}.{sys.version_info[1]}",
                   native=True)


def default_out(target: Target) -> Path:
    return BUILD_ROOT / ("native" if target.native else target.arch)


# ------------------------------------------------------------------------ requirements


_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)")


def normalize(name: str) -> str:
    """PEP 503 name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path = REQUIREMENTS) -> dict[str, str]:
    """``{normalized name: version}`` from a requirements file of exact pins."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _PIN.match(line)
        if not m:
            raise BuildError(f"{path}:{number}: not an exact pin (name==version): {raw!r}")
        pins[normalize(m.group(1))] = m.group(2)
    return pins


def installed_distributions(site: Path) -> dict[str, str]:
    """``{normalized name: version}`` of the ``*.dist-info`` directories in ``site``."""
    found: dict[str, str] = {}
    for info in site.glob("*.dist-info"):
        name = version = ""
        for line in (info / "METADATA").read_text(encoding="utf-8").splitlines():
            if line.startswith("Name:"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("Version:"):
                version = line.split(":", 1)[1].strip()
            elif not line:
                break
        found[normalize(name)] = version
    return found


def check_pins(site: Path, pins: dict[str, str]) -> None:
    found = installed_distributions(site)
    extra = sorted(set(found) - set(pins))
    missing = sorted(set(pins) - set(found))
    wrong = sorted(f"{n} {found[n]} (pinned {pins[n]})"
                   for n in set(found) & set(pins) if found[n] != pins[n])
    problems = []
    if extra:
        problems.append(f"installed but not pinned (pin them in {REQUIREMENTS.name}): "
                        + ", ".join(f"{n}=={found[n]}" for n in extra))
    if missing:
        problems.append("pinned but not installed: " + ", ".join(missing))
    if wrong:
        problems.append("version differs from the pin: " + ", ".join(wrong))
    if problems:
        raise BuildError("; ".join(problems))


def _packaging(module: str) -> Any:
    """``packaging.<module>``, installed or the copy pip vendors (the build runs pip)."""
    try:
        return importlib.import_module(f"packaging.{module}")
    except ImportError:  # pragma: no cover - depends on the build interpreter
        return importlib.import_module(f"pip._vendor.packaging.{module}")


def marker_environment(target: Target) -> dict[str, str]:
    """PEP 508 marker values of the Lambda runtime ``target`` describes."""
    if target.native:
        return dict(_packaging("markers").default_environment())
    return {
        "implementation_name": "cpython", "implementation_version": f"{target.python}.0",
        "os_name": "posix", "platform_machine": target.machine,
        "platform_python_implementation": "CPython", "platform_release": "",
        "platform_system": "Linux", "platform_version": "",
        "python_full_version": f"{target.python}.0", "python_version": target.python,
        "sys_platform": "linux",
    }


def check_closure(site: Path, pins: dict[str, str], target: Target) -> None:
    """Every requirement of every installed distribution (for ``target``, no extras) is
    pinned at a version it accepts, or is provided by the Lambda runtime.

    The wheels are installed with ``--no-deps`` (so that what the runtime provides, such
    as aws-xray-sdk's botocore, is not installed), so this is the closure check pip's
    resolver would otherwise make."""
    parse_requirement = _packaging("requirements").Requirement
    parse_version = _packaging("version").Version
    environment = {**marker_environment(target), "extra": ""}
    problems: list[str] = []
    for info in sorted(site.glob("*.dist-info")):
        dist = normalize(info.name.removesuffix(".dist-info").rsplit("-", 1)[0])
        for line in (info / "METADATA").read_text(encoding="utf-8").splitlines():
            if not line:
                break
            if not line.startswith("Requires-Dist:"):
                continue
            requirement = parse_requirement(line.split(":", 1)[1].strip())
            if requirement.marker is not None and not requirement.marker.evaluate(environment):
                continue
            name = normalize(requirement.name)
            if name in RUNTIME_PROVIDED:
                continue
            if name not in pins:
                problems.append(f"{dist} needs {requirement}, which is not pinned")
            elif not requirement.specifier.contains(parse_version(pins[name]),
                                                    prereleases=True):
                problems.append(f"{dist} needs {requirement}, but {name}=={pins[name]} is "
                                "pinned")
    if problems:
        raise BuildError(f"the pins in {REQUIREMENTS.name} are not a closure: "
                         + "; ".join(problems))


# ------------------------------------------------------------------------------- ELF


@dataclasses.dataclass(frozen=True)
class ElfInfo:
    """What matters about an ELF file here: its machine and dynamic linking."""

    machine: str
    soname: str | None
    needed: tuple[str, ...]
    runpath: tuple[str, ...]
    has_symtab: bool
    has_debug_info: bool


def is_elf(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"\x7fELF"


def read_elf(path: Path) -> ElfInfo:
    """Parse the headers, dynamic section and section names of a 64-bit little-endian ELF.

    A few dozen lines instead of ``readelf``, so that checks behave the same for every
    architecture on every build machine.
    """
    with path.open("rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            raise BuildError(f"{path}: not a 64-bit little-endian ELF file")
        (e_machine,) = struct.unpack_from("<H", head, 18)
        e_phoff, e_shoff = struct.unpack_from("<QQ", head, 32)
        phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", head, 54)

        def read_at(offset: int, size: int) -> bytes:
            f.seek(offset)
            data = f.read(size)
            if len(data) != size:
                raise BuildError(f"{path}: truncated ELF file")
            return data

        loads: list[tuple[int, int, int]] = []
        dynamic: tuple[int, int] | None = None
        ph = read_at(e_phoff, phentsize * phnum)
        for i in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
                "<IIQQQQ", ph, i * phentsize)
            if p_type == 1:  # PT_LOAD
                loads.append((p_vaddr, p_offset, p_filesz))
            elif p_type == 2:  # PT_DYNAMIC
                dynamic = (p_offset, p_filesz)

        def file_offset(vaddr: int) -> int:
            for start, offset, size in loads:
                if start <= vaddr < start + size:
                    return vaddr - start + offset
            raise BuildError(f"{path}: address {vaddr:#x} is in no loaded segment")

        needed_at: list[int] = []
        runpath_at: list[int] = []
        soname_at: int | None = None
        strtab = strsz = 0
        if dynamic is not None:
            raw = read_at(*dynamic)
            for i in range(0, len(raw) - 15, 16):
                tag, value = struct.unpack_from("<qQ", raw, i)
                if tag == 0:  # DT_NULL
                    break
                if tag == 1:  # DT_NEEDED
                    needed_at.append(value)
                elif tag == 5:  # DT_STRTAB
                    strtab = value
                elif tag == 10:  # DT_STRSZ
                    strsz = value
                elif tag == 14:  # DT_SONAME
                    soname_at = value
                elif tag in (15, 29):  # DT_RPATH, DT_RUNPATH
                    runpath_at.append(value)
        strings = read_at(file_offset(strtab), strsz) if strsz else b""

        def string(at: int) -> str:
            return strings[at:strings.index(b"\0", at)].decode()

        section_names: list[str] = []
        section_types: list[int] = []
        if e_shoff and shnum:
            sh = read_at(e_shoff, shentsize * shnum)
            headers = [struct.unpack_from("<IIQQQQ", sh, i * shentsize) for i in range(shnum)]
            _, _, _, _, names_off, names_size = headers[shstrndx]
            names = read_at(names_off, names_size)
            for sh_name, sh_type, *_ in headers:
                section_names.append(names[sh_name:names.index(b"\0", sh_name)].decode())
                section_types.append(sh_type)

    return ElfInfo(
        machine=_ELF_MACHINES.get(e_machine, f"e_machine={e_machine}"),
        soname=string(soname_at) if soname_at is not None else None,
        needed=tuple(string(a) for a in needed_at),
        runpath=tuple(p for a in runpath_at for p in string(a).split(":") if p),
        has_symtab=2 in section_types,  # SHT_SYMTAB
        has_debug_info=any(n.startswith((".debug", ".zdebug")) for n in section_names),
    )


def elf_files(site: Path) -> list[Path]:
    return [p for p in iter_files(site) if is_elf(p)]


def check_elf_closure(site: Path, target: Target) -> list[str]:
    """Problems with the ELF files in ``site``: wrong machine, or a needed library that is
    neither in the layer (where its RUNPATH points) nor in the runtime's base system."""
    problems: list[str] = []
    for path in elf_files(site):
        rel = path.relative_to(site).as_posix()
        info = read_elf(path)
        if info.machine != target.machine:
            problems.append(f"{rel}: built for {info.machine}, not {target.machine}")
        dirs = [path.parent]
        for entry in info.runpath:
            expanded = entry.replace("$ORIGIN", str(path.parent)).replace(
                "${ORIGIN}", str(path.parent))
            dirs.append(Path(expanded))
        for lib in info.needed:
            if lib in SYSTEM_LIBS:
                continue
            if not any((d / lib).is_file() for d in dirs):
                problems.append(f"{rel}: needs {lib}, which is not in the layer")
    return problems


# ---------------------------------------------------------------------- tree helpers


def iter_files(root: Path, *, skip_dirs: Iterable[str] = ()) -> Iterator[Path]:
    """Regular files under ``root`` (symlinks are not followed), in a stable order."""
    skip = set(skip_dirs)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        for name in sorted(filenames):
            path = Path(dirpath, name)
            if path.is_file() and not path.is_symlink():
                yield path


def tree_size(root: Path, *, skip_dirs: Iterable[str] = ()) -> tuple[int, int]:
    """``(bytes, files)`` under ``root``: the unzipped size Lambda counts."""
    total = count = 0
    for path in iter_files(root, skip_dirs=skip_dirs):
        total += path.stat().st_size
        count += 1
    return total, count


def function_code_size(function_dir: Path = FUNCTION_DIR) -> int:
    """Bytes of the function's code asset (``__pycache__`` directories excluded: they are
    generated, ignored by git and not part of the asset)."""
    if not function_dir.is_dir():
        return 0
    return tree_size(function_dir, skip_dirs=("__pycache__",))[0]


def _path_size(path: Path) -> int:
    if path.is_dir() and not path.is_symlink():
        return tree_size(path)[0]
    return path.lstat().st_size


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def mib(n: int) -> float:
    return round(n / 2**20, 1)


# ------------------------------------------------------------------------ the steps


def default_wheel_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "s3slice-layer" / "wheels"


def pip_install(site: Path, target: Target, requirements: Path, *, wheels: Path,
                tmp: Path) -> str:
    """Install the pinned wheels for ``target`` into ``site``.

    Wheels are kept in ``wheels`` (``pip download``), because pip's own HTTP cache does
    not keep responses that registries or proxies mark uncacheable: a rebuild with every
    wheel already there installs offline. Returns ``"cache"`` or ``"download"``.
    """
    pip = [sys.executable, "-m", "pip"]
    common = ["--disable-pip-version-check", "--no-input", "--progress-bar", "off",
              "--quiet", "--only-binary=:all:", "--no-deps", "--requirement",
              str(requirements)]
    if not target.native:
        common += ["--implementation", "cp", "--python-version", target.python]
        for tag in target.platforms():
            common += ["--platform", tag]
    install = [*pip, "install", "--no-compile", "--no-index", "--find-links", str(wheels),
               "--target", str(site), *common]
    env = {**os.environ, "TMPDIR": str(tmp)}  # pip unpacks there before moving to site
    wheels.mkdir(parents=True, exist_ok=True)
    if subprocess.run(install, capture_output=True, env=env, check=False).returncode == 0:
        return "cache"
    shutil.rmtree(site, ignore_errors=True)
    print(f"downloading wheels for {target.arch}/python{target.python} into {wheels}", flush=True)
    download = subprocess.run([*pip, "download", "--dest", str(wheels), *common],
                              env=env, check=False)
    if download.returncode != 0:
        raise BuildError(f"pip download failed with exit code {download.returncode}")
    result = subprocess.run(install, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        raise BuildError(f"pip install failed:\n{result.stdout}{result.stderr}")
    return "download"


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
            removed[rule.name] += _path_size(path)
            _remove(path)
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


def find_strip(target: Target) -> str:
    """The strip that understands the target's ELF files; a clear error when missing."""
    host = platform.machine().lower().replace("amd64", "x86_64").replace("arm64", "aarch64")
    candidates = [f"{target.machine}-linux-gnu-strip"]
    if host == target.machine:
        candidates.insert(0, "strip")
    for name in candidates:
        found = shutil.which(name)
        if found:
            return found
    package = f"binutils-{target.machine.replace('_', '-')}-linux-gnu"
    raise BuildError(
        f"no strip for {target.machine} ELF files (looked for {', '.join(candidates)}). "
        f"On Debian/Ubuntu: apt-get update && apt-get install -y {package}")


def strip_all(site: Path, strip: str) -> int:
    """``strip --strip-unneeded`` every ELF file; returns the bytes saved."""
    files = elf_files(site)
    before = sum(p.stat().st_size for p in files)

    def run(path: Path) -> str | None:
        r = subprocess.run([strip, "--strip-unneeded", str(path)], capture_output=True,
                           text=True, check=False)
        return None if r.returncode == 0 else f"{path}: {r.stderr.strip()}"

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        failures = [e for e in pool.map(run, files) if e]
    if failures:
        raise BuildError("strip failed:\n  " + "\n  ".join(failures))
    return before - sum(p.stat().st_size for p in files)


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


def owners(site: Path) -> dict[str, str]:
    """Top-level entry of ``site`` -> the distribution that installed it (from RECORD)."""
    found: dict[str, str] = {}
    for info in site.glob("*.dist-info"):
        dist = info.name.removesuffix(".dist-info").rsplit("-", 1)[0]
        found[info.name] = dist
        record = info / "RECORD"
        if record.is_file():
            for line in record.read_text(encoding="utf-8").splitlines():
                top = line.split(",", 1)[0].split("/", 1)[0]
                if top and not top.startswith(".."):
                    found.setdefault(top, dist)
    return found


def measure(site: Path) -> dict[str, Any]:
    """Total and per-distribution unzipped sizes, and the largest files."""
    by_top = owners(site)
    versions = installed_distributions(site)
    packages: dict[str, dict[str, Any]] = {}
    files: list[tuple[int, str]] = []
    for path in iter_files(site):
        rel = path.relative_to(site).as_posix()
        size = path.stat().st_size
        files.append((size, rel))
        dist = normalize(by_top.get(rel.split("/", 1)[0], "(unowned)"))
        entry = packages.setdefault(dist, {"version": versions.get(dist), "bytes": 0,
                                           "files": 0})
        entry["bytes"] += size
        entry["files"] += 1
    total = sum(s for s, _ in files)
    for entry in packages.values():
        entry["mib"] = mib(entry["bytes"])
    ordered = dict(sorted(packages.items(), key=lambda kv: -kv[1]["bytes"]))
    largest = [{"path": rel, "bytes": size, "mib": mib(size)}
               for size, rel in sorted(files, reverse=True)[:15]]
    return {"total_bytes": total, "total_mib": mib(total), "file_count": len(files),
            "packages": ordered, "largest_files": largest}


def fingerprint(target: Target, requirements: Path, strip: bool) -> str:
    """What decides the layer's content: the pins, the target, and the recipe (the steps'
    code and rules), so that editing messages or the CLI does not force a rebuild."""
    h = hashlib.sha256()
    h.update(requirements.read_bytes())
    h.update(json.dumps([dataclasses.asdict(target), target.platforms(), strip]).encode())
    for step in (pip_install, check_closure, trim, remove_duplicate_libs, strip_all,
                 check_layer, check_elf_closure, measure, _build):
        h.update(inspect.getsource(step).encode())
    h.update(repr((TRIM_RULES, REQUIRED, FORBIDDEN, sorted(SYSTEM_LIBS),
                   sorted(RUNTIME_PROVIDED))).encode())
    if target.native:
        h.update(sys.version.encode())
    return h.hexdigest()


def write_zip(site: Path, dest: Path) -> int:
    """A deterministic zip of ``site`` as ``python/...`` (fixed times, sorted entries)."""
    tmp = dest.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        for path in iter_files(site):
            info = zipfile.ZipInfo("python/" + path.relative_to(site).as_posix(),
                                   date_time=(1980, 1, 1, 0, 0, 0))
            mode = 0o755 if os.access(path, os.X_OK) else 0o644
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            with path.open("rb") as src, zf.open(info, "w") as out:
                shutil.copyfileobj(src, out, 1 << 20)
    tmp.replace(dest)
    return dest.stat().st_size


# ------------------------------------------------------------------------ smoke check

#: Run by ``--check`` (see its docstring).
SMOKE_CHECK = LAYERS_DIR / "smoke_check.py"


def run_smoke_check(site: Path, python: str = sys.executable, *,
                    timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Run ``smoke_check.py`` against ``site`` in a fresh ``python -I -S -B``: no
    site-packages, environment or working directory on the path, and no bytecode written
    into the layer.

    Seconds on an idle machine; the generous timeout is for a loaded one, and the script
    dumps its threads' stacks shortly before it."""
    with tempfile.TemporaryDirectory() as cwd:
        return subprocess.run(
            [python, "-I", "-S", "-B", str(SMOKE_CHECK), str(site), str(max(timeout - 30, 1))],
            cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
            env={"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8"})


# ------------------------------------------------------------------------------ build


@dataclasses.dataclass
class BuildOptions:
    target: Target
    out: Path
    requirements: Path = REQUIREMENTS
    wheels: Path = dataclasses.field(default_factory=default_wheel_cache)
    strip: bool = True
    zip: bool = False
    force: bool = False


def _reusable(out: Path, stamp: str) -> dict[str, Any] | None:
    report_path = out / SIZE_REPORT
    site = out / "python"
    if not (report_path.is_file() and site.is_dir()):
        return None
    try:
        report: dict[str, Any] = json.loads(report_path.read_text())
    except ValueError:
        return None
    if report.get("fingerprint") != stamp:
        return None
    if tree_size(site) != (report.get("total_bytes"), report.get("file_count")):
        return None
    return report


def _staging_root(out: Path) -> Path:
    """Where to assemble the layer: a RAM disk when there is one with room, because the
    build writes, strips and deletes several times the layer's final size."""
    shm = Path("/dev/shm")  # noqa: S108 - a private mkdtemp under it, removed afterwards
    try:
        if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 2**31:
            return shm
    except OSError:
        pass
    return out.parent


def _publish(site: Path, dest: Path) -> None:
    """Copy the finished ``site`` to ``dest``, replacing what was there."""
    new = dest.with_name(dest.name + ".new")
    old = dest.with_name(dest.name + ".old")
    for leftover in (new, old):
        if leftover.exists():
            shutil.rmtree(leftover)
    shutil.copytree(site, new, symlinks=True)
    if dest.exists():
        dest.rename(old)
    new.rename(dest)
    if old.exists():
        shutil.rmtree(old)


def build(opts: BuildOptions) -> dict[str, Any]:
    """Build (or reuse) the layer; returns the size report also written to the out dir."""
    target, out = opts.target, opts.out.resolve()
    stamp = fingerprint(target, opts.requirements, opts.strip)
    report = None if opts.force else _reusable(out, stamp)
    if report is not None:
        print(f"layer for {target.arch}/python{target.python} in {out} is up to date", flush=True)
    else:
        report = _build(opts, out, stamp)
    if opts.zip and not (out / ZIP_NAME).is_file():
        report["zip_bytes"] = write_zip(out / "python", out / ZIP_NAME)
    (out / SIZE_REPORT).write_text(json.dumps(report, indent=2) + "\n")
    return report


def _build(opts: BuildOptions, out: Path, stamp: str) -> dict[str, Any]:
    target = opts.target
    pins = read_pins(opts.requirements)
    strip_tool = find_strip(target) if opts.strip else None
    out.mkdir(parents=True, exist_ok=True)
    for stale in (out / SIZE_REPORT, out / ZIP_NAME):
        stale.unlink(missing_ok=True)
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="s3slice-layer-", dir=_staging_root(out)) as tmp:
        stage = Path(tmp)
        site = stage / "python"
        wheels_from = pip_install(site, target, opts.requirements, wheels=opts.wheels.resolve(),
                                  tmp=stage)
        timings["install"] = time.monotonic() - t0
        check_pins(site, pins)
        check_closure(site, pins, target)
        untrimmed = tree_size(site)[0]

        t = time.monotonic()
        removed = trim(site)
        timings["trim"] = time.monotonic() - t
        t = time.monotonic()
        saved = strip_all(site, strip_tool) if strip_tool else 0
        timings["strip"] = time.monotonic() - t
        check_layer(site, target)
        sizes = measure(site)
        t = time.monotonic()
        _publish(site, out / "python")
        timings["publish"] = time.monotonic() - t
    timings["total"] = time.monotonic() - t0
    return {
        "arch": target.arch, "machine": target.machine, "python": target.python,
        "native": target.native, "platforms": target.platforms(),
        "lambda_glibc": ".".join(map(str, target.glibc)),
        "requirements": pins, "stripped": bool(strip_tool), "fingerprint": stamp,
        **sizes,
        "untrimmed_bytes": untrimmed,
        "removed_bytes": {**removed, "strip": saved},
        "removed_why": {**{r.name: r.reason for r in TRIM_RULES},
                        DUPLICATE_LIBS_RULE: DUPLICATE_LIBS_REASON,
                        "strip": "symbols not needed for dynamic linking"},
        "limit_bytes": LAMBDA_UNZIPPED_LIMIT,
        "wheels": wheels_from,
        "seconds": {k: round(v, 1) for k, v in timings.items()},
    }


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


def checker_for(target: Target) -> str:
    """The interpreter that can load ``target``'s layer here, or a ``BuildError`` saying why
    there is none."""
    host = Target.host()
    if target.machine != host.machine:
        raise BuildError(f"--check loads the layer here, and this machine is {host.machine}:"
                         f" an {target.machine} layer cannot load")
    exe = find_python(target.python)
    if exe is None:
        raise BuildError(f"--check needs a Python {target.python} interpreter to load the "
                         f"python{target.python} layer; none found (use --native to build one "
                         f"for this Python)")
    return exe


def summarize(report: dict[str, Any], out: Path) -> str:
    total = report["total_bytes"]
    function = function_code_size()
    lines = [
        f"layer {report['arch']}/python{report['python']}: {total:,} bytes ({mib(total)} MiB) "
        f"in {report['file_count']:,} files -> {out / 'python'}",
    ]
    lines += [f"  {name:<24} {p['bytes']:>12,}  {p['mib']:>6} MiB"
              for name, p in report["packages"].items()]
    lines.append(f"  function code ({FUNCTION_DIR.relative_to(REPO_DIR)}): {function:,} bytes;"
                 f" layer + function = {total + function:,} of {LAMBDA_UNZIPPED_LIMIT:,}"
                 f" ({LAMBDA_UNZIPPED_LIMIT - total - function:,} to spare)")
    if "seconds" in report:
        lines.append("  seconds: " + ", ".join(f"{k} {v}" for k, v in report["seconds"].items())
                     + f" (wheels from {report.get('wheels', '?')})")
    if "zip_bytes" in report:
        lines.append(f"  zip: {report['zip_bytes']:,} bytes -> {out / ZIP_NAME}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--arch", choices=sorted(ARCHES), help="Lambda architecture")
    which.add_argument("--native", action="store_true",
                       help="this machine's architecture and Python (to --check it here)")
    ap.add_argument("--python", default=DEFAULT_PYTHON,
                    help=f"Lambda runtime Python version (default {DEFAULT_PYTHON})")
    ap.add_argument("--out", type=Path,
                    help="output directory (default layers/build/<arch>, or "
                         "layers/build/native with --native)")
    ap.add_argument("--requirements", type=Path, default=REQUIREMENTS, help=argparse.SUPPRESS)
    ap.add_argument("--wheel-cache", type=Path, default=None,
                    help="where downloaded wheels are kept "
                         "(default $XDG_CACHE_HOME/s3slice-layer/wheels)")
    ap.add_argument("--zip", action="store_true", help=f"also write <out>/{ZIP_NAME}")
    ap.add_argument("--no-strip", action="store_true", help="skip strip (not for deploying)")
    ap.add_argument("--force", action="store_true", help="rebuild even if up to date")
    ap.add_argument("--check", action="store_true",
                    help="then import and use every library from the layer alone, in a "
                         "fresh interpreter of the layer's Python (this machine's arch only)")
    args = ap.parse_args(argv)
    if args.native and args.python != DEFAULT_PYTHON:
        ap.error("--native builds for the running interpreter; drop --python")
    if not re.fullmatch(r"3\.\d+", args.python):
        ap.error(f"--python must look like 3.13, not {args.python!r}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        target = Target.host() if args.native else Target(arch=args.arch, python=args.python)
        checker = checker_for(target) if args.check else None  # fail before building
        out = args.out or default_out(target)
        report = build(BuildOptions(
            target=target, out=out, requirements=args.requirements,
            wheels=args.wheel_cache or default_wheel_cache(), strip=not args.no_strip,
            zip=args.zip, force=args.force))
        print(summarize(report, out.resolve()), flush=True)
        if checker:
            result = run_smoke_check(out.resolve() / "python", checker)
            if result.returncode != 0:
                raise BuildError(f"smoke check with {checker} failed:\n"
                                 + result.stdout + result.stderr)
            print(result.stdout.strip().splitlines()[-1])
    except BuildError as e:
        print(f"layers/build.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
