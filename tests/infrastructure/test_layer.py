"""The Lambda dependency layer (layers/build.py).

Built for both Lambda architectures (Python 3.13) without Docker, the layer and the
function code together fit Lambda's 250 MiB unzipped limit; what was trimmed is gone,
what the service loads is there, linked and stripped; and a layer built for this machine
imports and does the service's work from its own directory with nothing else on the path.

Builds are slow the first time (they download ~100 MB of wheels per target) and reused
after that: ``layers/build/<arch>`` is rebuilt only when its inputs change, and the
wheels are kept in ``~/.cache/s3slice-layer/wheels``.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib.util
import json
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_PY = REPO / "layers" / "build.py"
LAMBDA_LIMIT = 262_144_000  # function + layers, unzipped: 250 MiB

pytestmark = [pytest.mark.slow, pytest.mark.infrastructure, pytest.mark.timeout(1800)]


def _load_build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("s3slice_layer_build", BUILD_PY)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


lb = _load_build_module()


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
        return [p.relative_to(self.site).as_posix() for p in lb.iter_files(self.site)]

    def dirs(self) -> list[str]:
        return [p.relative_to(self.site).as_posix() for p in self.site.rglob("*") if p.is_dir()]


def _build(*args: str, out: Path) -> Built:
    proc = subprocess.run([sys.executable, str(BUILD_PY), *args, "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=1700, check=False)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"layers/build.py {' '.join(args)} failed:\n{log}"
    report = json.loads((out / lb.SIZE_REPORT).read_text())
    return Built(out=out, report=report, log=log)


@pytest.fixture(scope="session", params=["arm64", "x86_64"])
def layer(request: pytest.FixtureRequest) -> Built:
    """The deployable layer for one architecture, Python 3.13, in layers/build/<arch>."""
    arch: str = request.param
    built = _build("--arch", arch, "--python", "3.13", out=lb.BUILD_ROOT / arch)
    assert (built.report["arch"], built.report["python"]) == (arch, "3.13")
    return built


@pytest.fixture(scope="session")
def native_layer() -> Built:
    """The same requirements built for this machine and this interpreter."""
    return _build("--native", out=lb.BUILD_ROOT / "native")


def _report_lines(built: Built) -> str:
    top = list(built.report["packages"].items())[:6]
    return "\n".join(f"  {name}: {p['bytes']:,}" for name, p in top)


# ------------------------------------------------------------------------------ size


def test_layer_plus_function_code_fits_lambda_limit(layer: Built) -> None:
    total, files = lb.tree_size(layer.site)
    assert (total, files) == (layer.report["total_bytes"], layer.report["file_count"])
    assert lb.FUNCTION_DIR == REPO / "functions" / "s3slice"
    assert lb.FUNCTION_DIR.is_dir()
    function = lb.function_code_size()
    assert function > 0
    assert total + function <= LAMBDA_LIMIT, (
        f"{layer.report['arch']} layer {total:,} + function {function:,} = "
        f"{total + function:,} bytes > {LAMBDA_LIMIT:,}\n{_report_lines(layer)}")


def test_report_accounts_for_every_byte(layer: Built) -> None:
    packages = layer.report["packages"]
    assert sum(p["bytes"] for p in packages.values()) == layer.report["total_bytes"]
    assert "(unowned)" not in packages, packages.keys()
    assert layer.report["untrimmed_bytes"] > layer.report["total_bytes"]
    removed = layer.report["removed_bytes"]
    for rule in ("pyarrow-flight", "pyarrow-remote-filesystems", "headers-and-sources",
                 "tests", "strip"):
        assert removed[rule] > 0, f"{rule} removed nothing: {removed}"


# -------------------------------------------------------------------- contents


def test_distributions_are_exactly_the_pins(layer: Built) -> None:
    pins = lb.read_pins()
    assert lb.installed_distributions(layer.site) == pins
    assert set(layer.report["packages"]) == set(pins)
    for provided_by_lambda in ("boto3", "botocore", "s3transfer"):
        assert provided_by_lambda not in pins
        assert not (layer.site / provided_by_lambda).exists()
    # polars 2 is a front end plus a separately published compiled runtime
    assert pins["polars"] == pins["polars-runtime-32"]


def test_trimmed_parts_are_gone(layer: Built) -> None:
    files, dirs = layer.files(), layer.dirs()
    gone_files = [
        "pyarrow/libarrow_flight.so*", "pyarrow/libarrow_python_flight.so*",
        "pyarrow/_flight.*", "pyarrow/flight.py",
        "pyarrow/libarrow_s3.so*", "pyarrow/_s3fs.*", "pyarrow/_gcsfs.*",
        "pyarrow/_azurefs.*", "pyarrow/_hdfs.*",
        "pyarrow/_orc.*", "pyarrow/_dataset_orc.*", "pyarrow/orc.py",
        "pyarrow/_pyarrow_cpp_tests.*",
        "pyarrow/libarrow_python.so", "pyarrow/*.so.*.*.*",  # only SONAME copies stay
        "*.h", "*.hpp", "*.pyx", "*.pxd", "*.pxi", "*.pyi", "*.pyc", "bin/*",
    ]
    for pattern in gone_files:
        hits = fnmatch.filter(files, pattern)
        assert not hits, f"{pattern} should be trimmed: {hits[:5]}"
    gone_dirs = ["pyarrow/include", "pyarrow/includes", "pyarrow/src", "pyarrow/tests",
                 "*__pycache__", "*/tests"]
    for pattern in gone_dirs:
        hits = fnmatch.filter(dirs, pattern)
        assert not hits, f"{pattern} should be trimmed: {hits[:5]}"
    for pattern in lb.FORBIDDEN:
        assert not fnmatch.filter(files + dirs, pattern), pattern


def test_required_libraries_are_present_and_linkable(layer: Built) -> None:
    for pattern in lb.REQUIRED:
        assert list(layer.site.glob(pattern)), f"missing {pattern}"
    # what pyarrow's core extension links, all of which must stay
    (lib,) = layer.site.glob("pyarrow/lib.*.so")
    needed = set(lb.read_elf(lib).needed)
    for name in ("libarrow", "libparquet", "libarrow_compute", "libarrow_acero",
                 "libarrow_dataset", "libarrow_substrait", "libarrow_python"):
        (so,) = [n for n in needed if re.fullmatch(rf"{name}\.so\.\d+", n)]
        assert (layer.site / "pyarrow" / so).is_file(), so
    assert lb.check_elf_closure(layer.site, lb.Target(arch=layer.report["arch"],
                                                      python="3.13")) == []


def test_every_elf_file_is_stripped_and_for_the_target(layer: Built) -> None:
    elves = lb.elf_files(layer.site)
    assert len(elves) > 10
    for path in elves:
        info = lb.read_elf(path)
        rel = path.relative_to(layer.site)
        assert info.machine == layer.machine, rel
        assert not info.has_symtab, f"{rel} still has a symbol table"
        assert not info.has_debug_info, f"{rel} still has debug info"


def test_elf_reader_agrees_with_readelf(layer: Built) -> None:
    readelf = shutil.which("readelf") or shutil.which(f"{layer.machine}-linux-gnu-readelf")
    if readelf is None:
        pytest.skip("no readelf")
    for path in [*layer.site.glob("pyarrow/lib.*.so"), *layer.site.glob("pyarrow/libarrow.so.*"),
                 *layer.site.glob("obstore/*.so")]:
        out = subprocess.run([readelf, "-d", str(path)], capture_output=True, text=True,
                             check=True).stdout
        info = lb.read_elf(path)
        assert list(info.needed) == re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out)
        assert info.soname == next(iter(re.findall(r"\(SONAME\)\s+Library soname: \[(.+?)\]",
                                                   out)), None)


def test_rebuild_with_unchanged_inputs_is_reused(layer: Built) -> None:
    again = _build("--arch", layer.report["arch"], out=layer.out)
    assert "is up to date" in again.log
    assert again.report == layer.report


# ------------------------------------------------------------------ does it work


def test_native_layer_imports_and_reads_parquet_alone(native_layer: Built) -> None:
    # the isolated interpreter really has nothing: without the layer polars is not there
    bare = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", "import polars"],
                          capture_output=True, text=True, cwd=native_layer.out, check=False)
    assert bare.returncode != 0
    assert "ModuleNotFoundError" in bare.stderr
    result = lb.run_smoke_check(native_layer.site, sys.executable)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SMOKE OK" in result.stdout
    assert native_layer.report["native"] is True


def test_deployable_layer_works_with_its_python(layer: Built) -> None:
    """The layer Lambda would load, loaded by a CPython 3.13 of the same machine type, when
    this machine has one (x86_64 machines with a pyenv 3.13 do)."""
    host = platform.machine().lower().replace("amd64", "x86_64").replace("arm64", "aarch64")
    if layer.machine != host:
        pytest.skip(f"an {layer.machine} layer cannot load on {host}")
    python = lb.find_python("3.13")
    if python is None:
        pytest.skip("no CPython 3.13 on this machine")
    result = lb.run_smoke_check(layer.site, python)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SMOKE OK" in result.stdout
