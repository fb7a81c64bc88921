"""The built layer works: the native layer imports and reads Parquet alone, the
deployable layer runs with its Python, and the end-to-end integration tests pass on the
native layer in a virtualenv with nothing but the test runner, moto and boto3."""

from __future__ import annotations

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

import pytest

from layers.layerbuild.layout import BUILD_ROOT, default_wheel_cache
from layers.layerbuild.pins import normalize
from layers.layerbuild.smoke import find_python, run_smoke_check
from tests.infrastructure.layer_build import REPO, Built

pytestmark = [pytest.mark.slow, pytest.mark.infrastructure, pytest.mark.timeout(1800)]


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
