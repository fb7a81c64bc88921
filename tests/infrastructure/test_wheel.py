"""The two distributions, built by the ordinary front-end (``uv build``) without a layer:
the engine ``s3slice`` (the function alone) and the construct library ``s3slice-cdk``,
which carries the function's code. The construct library installs into a fresh venv
without polars, pyarrow or obstore, and the example app synthesizes there, outside the
repository (``cdk.App().synth()`` run by the venv's Python: no CDK CLI needed), with the
function's code asset made of the carried package and a release-named layer zip.

Slow (it installs aws-cdk-lib), bounded by its timeouts; uv reuses its package cache."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import s3slice
from s3slice_cdk import layer_zip_name
from tests.infrastructure.support import REPO_DIR, make_stand_in_layer
from tests.infrastructure.test_cli_synth import _missing, offline_env
from tests.infrastructure.test_example import EXAMPLE_DIR, check_example_output

pytestmark = [pytest.mark.infrastructure, pytest.mark.slow]

UV = Path(sys.executable).parent / "uv"
VERSION = s3slice.__version__
ENGINE_ONLY = ("polars", "pyarrow", "obstore")


def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, text=True, capture_output=True, check=False,
                            **kwargs)  # type: ignore[call-overload]
    assert result.returncode == 0, f"{command}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result  # type: ignore[no-any-return]


def function_files() -> set[str]:
    """The function package's shipped files, relative to ``functions/``."""
    root = REPO_DIR / "functions"
    return {p.relative_to(root).as_posix() for p in (root / "s3slice").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not UV.exists():
        _missing("uv is not installed in the venv (make setup installs it)")
    out = tmp_path_factory.mktemp("dist")
    # `uv build` makes the sdist and then the wheel from it: the path a release takes.
    run([str(UV), "build", "--quiet", "--out-dir", str(out)], cwd=REPO_DIR, timeout=600)
    run([str(UV), "build", "--quiet", "--out-dir", str(out), "cdk"], cwd=REPO_DIR,
        timeout=600)
    return out


def test_the_engine_wheel_holds_the_function_alone(dist: Path) -> None:
    wheel = dist / f"s3slice-{VERSION}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {n.split("/", 1)[0] for n in names if not n.startswith(f"s3slice-{VERSION}.")}
    assert tops == {"s3slice"}  # no s3slice_cdk, no layerbuild, nothing generic
    assert function_files() <= names


def test_the_construct_wheel_carries_the_function_and_nothing_generic(dist: Path) -> None:
    wheel = dist / f"s3slice_cdk-{VERSION}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {n.split("/", 1)[0] for n in names if not n.startswith(f"s3slice_cdk-{VERSION}.")}
    assert tops == {"s3slice_cdk"}
    carried = {n.removeprefix("s3slice_cdk/function_code/") for n in names
               if n.startswith("s3slice_cdk/function_code/")}
    assert carried == function_files()  # the whole package, no bytecode, nothing else
    assert {"s3slice_cdk/pipeline.py", "s3slice_cdk/staging/code_asset.py",
            "s3slice_cdk/py.typed"} <= names
    metadata = zipfile.ZipFile(wheel).read(f"s3slice_cdk-{VERSION}.dist-info/METADATA")
    requires = [line.split(":", 1)[1].strip() for line in metadata.decode().splitlines()
                if line.startswith("Requires-Dist:")]
    assert not [r for r in requires if r.startswith((*ENGINE_ONLY, "s3slice"))]
    with tarfile.open(dist / f"s3slice_cdk-{VERSION}.tar.gz") as sdist:
        in_sdist = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert {f"s3slice_cdk/function_code/{f}" for f in function_files()} <= in_sdist


def test_the_constructs_install_without_the_engine_and_the_example_synthesizes(
        dist: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run([str(UV), "venv", "--quiet", "--python", sys.executable, str(venv)], timeout=300)
    python = venv / "bin" / "python"
    wheel = dist / f"s3slice_cdk-{VERSION}-py3-none-any.whl"
    run([str(UV), "pip", "install", "--quiet", "--python", str(python),
         "--constraint", str(REPO_DIR / "constraints.txt"), str(wheel)],
        cwd=tmp_path, timeout=900)
    env = offline_env(tmp_path)
    env.pop("PYTHONPATH", None)
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    probe = json.loads(run(
        [str(python), "-c",
         "import importlib.metadata as m, importlib.util as u, json, s3slice_cdk; "
         f"print(json.dumps({{'version': m.version('s3slice-cdk'), "
         f"'file': s3slice_cdk.__file__, "
         f"'absent': [n for n in {ENGINE_ONLY!r} if u.find_spec(n) is None]}}))"],
        cwd=tmp_path, env=env, timeout=300).stdout)
    assert probe["version"] == VERSION
    assert Path(probe["file"]).is_relative_to(venv)
    assert probe["absent"] == list(ENGINE_ONLY)

    # The example app, copied out of the repository, with a layer zip named as a release's.
    app = tmp_path / "app"
    shutil.copytree(EXAMPLE_DIR, app, ignore=shutil.ignore_patterns("cdk.out", "__pycache__"))
    layer_dir = make_stand_in_layer(tmp_path / "layer")
    layer = tmp_path / layer_zip_name(VERSION, architecture="arm64", python_version="3.13")
    with zipfile.ZipFile(layer, "w") as archive:
        for path in sorted(layer_dir.rglob("*")):
            archive.write(path, path.relative_to(layer_dir).as_posix())
    out = tmp_path / "cdk.out"
    # What the CLI would pass: the context, and asset paths in the template's metadata.
    context = {"layer": str(layer), "aws:cdk:enable-asset-metadata": True}
    env.update({"CDK_OUTDIR": str(out), "CDK_CONTEXT_JSON": json.dumps(context)})
    run([str(python), "app.py"], cwd=app, env=env, timeout=900)
    template = check_example_output(out, "AnalyticsSlices")

    # A bad query fails synth there too, with the function's own parser (sqlglot only).
    env["CDK_OUTDIR"] = str(tmp_path / "bad.out")
    bad = (app / "app.py").read_text().replace("amount >= 100", "amount >")
    (app / "bad_app.py").write_text(bad)
    failed = subprocess.run([str(python), "bad_app.py"], cwd=app, env=env, text=True,
                            capture_output=True, timeout=900, check=False)
    assert failed.returncode != 0
    assert "Orders" in failed.stderr and "query" in failed.stderr

    # The function's code asset is the carried package alone, and the layer the zip.
    [function] = [r for r in template["Resources"].values()
                  if r["Type"] == "AWS::Lambda::Function"
                  and r["Properties"].get("Handler") == "s3slice.handler.lambda_handler"]
    asset = out / function["Metadata"]["aws:asset:path"]
    assert sorted(p.name for p in asset.iterdir()) == ["s3slice"]
    assert {f"{p.relative_to(asset).as_posix()}" for p in asset.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts} == function_files()
    [layer_version] = [r for r in template["Resources"].values()
                       if r["Type"] == "AWS::Lambda::LayerVersion"]
    assert layer_version["Metadata"]["aws:asset:path"].endswith(".zip")
