"""The function's code asset: ``functions/`` with bytecode for the runtime's Python.

Synthesized, the asset holds the files the CDK staged before (``functions/`` less caches and
packaging metadata) plus, for every source, ``__pycache__/<name>.<cache_tag>.pyc``: the
runtime's magic number, ``unchecked-hash`` flags, the hash of that very source, and
``/var/task/...`` as the file name compiled in. An interpreter of that version imports the
handler from it without compiling any of its modules. Staging is deterministic, and without
an interpreter of the runtime's version the stack still synthesizes, with the sources only
and a warning.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk.assertions import Annotations, Match, Template

from s3slice_cdk.code_asset import NO_BYTECODE_WARNING, function_code
from s3slice_cdk.contract import FUNCTION_CODE_DIR
from s3slice_cdk.function import HANDLER, ReadFunction, ReadFunctionProps
from s3slice_cdk.staging.bytecode import UNCHECKED_HASH_FLAGS, find_compiler
from s3slice_cdk.staging.code_asset import LAMBDA_TASK_ROOT, stage_code
from tests.infrastructure.support import Synthesized, bare_stack

pytestmark = pytest.mark.infrastructure

#: What the CDK left out of the asset before it was staged with bytecode: the same files
#: must reach it now (the bytecode aside).
SOURCE_EXCLUDES = ["**/__pycache__", "**/*.pyc", "**/*.pyo", "**/.mypy_cache",
                   "**/.pytest_cache", "**/.ruff_cache", "**/*.egg-info", "**/.DS_Store"]

#: Run by the runtime's interpreter over an asset: each ``.pyc`` with its magic number,
#: flags, whether its source hash is that of the source beside it (the check that
#: ``checked-hash`` bytecode would make at every import), and the file name compiled in.
INSPECT = textwrap.dedent("""\
    import importlib.util, json, marshal, pathlib, sys
    root = pathlib.Path(sys.argv[1])
    out = {}
    for pyc in sorted(root.rglob("*.pyc")):
        data = pyc.read_bytes()
        source = pyc.parent.parent / (pyc.name.split(".", 1)[0] + ".py")
        out[pyc.relative_to(root).as_posix()] = {
            "magic": data[:4].hex(), "flags": int.from_bytes(data[4:8], "little"),
            "fresh": source.is_file()
                     and data[8:16] == importlib.util.source_hash(source.read_bytes()),
            "co_filename": marshal.loads(data[16:]).co_filename}
    print(json.dumps(out))
""")

#: Run by the runtime's interpreter with ``-B``: imports the handler from the asset (first
#: on ``sys.path``) and reports every module compiled from source on the way, and where
#: each of the function's modules came from.
IMPORT = textwrap.dedent("""\
    import importlib.machinery, json, sys
    sys.path.insert(0, sys.argv[1])
    compiled = []
    to_code = importlib.machinery.SourceFileLoader.source_to_code
    def spy(self, data, path, *args, **kwargs):
        compiled.append(str(path))
        return to_code(self, data, path, *args, **kwargs)
    importlib.machinery.SourceFileLoader.source_to_code = spy
    import s3slice.handler
    modules = {name: [m.__file__, m.__cached__] for name, m in sys.modules.items()
               if name == "s3slice" or name.startswith("s3slice.")}
    print(json.dumps({"compiled": compiled, "modules": modules}))
""")


def _asset_dir(synth: Synthesized) -> Path:
    function = synth.json["Resources"][synth.logical_id(synth.stack.read_function.function)]
    key = function["Properties"]["Code"]["S3Key"]
    return Path(synth.app.outdir) / f"asset.{key.removesuffix('.zip')}"


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _run(python: str, script: str, *args: str) -> Any:
    result = subprocess.run([python, "-I", "-B", "-c", script, *args], capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout)


def _staged_before(tmp_path: Path, code: Path = FUNCTION_CODE_DIR) -> Path:
    """``code`` as ``Code.from_asset(..., exclude=SOURCE_EXCLUDES)`` staged it."""
    stack = Stack(App(outdir=str(tmp_path)), "Before")
    asset = s3_assets.Asset(stack, "Code", path=str(code), exclude=SOURCE_EXCLUDES)
    return tmp_path / asset.asset_path


def test_asset_is_the_code_with_fresh_bytecode_for_every_source(
        default_stack: Synthesized, tmp_path: Path) -> None:
    """Python 3.13 (the default runtime), compiled by a CPython 3.13 here (pyenv's)."""
    compiler = find_compiler("3.13")
    asset = _asset_dir(default_stack)
    files = _files(asset)
    sources = sorted(p for p in files if p.endswith(".py"))
    assert "s3slice/handler.py" in sources and len(sources) > 50
    expected = {(PurePosixPath(p).parent / "__pycache__"
                 / f"{PurePosixPath(p).stem}.{compiler.cache_tag}.pyc").as_posix()
                for p in sources}
    assert {p for p in files if p.endswith(".pyc")} == expected
    inspected = _run(compiler.executable, INSPECT, str(asset))
    assert set(inspected) == expected
    for rel, pyc in inspected.items():
        source = rel.replace("__pycache__/", "").replace(f".{compiler.cache_tag}.pyc", ".py")
        assert pyc == {"magic": compiler.magic.hex(), "flags": UNCHECKED_HASH_FLAGS,
                       "fresh": True, "co_filename": f"{LAMBDA_TASK_ROOT}/{source}"}, rel


def test_same_code_stages_the_same_asset(tmp_path: Path) -> None:
    """Two synths of the same code, each compiled afresh in its own build directory, make
    the same files: the same asset hash, so an unchanged function is never redeployed; and
    those files are the ones staged before, plus the bytecode.
    (From a snapshot of functions/: the working tree may change while the tests run.)"""
    code = tmp_path / "functions"
    shutil.copytree(FUNCTION_CODE_DIR, code, ignore=shutil.ignore_patterns("__pycache__"))
    keys, staged = [], []
    for build in ("one", "two"):
        stack = bare_stack()
        asset, held = function_code(stack, code, "3.13", build_dir=tmp_path / build)
        lambda_.Function(stack, "Reader", code=asset, handler=HANDLER,
                         runtime=lambda_.Runtime.PYTHON_3_13)
        (function,) = Template.from_stack(stack).find_resources(
            "AWS::Lambda::Function").values()
        keys.append(function["Properties"]["Code"]["S3Key"])
        staged.append(held)
    assert staged[0].compiler is not None
    assert keys[0] == keys[1]
    assert staged[0].path.name == staged[1].path.name
    assert _files(staged[0].path) == _files(staged[1].path)
    # the bytecode aside, the files the CDK staged before, byte for byte
    assert {p: b for p, b in _files(staged[0].path).items() if not p.endswith(".pyc")} == (
        _files(_staged_before(tmp_path / "before", code)))
    again = stage_code(code, tmp_path / "one", "3.13")
    assert again.path == staged[0].path  # reused
    assert [p.name for p in (tmp_path / "one").iterdir()] == [again.path.name]


def test_changed_code_is_staged_again(tmp_path: Path) -> None:
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "pkg" / "__init__.py").write_text("X = 1\n")
    before = stage_code(code, tmp_path / "build", "3.13")
    (code / "pkg" / "__init__.py").write_text("X = 2\n")
    after = stage_code(code, tmp_path / "build", "3.13")
    assert after.path != before.path
    compiler = find_compiler("3.13")
    assert all(pyc["fresh"] for pyc in _run(compiler.executable, INSPECT,
                                             str(after.path)).values())


def test_handler_imports_without_compiling_the_function(stand_in_layer: Path,
                                                         tmp_path: Path) -> None:
    """With this interpreter as the runtime (its packages stand in for the layer), the
    handler and every module it imports load from the asset's bytecode: none of the
    function's modules is compiled. The same import from the sources alone compiles them
    all (what every cold start did)."""
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    stack = bare_stack()
    ReadFunction(stack, "Reader", props=ReadFunctionProps(
        code_dir=FUNCTION_CODE_DIR, layer_dir=stand_in_layer, query={},
        output_uri="s3://acme-out/results/", python_version=python))
    (function,) = Template.from_stack(stack).find_resources("AWS::Lambda::Function").values()
    key = function["Properties"]["Code"]["S3Key"]
    asset = Path(stack.node.root.outdir) / f"asset.{key.removesuffix('.zip')}"

    loaded = _run(sys.executable, IMPORT, str(asset))
    ours = [p for p in loaded["compiled"] if Path(p).is_relative_to(asset)]
    assert ours == []
    assert len(loaded["modules"]) > 30
    for name, (file, cached) in loaded["modules"].items():
        assert Path(file).is_relative_to(asset), name
        assert Path(cached).is_file(), name

    before = _run(sys.executable, IMPORT, str(_staged_before(tmp_path / "before")))
    compiled = [p for p in before["compiled"] if "/s3slice/" in p]
    assert len(compiled) == len(loaded["modules"])


def test_without_an_interpreter_of_the_runtime_synth_ships_sources_and_warns(
        monkeypatch: pytest.MonkeyPatch, stand_in_layer: Path, tmp_path: Path) -> None:
    """No CPython 3.13 here: the stack still synthesizes; the asset is the sources as
    before, and a warning says that cold starts will compile them and what to install."""
    monkeypatch.setattr("s3slice_cdk.staging.bytecode.find_python", lambda version: None)
    stack = bare_stack()
    reader = ReadFunction(stack, "Reader", props=ReadFunctionProps(
        code_dir=FUNCTION_CODE_DIR, layer_dir=stand_in_layer, query={},
        output_uri="s3://acme-out/results/"))
    assert reader.code.compiler is None
    Annotations.from_stack(stack).has_warning("/Bare/Reader", Match.string_like_regexp(
        r"ships its \d+ Python sources without bytecode, so every cold start compiles them"
        r".*CPython 3\.13.*pyenv install 3\.13.*synthesize again"
        rf".*\[ack: {NO_BYTECODE_WARNING}\]"))
    assert _files(reader.code.path) == _files(_staged_before(tmp_path / "before"))
