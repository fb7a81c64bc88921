"""The Lambda dependency layer (layers/build.py, the layerbuild package).

Built for both Lambda architectures (Python 3.13) without Docker, from wheels for the
target's platform and Python, the layer and the function code together fit Lambda's
250 MiB unzipped limit and the arm64 layer its own 200 MiB; what was trimmed is gone and
unused by the service's code, what the service loads is there, linked (every library and
every symbol a file needs is in its lookup scope: the evidence for arm64, which cannot
run here) and stripped; the x86_64 layer, loaded by a CPython 3.13, runs the smoke check
(the service itself over every Parquet, CSV and JSON codec); and the same requirements,
trimmed the same way, built for this machine and its Python, import and do the service's
work from the layer's own directory with nothing else on the path, and run the
end-to-end integration tests
(tests/integration/test_s3_end_to_end.py) that way: in a virtualenv that has only the
test runner, moto's S3 server and boto3 (which Lambda's runtime provides), with the
service's dependencies coming from the layer alone.

Builds are slow the first time (they download ~100 MB of wheels per target) and reused
after that: ``layers/build/<arch>`` is rebuilt only when its inputs change, and the
wheels are kept in ``~/.cache/s3slice-layer/wheels``.
"""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from layers.layerbuild.bytecode import (
    KEEP_SOURCE,
    LAMBDA_SITE,
    Compiler,
    cached_path,
    check_bytecode,
    find_compiler,
)
from layers.layerbuild.check import FORBIDDEN, REQUIRED, present, source_name, trimmed_by
from layers.layerbuild.elf import (
    check_elf_closure,
    drop_needed,
    dynamic_symbols,
    elf_files,
    read_elf,
)
from layers.layerbuild.errors import BuildError
from layers.layerbuild.files import iter_files, tree_size
from layers.layerbuild.fingerprint import fingerprint, package_files
from layers.layerbuild.layout import (
    BUILD_ROOT,
    FUNCTION_DIR,
    PACKAGE_DIR,
    REQUIREMENTS,
    SIZE_REPORT,
    default_wheel_cache,
)
from layers.layerbuild.pins import check_closure, installed_distributions, normalize, read_pins
from layers.layerbuild.report import function_code_size
from layers.layerbuild.smoke import find_python, run_smoke_check
from layers.layerbuild.target import Target
from s3slice_cdk.staging.bytecode import CompilerError

REPO = Path(__file__).resolve().parents[2]
BUILD_PY = REPO / "layers" / "build.py"
LAMBDA_LIMIT = 262_144_000  # function + layers, unzipped: 250 MiB
#: The layer's own bound, unzipped (issue 19): arm64 leaves room for what comes next.
LAYER_BOUND = {"arm64": 200 * 2**20}
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

pytestmark = [pytest.mark.slow, pytest.mark.infrastructure, pytest.mark.timeout(1800)]


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


@pytest.fixture(scope="session", params=["arm64", "x86_64"])
def layer(request: pytest.FixtureRequest) -> Built:
    """The deployable layer for one architecture, Python 3.13, in layers/build/<arch>."""
    arch: str = request.param
    built = _build("--arch", arch, "--python", "3.13", out=BUILD_ROOT / arch)
    assert (built.report["arch"], built.report["python"]) == (arch, "3.13")
    return built


@pytest.fixture(scope="session")
def native_layer() -> Built:
    """The same requirements built for this machine and this interpreter."""
    return _build("--native", out=BUILD_ROOT / "native")


def _report_lines(built: Built) -> str:
    top = list(built.report["packages"].items())[:6]
    return "\n".join(f"  {name}: {p['bytes']:,}" for name, p in top)


# ------------------------------------------------------------------------------ size


def test_layer_plus_function_code_fits_lambda_limit(layer: Built) -> None:
    total, files = tree_size(layer.site)
    assert (total, files) == (layer.report["total_bytes"], layer.report["file_count"])
    assert FUNCTION_DIR == REPO / "functions" / "s3slice"
    assert FUNCTION_DIR.is_dir()
    function = function_code_size(layer.report["python"])
    assert function > 0
    assert total + function <= LAMBDA_LIMIT, (
        f"{layer.report['arch']} layer {total:,} + function {function:,} = "
        f"{total + function:,} bytes > {LAMBDA_LIMIT:,}\n{_report_lines(layer)}")


def test_layer_is_within_its_own_bound(layer: Built) -> None:
    """arm64 (the stack's default) at most 200 MiB unzipped, every codec kept (the smoke
    check below reads and writes each of them through the service)."""
    bound = LAYER_BOUND.get(layer.report["arch"])
    if bound is None:
        pytest.skip(f"no bound besides Lambda's for {layer.report['arch']}")
    assert layer.report["total_bytes"] <= bound, (
        f"{layer.report['arch']} layer {layer.report['total_bytes']:,} bytes > {bound:,}\n"
        f"{_report_lines(layer)}")


def test_report_accounts_for_every_byte(layer: Built) -> None:
    packages = layer.report["packages"]
    assert sum(p["bytes"] for p in packages.values()) == layer.report["total_bytes"]
    assert "(unowned)" not in packages, packages.keys()
    assert layer.report["untrimmed_bytes"] > layer.report["total_bytes"]
    removed = layer.report["removed_bytes"]
    for rule in ("pyarrow-flight", "pyarrow-remote-filesystems", "headers-and-sources",
                 "tests", "strip", "pyarrow-dataset-acero", "pyarrow-substrait",
                 "pyarrow-parquet-encryption", "pyarrow-csv-json-feather",
                 "powertools-swagger-ui", "sqlglot-executor", "sqlglot-dialects",
                 "fastavro-writers", "ijson-c-backend"):
        assert removed[rule] > 0, f"{rule} removed nothing: {removed}"
    assert set(removed) <= set(layer.report["removed_why"]) | {"strip"}


# -------------------------------------------------------------------- contents


def _wheel_tags(site: Path) -> dict[str, list[tuple[str, str, str]]]:
    """``{distribution: [(interpreter, abi, platform), ...]}`` from each ``WHEEL`` file."""
    tags: dict[str, list[tuple[str, str, str]]] = {}
    for wheel in site.glob("*.dist-info/WHEEL"):
        dist = normalize(wheel.parent.name.removesuffix(".dist-info").rsplit("-", 1)[0])
        for line in wheel.read_text().splitlines():
            if line.startswith("Tag:"):
                interpreter, abi, plat = line.split(":", 1)[1].strip().split("-")
                tags.setdefault(dist, []).append((interpreter, abi, plat))
    return tags


def test_wheels_are_for_the_target_platform_and_python(layer: Built) -> None:
    """pip installed wheels for Lambda's machine, glibc and CPython (``--platform``,
    ``--python-version``, ``--only-binary``), not this machine's."""
    target = Target(arch=layer.report["arch"], python=layer.report["python"])
    assert layer.report["native"] is False
    assert layer.report["platforms"] == target.platforms()
    assert all(tag.endswith(f"_{layer.machine}") for tag in target.platforms())
    assert target.platforms()[0] == f"manylinux_2_34_{layer.machine}"  # AL2023's glibc
    cp = "cp" + layer.report["python"].replace(".", "")  # cp313
    tags = _wheel_tags(layer.site)
    assert set(tags) == set(read_pins())
    compiled = set()
    for dist, wheel_tags in tags.items():
        assert any(
            (plat == "any" and abi == "none" and interpreter.startswith("py3"))
            or (plat in target.platforms() and (
                (abi == cp and interpreter == cp)
                or (abi == "abi3" and interpreter.startswith("cp3")
                    and int(interpreter[3:]) <= int(cp[3:]))))
            for interpreter, abi, plat in wheel_tags), (dist, wheel_tags)
        if all(plat != "any" for _, _, plat in wheel_tags):
            compiled.add(dist)
    assert {"pyarrow", "polars-runtime-32", "obstore"} <= compiled
    # CPython-specific extension modules carry the target's ABI tag
    suffix = f".cpython-{cp[2:]}-{layer.machine}-linux-gnu.so"
    extensions = [f for f in layer.files() if ".cpython-" in f and f.endswith(".so")]
    assert extensions
    assert all(f.endswith(suffix) for f in extensions), [
        f for f in extensions if not f.endswith(suffix)][:5]



def test_distributions_are_exactly_the_pins(layer: Built) -> None:
    pins = read_pins()
    assert installed_distributions(layer.site) == pins
    assert set(layer.report["packages"]) == set(pins)
    for provided_by_lambda in ("boto3", "botocore", "s3transfer"):
        assert provided_by_lambda not in pins
        assert not (layer.site / provided_by_lambda).exists()
    # polars 2 is a front end plus a separately published compiled runtime
    assert pins["polars"] == pins["polars-runtime-32"]
    # the pins are the closure for the target (aws-xray-sdk's botocore is the runtime's)
    check_closure(layer.site, pins, Target(arch=layer.report["arch"],
                                           python=layer.report["python"]))
    with pytest.raises(BuildError, match="aws-xray-sdk needs wrapt"):
        check_closure(layer.site, {k: v for k, v in pins.items() if k != "wrapt"},
                      Target(arch=layer.report["arch"], python=layer.report["python"]))


def test_trimmed_parts_are_gone(layer: Built) -> None:
    # a module is matched by the name of its source (the layer ships x.pyc for x.py)
    files, dirs = sorted({source_name(f) for f in layer.files()}), layer.dirs()
    gone_files = [
        "pyarrow/libarrow_flight.so*", "pyarrow/libarrow_python_flight.so*",
        "pyarrow/_flight.*", "pyarrow/flight.py",
        "pyarrow/libarrow_s3.so*", "pyarrow/_s3fs.*", "pyarrow/_gcsfs.*",
        "pyarrow/_azurefs.*", "pyarrow/_hdfs.*",
        "pyarrow/_orc.*", "pyarrow/_dataset_orc.*", "pyarrow/orc.py",
        "pyarrow/_pyarrow_cpp_tests.*",
        "pyarrow/libarrow_python.so", "pyarrow/*.so.*.*.*",  # only SONAME copies stay
        "*.h", "*.hpp", "*.pyx", "*.pxd", "*.pxi", "*.pyi", "bin/*",
        *(f"pyarrow/{lib}.so*" for lib in TRIMMED_PYARROW_LIBS),
        *(f"pyarrow/{m.replace('.', '/')}.*" for m in TRIMMED_PYARROW_MODULES),
        "aws_lambda_powertools/event_handler/openapi/swagger_ui/*.js",
        "aws_lambda_powertools/event_handler/openapi/swagger_ui/*.css",
        "sqlglot/executor/*", "sqlglot/planner.py", "sqlglot/lineage.py",
        *(f"sqlglot/{package}/{dialect}.py" for package in ("dialects", "generators",
                                                            "parsers", "typing")
          for dialect in SQLGLOT_NAMED_DIALECTS),
        "sqlglot/generators/python.py",
        "fastavro/_write.*", "fastavro/_logical_writers.*", "fastavro/_validation.*",
        "ijson/backends/_yajl2.*", "ijson.libs/*",
    ]
    for pattern in gone_files:
        hits = fnmatch.filter(files, pattern)
        assert not hits, f"{pattern} should be trimmed: {hits[:5]}"
    gone_dirs = ["pyarrow/include", "pyarrow/includes", "pyarrow/src", "pyarrow/tests",
                 "*/tests", "sqlglot/executor"]
    for pattern in gone_dirs:
        hits = fnmatch.filter(dirs, pattern)
        assert not hits, f"{pattern} should be trimmed: {hits[:5]}"
    for pattern in FORBIDDEN:
        assert not fnmatch.filter(files + dirs, pattern), pattern
    assert [(f, trimmed_by(f)) for f in layer.files() if trimmed_by(f)] == []
    # of sqlglot's dialect packages, only what its default dialect imports stays
    for package in ("dialects", "generators", "parsers", "typing"):
        left = sorted(f for f in files if f.startswith(f"sqlglot/{package}/"))
        assert left == [f"sqlglot/{package}/{m}.py" for m in SQLGLOT_KEPT[package]], left
    # only the Swagger UI's assets go: the event handler (unused here) still imports
    assert "aws_lambda_powertools/event_handler/openapi/swagger_ui/html.py" in files
    assert "aws_lambda_powertools/event_handler/__init__.py" in files
    # fastavro keeps its compiled reader and the pure-Python writers its imports fall back to
    assert fnmatch.filter(files, "fastavro/_read.*.so")
    for module in ("_write_py", "_logical_writers_py", "_validation_py"):
        assert f"fastavro/{module}.py" in files, module


def test_required_libraries_are_present_and_linkable(layer: Built) -> None:
    for pattern in REQUIRED:
        assert present(layer.site, pattern), f"missing {pattern}"
    # what pyarrow's core extension still links, all of which must stay
    (lib,) = layer.site.glob("pyarrow/lib.*.so")
    needed = set(read_elf(lib).needed)
    for name in ("libarrow", "libparquet", "libarrow_compute", "libarrow_python"):
        (so,) = [n for n in needed if re.fullmatch(rf"{name}\.so\.\d+", n)]
        assert (layer.site / "pyarrow" / so).is_file(), so
    # ... and no longer the libraries the trim removed, nor does any other file
    for path in elf_files(layer.site):
        assert not [n for n in read_elf(path).needed
                    if n.split(".so")[0] in TRIMMED_PYARROW_LIBS], path
    assert check_elf_closure(layer.site, Target(arch=layer.report["arch"],
                                                python="3.13")) == []


def test_every_elf_file_is_stripped_and_for_the_target(layer: Built) -> None:
    elves = elf_files(layer.site)
    assert len(elves) > 10
    for path in elves:
        info = read_elf(path)
        rel = path.relative_to(layer.site)
        assert info.machine == layer.machine, rel
        assert not info.has_symtab, f"{rel} still has a symbol table"
        assert not info.has_debug_info, f"{rel} still has debug info"


# --------------------------------------------------------------------- bytecode

#: Run by the layer's own Python: the file name compiled into each sourceless module.
CO_FILENAMES = textwrap.dedent("""
    import json, marshal, os, sys
    site, loaded_from = sys.argv[1], sys.argv[2]
    names = {}
    for dirpath, _, files in os.walk(site):
        for name in files:
            if name.endswith(".pyc") and os.path.basename(dirpath) != "__pycache__":
                path = os.path.join(dirpath, name)
                with open(path, "rb") as f:
                    names[os.path.relpath(path, site)] = marshal.loads(f.read()[16:]).co_filename
    print(json.dumps(names))
""")


def _assert_ships_bytecode(built: Built, compiler: Compiler, loaded_from: str) -> None:
    """Every module as the runtime's bytecode (its magic number, ``unchecked-hash``), no
    source but ``KEEP_SOURCE``'s (whose bytecode is in ``__pycache__``), the file names
    compiled in where the runtime loads the layer from, and the report saying so."""
    assert check_bytecode(built.site, compiler.magic, compiler.cache_tag) == []
    files = built.files()
    assert [f for f in files if f.endswith(".py")] == sorted(KEEP_SOURCE)
    for source in KEEP_SOURCE:
        assert cached_path(built.site / source, compiler.cache_tag).is_file(), source
    compiled = [f for f in files if f.endswith(".pyc")]
    sourceless = [f for f in compiled if "/__pycache__/" not in f]
    assert len(sourceless) > 800, len(sourceless)
    report = built.report["bytecode"]
    assert (report["python"], report["magic"], report["invalidation_mode"]) == (
        compiler.release, compiler.magic.hex(), "unchecked-hash")
    assert (report["modules"], report["sourceless"]) == (len(compiled), len(sourceless))
    assert report["bytecode_bytes"] == sum((built.site / f).stat().st_size for f in compiled)
    assert report["loaded_from"] == loaded_from
    assert report["kept_source"] == KEEP_SOURCE
    # the modules the service loads first are there, as bytecode only
    for module in ("polars/__init__", "pyarrow/parquet/core", "sqlglot/parser",
                   "aws_lambda_powertools/logging/logger", "obstore/__init__",
                   "typing_extensions"):
        assert module + ".pyc" in sourceless, module
    listed = subprocess.run([compiler.executable, "-I", "-S", "-c", CO_FILENAMES,
                             str(built.site), loaded_from],
                            capture_output=True, text=True, timeout=300, check=True)
    names = json.loads(listed.stdout)
    assert sorted(names) == sorted(sourceless)
    wrong = {rel: name for rel, name in names.items() if name != f"{loaded_from}/{rel[:-1]}"}
    assert not wrong, list(wrong.items())[:5]


def test_layer_ships_bytecode_for_lambdas_python(layer: Built) -> None:
    """Compiled by a CPython 3.13 (pyenv's here) for ``/opt/python``, where Lambda loads
    the layer from, sourceless: the import compiles nothing at a cold start."""
    compiler = find_compiler(layer.report["python"])
    assert compiler.release.startswith("3.13."), compiler
    _assert_ships_bytecode(layer, compiler, LAMBDA_SITE)


def test_native_layer_ships_bytecode_for_this_python(native_layer: Built) -> None:
    compiler = find_compiler(Target.host().python)
    assert compiler.magic == importlib.util.MAGIC_NUMBER
    _assert_ships_bytecode(native_layer, compiler, str(native_layer.site))


def test_no_layer_without_bytecode_for_its_python(tmp_path: Path) -> None:
    """With no CPython of the target's version on this machine, the build stops before it
    starts, saying what to install; it never ships a layer without bytecode."""
    with pytest.raises(CompilerError, match=(r"CPython 3\.99 .*python3\.99 on PATH and "
                                             r"~/\.pyenv/versions/3\.99\*/bin/python3\.99.*"
                                             r"pyenv install 3\.99")):
        find_compiler("3.99")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(BUILD_PY), "--arch", "arm64", "--python", "3.99",
                           "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "CPython 3.99" in proc.stderr, proc.stderr
    assert not out.exists()


def test_trim_rules_judge_a_module_by_its_source_name() -> None:
    """A sourceless ``x.pyc`` (or a kept source's cache) is trimmed or kept as ``x.py`` is,
    and the sqlglot rules keep what their ``keep`` names."""
    assert source_name("sqlglot/dialects/duckdb.pyc") == "sqlglot/dialects/duckdb.py"
    assert source_name("typing_extensions.pyc") == "typing_extensions.py"
    assert source_name("sqlglot/__pycache__/tokenizer_core.cpython-313.pyc") == (
        "sqlglot/tokenizer_core.py")
    assert source_name("pyarrow/libarrow.so.2300") == "pyarrow/libarrow.so.2300"
    for rel, rule in {"sqlglot/dialects/duckdb.pyc": "sqlglot-dialects",
                      "sqlglot/typing/bigquery.pyc": "sqlglot-dialects",
                      "sqlglot/generators/python.pyc": "sqlglot-executor",
                      "sqlglot/executor/python.pyc": "sqlglot-executor",
                      "sqlglot/lineage.pyc": "sqlglot-executor",
                      "pyarrow/flight.pyc": "pyarrow-flight",
                      "pyarrow/tests/test_io.pyc": "tests",
                      "pyarrow/libarrow_python.so": "pyarrow/libarrow_python.so"}.items():
        assert trimmed_by(rel) == rule, rel
    for rel in ("sqlglot/dialects/dialect.pyc", "sqlglot/dialects/__init__.pyc",
                "sqlglot/parsers/base.pyc", "sqlglot/generators/__init__.pyc",
                "sqlglot/typing/__init__.pyc", "sqlglot/__pycache__/tokenizer_core.cpython-313.pyc",
                "sqlglot/tokenizer_core.py", "sqlglot/diff.pyc", "pyarrow/parquet/core.pyc"):
        assert trimmed_by(rel) is None, rel


def test_elf_reader_agrees_with_readelf(layer: Built) -> None:
    readelf = shutil.which("readelf") or shutil.which(f"{layer.machine}-linux-gnu-readelf")
    if readelf is None:
        pytest.skip("no readelf")
    for path in [*layer.site.glob("pyarrow/lib.*.so"), *layer.site.glob("pyarrow/libarrow.so.*"),
                 *layer.site.glob("pyarrow/libarrow_python.so.*"),
                 *layer.site.glob("obstore/*.so"), *layer.site.glob("ijson/backends/*.so")]:
        out = subprocess.run([readelf, "-d", str(path)], capture_output=True, text=True,
                             check=True).stdout
        info = read_elf(path)
        assert list(info.needed) == re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out)
        assert info.soname == next(iter(re.findall(r"\(SONAME\)\s+Library soname: \[(.+?)\]",
                                                   out)), None)
        # the dynamic symbols: what it exports, and what it needs unversioned (versioned
        # ones name their library in .gnu.version_r)
        exported, undefined = set(), set()
        listed = subprocess.run([readelf, "-W", "--dyn-syms", str(path)], capture_output=True,
                                text=True, check=True).stdout
        for line in listed.splitlines():
            fields = line.split()
            if len(fields) < 8 or not fields[0].rstrip(":").isdigit() or fields[0] == "0:":
                continue
            bind, ndx, name = fields[4], fields[6], fields[7]
            if bind not in ("GLOBAL", "WEAK", "UNIQUE"):
                continue
            if ndx != "UND":
                exported.add(name.split("@")[0])
            elif bind != "WEAK" and "@" not in name:
                undefined.add(name)
        versions = subprocess.run([readelf, "-W", "-V", str(path)], capture_output=True,
                                  text=True, check=True).stdout
        symbols = dynamic_symbols(path)
        assert symbols.exported == exported, path
        assert symbols.undefined == undefined, path
        assert symbols.version_files == set(re.findall(r"File: (\S+)", versions)), path


def test_only_removed_libraries_were_unlinked_and_none_was_in_use(
        layer: Built, tmp_path: Path) -> None:
    """The trim dropped from pyarrow's files the DT_NEEDED entries naming the libraries it
    removed, and only those; every undefined symbol of every ELF file is still defined in
    its lookup scope (the build's check, asserted above). That check catches a library
    still in use: remove libarrow_compute the same way, and it names what lib needs."""
    unlinked = layer.report["unlinked"]
    assert any(rel.startswith("pyarrow/lib.") for rel in unlinked), unlinked
    for rel, names in unlinked.items():
        assert names and {n.split(".so")[0] for n in names} <= set(TRIMMED_PYARROW_LIBS), rel
        assert not set(names) & set(read_elf(layer.site / rel).needed), rel
    site = tmp_path / "python"
    shutil.copytree(layer.site / "pyarrow", site / "pyarrow")
    (compute,) = (site / "pyarrow").glob("libarrow_compute.so.*")
    compute.unlink()
    for path in elf_files(site):
        drop_needed(path, {compute.name})
    problems = check_elf_closure(site, Target(arch=layer.report["arch"], python="3.13"))
    assert any(p.startswith("pyarrow/lib.") and "undefined symbol" in p
               for p in problems), problems


def test_rebuild_with_unchanged_inputs_is_reused(layer: Built) -> None:
    again = _build("--arch", layer.report["arch"], out=layer.out)
    assert "is up to date" in again.log
    assert again.report == layer.report
    target = Target(arch=layer.report["arch"], python=layer.report["python"])
    assert layer.report["fingerprint"] == fingerprint(target, REQUIREMENTS, True,
                                                      find_compiler(target.python).version)


# --------------------------------------------------------------- the build's own code


def _copy_package(dest: Path) -> Path:
    shutil.copytree(PACKAGE_DIR, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


#: A compiler's ``sys.version``, as the fingerprint takes it.
COMPILER = "3.13.0 (main, Oct  8 2024, 00:00:00) [GCC 12.2.0]"


def test_fingerprint_covers_every_file_of_the_build_package(tmp_path: Path) -> None:
    """A change to any file of ``layers/layerbuild`` (or a new one) means a rebuild;
    bytecode caches do not, nor does where the package is."""
    target = Target(arch="arm64", python="3.13")
    package = _copy_package(tmp_path / "layerbuild")
    original = fingerprint(target, REQUIREMENTS, True, COMPILER)
    assert fingerprint(target, REQUIREMENTS, True, COMPILER, package_dir=package) == original

    files = package_files(package)
    names = {p.relative_to(package).as_posix() for p in files}
    assert names == {p.relative_to(PACKAGE_DIR).as_posix() for p in package_files()}
    assert {"__init__.py", "cli.py", "trim.py", "elf.py", "pins.py", "target.py",
            "report.py", "fingerprint.py"} <= names
    for path in files:
        code = path.read_bytes()
        path.write_bytes(code + b"\n")
        assert fingerprint(target, REQUIREMENTS, True, COMPILER,
                           package_dir=package) != original, path
        path.write_bytes(code)
    assert fingerprint(target, REQUIREMENTS, True, COMPILER, package_dir=package) == original

    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "cli.cpython-313.pyc").write_bytes(b"\0" * 16)
    assert fingerprint(target, REQUIREMENTS, True, COMPILER, package_dir=package) == original
    (package / "new_step.py").write_text("")
    assert fingerprint(target, REQUIREMENTS, True, COMPILER, package_dir=package) != original

    # and the other inputs: the pins, the target, stripping
    pins = tmp_path / "requirements.txt"
    pins.write_bytes(REQUIREMENTS.read_bytes() + b"# edited\n")
    assert fingerprint(target, pins, True, COMPILER) != original
    assert fingerprint(Target(arch="x86_64", python="3.13"), REQUIREMENTS, True,
                       COMPILER) != original
    assert fingerprint(Target(arch="arm64", python="3.12"), REQUIREMENTS, True,
                       COMPILER) != original
    assert fingerprint(target, REQUIREMENTS, False, COMPILER) != original
    # ... and the interpreter that compiles the bytecode
    assert fingerprint(target, REQUIREMENTS, True, COMPILER.replace("3.13.0", "3.13.1")) != original


def _package_imports(path: Path) -> set[str]:
    """The modules of the package that ``path`` imports (``from .x import ...``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [
                alias.name for alias in node.names]
            assert not any(n.split(".")[0] in ("layerbuild", "layers") for n in names), (
                f"{path.name} imports the package absolutely; use relative imports, so that "
                "it works both as layerbuild (the CLI) and as layers.layerbuild (the tests)")
    return found


def test_build_package_is_small_modules_without_import_cycles() -> None:
    modules = {p.stem: p for p in PACKAGE_DIR.glob("*.py")}
    graph = {name: _package_imports(path) - {name} for name, path in modules.items()}
    assert graph["__init__"] == set(), "the package's __init__ imports none of its modules"
    for name, path in modules.items():
        assert graph[name] <= set(modules), (name, graph[name] - set(modules))
        tree = ast.parse(path.read_text())
        assert len(path.read_text().splitlines()) <= 400, f"{name}.py is over 400 lines"
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                assert node.end_lineno is not None
                assert node.end_lineno - node.lineno + 1 <= 250, f"{name}.{node.name}"
    # topological order: repeatedly take the modules whose imports are all taken
    ordered: list[str] = []
    while len(ordered) < len(graph):
        ready = sorted(n for n, deps in graph.items() if n not in ordered and deps <= {*ordered})
        assert ready, f"import cycle among {sorted(set(graph) - set(ordered))}"
        ordered += ready
    # the entry point stays a thin wrapper around the package's CLI
    entry = BUILD_PY.read_text()
    assert "from layerbuild.cli import main" in entry
    assert len(entry.splitlines()) <= 30


# ------------------------------------------------- what the trim removed is unused

#: ``pq.read_table`` keywords that its fallback (``ParquetFile``, when pyarrow.dataset is
#: absent) honours; filters, partitioning, schema, filesystem, ignore_prefixes and
#: arrow_extensions_enabled it refuses or ignores, and decryption needs the trimmed
#: encryption module.
READ_TABLE_WITHOUT_DATASET = frozenset({
    "columns", "use_threads", "use_pandas_metadata", "read_dictionary", "binary_type",
    "list_type", "memory_map", "buffer_size", "pre_buffer", "coerce_int96_timestamp_unit",
    "thrift_string_size_limit", "thrift_container_size_limit", "schema_depth_limit",
    "page_checksum_verification"})
#: APIs that need pyarrow.dataset (or Acero), directly or through polars.
NEEDS_DATASET = frozenset({"ParquetDataset", "write_to_dataset", "filters_to_expression",
                           "scan_pyarrow_dataset"})


#: sqlglot's calls that take a dialect, and which of their positional arguments are one.
DIALECT_ARGUMENTS = {"parse_one": slice(1, None), "parse": slice(1, None),
                     "transpile": slice(1, None), "tokenize": slice(1, None),
                     "sql": slice(0, 1), "get_or_raise": slice(0, 1)}


def test_the_service_uses_nothing_the_trim_removed() -> None:
    """Read from the function's source: no import of a trimmed pyarrow or sqlglot module or
    of Powertools' event handler (whose Swagger UI assets are gone), no sqlglot dialect
    named by a string (``read="duckdb"``, ``.sql("spark")``: the named dialects are gone),
    no API that needs pyarrow.dataset, no ``use_pyarrow`` (polars' way into pyarrow.csv and
    pq.read_table's dataset path), and ``pq.read_table`` only on one source with keywords
    its fallback to ParquetFile honours. The smoke check and the end-to-end run below show
    it by running."""
    removed = ({f"pyarrow.{m}" for m in TRIMMED_PYARROW_MODULES}
               | {"aws_lambda_powertools.event_handler", *TRIMMED_SQLGLOT_MODULES})
    read_table_calls = 0
    for path in sorted(FUNCTION_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', '?')}"
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            for name in names:
                assert not any(name == r or name.startswith(r + ".") for r in removed), (
                    f"{where} imports {name}, which the layer does not ship")
            if isinstance(node, ast.Attribute):
                assert node.attr not in NEEDS_DATASET, f"{where}: {node.attr} needs pyarrow.dataset"
            if isinstance(node, ast.Call):
                keywords = {k.arg for k in node.keywords if k.arg is not None}
                assert "use_pyarrow" not in keywords, f"{where}: use_pyarrow"
                dialects = [k.value for k in node.keywords if k.arg in ("read", "write",
                                                                        "dialect")]
                if isinstance(node.func, ast.Attribute) and node.func.attr in DIALECT_ARGUMENTS:
                    dialects += node.args[DIALECT_ARGUMENTS[node.func.attr]]
                assert not [d for d in dialects if isinstance(d, ast.Constant)
                            and isinstance(d.value, str)], (
                    f"{where} names a sqlglot dialect, and the layer has only the default one")
                if isinstance(node.func, ast.Attribute) and node.func.attr == "read_table":
                    read_table_calls += 1
                    assert len(node.args) == 1, f"{where}: pq.read_table of one source"
                    assert len(keywords) == len(node.keywords), f"{where}: **kwargs"
                    assert keywords <= READ_TABLE_WITHOUT_DATASET, (
                        f"{where}: pq.read_table({', '.join(sorted(keywords))}) needs "
                        "pyarrow.dataset, which the layer does not ship")
    assert read_table_calls, "the page-level decoder no longer calls pq.read_table"


# ------------------------------------------------------------------ does it work


def test_native_layer_imports_and_reads_parquet_alone(native_layer: Built) -> None:
    """The smoke check on the native layer: every library as the service uses it, then the
    service on every codec it reads and writes."""
    # the isolated interpreter really has nothing: without the layer polars is not there
    bare = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", "import polars"],
                          capture_output=True, text=True, cwd=native_layer.out, check=False)
    assert bare.returncode != 0
    assert "ModuleNotFoundError" in bare.stderr
    result = run_smoke_check(native_layer.site, sys.executable)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SMOKE OK" in result.stdout
    assert native_layer.report["native"] is True


def test_deployable_layer_works_with_its_python(layer: Built) -> None:
    """The layer Lambda would load, loaded by a CPython 3.13 of the same machine type, when
    this machine has one (x86_64 machines with a pyenv 3.13 do): the smoke check, the
    service's Lambda entry point imported and its engine run over every Parquet codec
    (each decoder), every output codec and every CSV/JSON codec. The arm64 layer, trimmed
    by the same rules from the same pyarrow, is shown loadable statically (above)."""
    host = platform.machine().lower().replace("amd64", "x86_64").replace("arm64", "aarch64")
    if layer.machine != host:
        pytest.skip(f"an {layer.machine} layer cannot load on {host}")
    python = find_python("3.13")
    if python is None:
        pytest.skip("no CPython 3.13 on this machine")
    result = run_smoke_check(layer.site, python)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SMOKE OK" in result.stdout


# ---------------------------------------------- the end-to-end tests on the layer

#: The integration tests run on the layer: the end-to-end file, which drives the handler
#: through a real S3 server over every output format, SQL, the page index and the error
#: paths, and the tracing test, which builds the X-Ray recorder with the runtime's botocore
#: (the smoke check cannot: it has no botocore). Together they load every module of the
#: layer that the whole of tests/integration loads; the rest of it tests the service's own
#: logic, which does not depend on where the libraries come from, and runs in the main suite.
LAYER_TESTS = ("tests/integration/test_s3_end_to_end.py",
               "tests/integration/test_entry_points.py"
               "::test_each_phase_is_a_trace_subsegment_when_tracing_is_on")
#: What those tests need besides the service and its dependencies: the test runner (and
#: hypothesis, which tests/conftest.py imports), boto3 (which the Lambda runtime provides)
#: and the embedded S3 server, i.e. moto for S3 plus the server-mode pieces of
#: ``moto[server]`` that ``s3slice.cli.local_s3`` uses (flask, flask-cors). The rest of that
#: extra (cfn-lint, sympy, docker, aws-xray-sdk, ...) is for other services, would triple
#: the install, and would put on the path an X-Ray SDK that the layer deliberately leaves
#: out.
TEST_ENV_REQUIREMENTS = ("pytest", "pytest-timeout", "hypothesis", "boto3", "moto[s3]",
                         "flask", "flask-cors")
#: The layer's import packages that the service uses (and their compiled runtime).
SERVICE_PACKAGES = ("polars", "pyarrow", "obstore", "aws_lambda_powertools", "sqlglot",
                    "thriftpy2", "xxhash")
LAYER_ONLY_PACKAGES = (*SERVICE_PACKAGES, "_polars_runtime_32", "aws_xray_sdk", "wrapt", "ply",
                       "jmespath", "typing_extensions")
#: Distributions that must not be in the test environment: the service's dependencies
#: come from the layer only; the Lambda runtime has no numpy, pandas or X-Ray SDK either.
NOT_IN_TEST_ENV = frozenset({"polars", "polars-runtime-32", "polars-runtime-64",
                             "polars-runtime-compat", "pyarrow", "obstore",
                             "aws-lambda-powertools", "sqlglot", "numpy", "pandas",
                             "aws-xray-sdk", "thriftpy2", "ply", "xxhash"})
TEST_VENV = BUILD_ROOT / "integration-venv"
#: Wheels for the test environment, kept like the layer's (pip's own cache does not keep
#: responses marked uncacheable), so that a new test environment installs offline.
TEST_WHEELS = default_wheel_cache().parent / "test-env-wheels"

#: A pytest plugin loaded into the integration run: records where every module came from.
PROVENANCE_PLUGIN = textwrap.dedent("""
    import json, os, sys

    def pytest_sessionfinish(session, exitstatus):
        files = {name: getattr(module, "__file__", None)
                 for name, module in list(sys.modules.items())}
        with open(os.environ["S3SLICE_PROVENANCE"], "w") as f:
            json.dump({"files": files, "sys_path": sys.path, "prefix": sys.prefix}, f)
""")


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _test_env_pins() -> list[str]:
    """``name==version`` for the whole closure of ``TEST_ENV_REQUIREMENTS``, as installed in
    the environment running this test: installed with ``--no-deps``, nothing to resolve."""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    pins: dict[str, str] = {}
    done: set[tuple[str, str]] = set()
    pending = [Requirement(r) for r in TEST_ENV_REQUIREMENTS]
    while pending:
        requirement = pending.pop()
        name = normalize(requirement.name)
        dist = importlib.metadata.distribution(name)
        pins[name] = dist.version
        for extra in {"", *requirement.extras}:
            if (name, extra) in done:
                continue
            done.add((name, extra))
            for raw in dist.requires or []:
                dependency = Requirement(raw)
                if dependency.marker is None or dependency.marker.evaluate(
                        {**default_environment(), "extra": extra}):
                    pending.append(dependency)
    return sorted(f"{name}=={version}" for name, version in pins.items())


def _pip(python: Path, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-m", "pip", *args, "--disable-pip-version-check",
                           "--no-input", "--quiet"],
                          capture_output=True, text=True, timeout=timeout, check=False)


def _test_venv() -> Path:
    """A virtualenv (``python -m venv``, this interpreter) with only the test tools in it.

    Reused while the pins and the interpreter are unchanged (``s3slice-stamp.json``), like
    the layer builds; wheels are kept in ``TEST_WHEELS`` (a rebuild installs offline).
    """
    pins = _test_env_pins()
    stamp = {"python": sys.version, "pins": pins}
    stamp_file = TEST_VENV / "s3slice-stamp.json"
    python = _venv_python(TEST_VENV)
    if stamp_file.is_file() and json.loads(stamp_file.read_text()) == stamp and python.exists():
        return TEST_VENV
    shutil.rmtree(TEST_VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(TEST_VENV)], check=True, timeout=600)
    TEST_WHEELS.mkdir(parents=True, exist_ok=True)
    install = ["install", "--no-deps", "--only-binary=:all:", "--no-index",
               "--find-links", str(TEST_WHEELS), *pins]
    if _pip(python, *install).returncode != 0:
        download = _pip(python, "download", "--no-deps", "--only-binary=:all:",
                        "--dest", str(TEST_WHEELS), *pins)
        assert download.returncode == 0, download.stdout + download.stderr
        installed = _pip(python, *install)
        assert installed.returncode == 0, installed.stdout + installed.stderr
    check = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True,
                           timeout=300, check=False)
    assert check.returncode == 0, check.stdout + check.stderr  # the closure is complete
    stamp_file.write_text(json.dumps(stamp))
    return TEST_VENV


def _isolated_env(**extra: str) -> dict[str, str]:
    """The variables a test run needs, and none that could add to its path."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SSL_CERT_FILE", "SSL_CERT_DIR")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.setdefault("LANG", "C.UTF-8")
    return {**env, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", **extra}


def _is_inside(path: str, root: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root))


def test_end_to_end_tests_pass_on_the_native_layer(
        native_layer: Built, tmp_path: Path) -> None:
    """``LAYER_TESTS`` with the service's dependencies from the native layer only.

    The native layer is the same pins and the same trimming as the deployable ones, for
    this machine and this Python, so this shows that the trimming removed nothing the
    service uses. The test environment is a fresh virtualenv with only the test tools;
    ``PYTHONPATH`` is the layer (as Lambda's ``/opt/python``) and ``functions/`` (the
    function's code asset), and a plugin records where every loaded module came from.
    """
    assert native_layer.report["python"] == f"{sys.version_info[0]}.{sys.version_info[1]}"
    venv = _test_venv()
    python = str(_venv_python(venv))

    # the test environment has none of the service's dependencies, and cannot import them
    listed = subprocess.run(
        [python, "-c", "import importlib.metadata as m, json; print(json.dumps("
                       "[d.metadata['Name'] for d in m.distributions()]))"],
        capture_output=True, text=True, env=_isolated_env(), check=True, timeout=120)
    installed = {normalize(name) for name in json.loads(listed.stdout)}
    assert {"pytest", "moto", "boto3", "hypothesis"} <= installed
    assert not installed & NOT_IN_TEST_ENV, installed & NOT_IN_TEST_ENV
    bare = subprocess.run([python, "-c", "import polars"], capture_output=True, text=True,
                          env=_isolated_env(), cwd=tmp_path, check=False, timeout=120)
    assert "ModuleNotFoundError" in bare.stderr, bare.stderr

    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir()
    (plugin_dir / "s3slice_layer_provenance.py").write_text(PROVENANCE_PLUGIN)
    provenance = tmp_path / "provenance.json"
    functions = REPO / "functions"
    env = _isolated_env(
        PATH=os.pathsep.join([str(venv / "bin"), os.environ.get("PATH", "")]),
        PYTHONPATH=os.pathsep.join([str(native_layer.site), str(functions), str(plugin_dir)]),
        S3SLICE_PROVENANCE=str(provenance))
    run = subprocess.run(
        [python, "-m", "pytest", *LAYER_TESTS, "-q", "-p", "no:cacheprovider",
         "-p", "s3slice_layer_provenance"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1500, check=False)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    summary = output.strip().splitlines()[-1]
    assert re.search(r"\d+ passed", summary), summary
    assert "skipped" not in summary, summary

    recorded = json.loads(provenance.read_text())
    files: dict[str, str | None] = recorded["files"]
    assert _is_inside(recorded["prefix"], venv)
    for package in (*SERVICE_PACKAGES, "aws_xray_sdk.core.recorder", "wrapt._wrappers"):
        assert package in files, f"the integration tests never imported {package}"
    strays = sorted(f"{name} from {file}" for name, file in files.items()
                    if file and name.split(".", 1)[0] in LAYER_ONLY_PACKAGES
                    and not _is_inside(file, native_layer.site))
    assert not strays, "not from the layer: " + "; ".join(strays[:10])
    for name in ("polars", "pyarrow", "obstore", "aws_lambda_powertools", "sqlglot"):
        assert _is_inside(str(files[name]), native_layer.site / name), files[name]
    s3slice_files = {n: f for n, f in files.items() if n.split(".", 1)[0] == "s3slice"}
    assert s3slice_files and all(f and _is_inside(f, functions / "s3slice")
                                 for f in s3slice_files.values()), s3slice_files
    for absent in ("numpy", "pandas"):
        assert absent not in files, f"{absent} was imported"
    # boto3 and moto come from the test environment (Lambda's runtime provides boto3)
    assert _is_inside(str(files["boto3"]), venv)
    assert _is_inside(str(files["moto"]), venv)
