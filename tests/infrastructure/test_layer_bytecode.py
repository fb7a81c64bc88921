"""The layer ships bytecode for its Python: compiled for Lambda's Python (and for this
one natively), with the source file names the trim judges; no layer without it."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from layers.layerbuild.bytecode import (
    KEEP_SOURCE,
    LAMBDA_SITE,
    Compiler,
    cached_path,
    check_bytecode,
    find_compiler,
)
from layers.layerbuild.target import Target
from s3slice_cdk.staging.bytecode import CompilerError
from tests.infrastructure.layer_build import BUILD_PY, REPO, Built

pytestmark = [pytest.mark.slow, pytest.mark.infrastructure, pytest.mark.timeout(1800)]


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
