"""The built wheel installs into a fresh venv with its ``cdk`` extra, and the example app
synthesizes there, outside the repository: the construct library, the function's code
asset (the installed package alone) and a release-named layer zip, with cdk-nag on.

Slow (it installs aws-cdk-lib, polars and pyarrow), bounded by its timeouts; uv reuses
its package cache."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import s3slice
from s3slice_cdk import layer_zip_name
from tests.infrastructure.support import REPO_DIR, make_stand_in_layer
from tests.infrastructure.test_cli_synth import CDK_CLI, _missing, offline_env
from tests.infrastructure.test_example import EXAMPLE_DIR, check_example_output

pytestmark = [pytest.mark.infrastructure, pytest.mark.slow]

UV = Path(sys.executable).parent / "uv"


def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, text=True, capture_output=True, check=False,
                            **kwargs)  # type: ignore[call-overload]
    assert result.returncode == 0, f"{command}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result  # type: ignore[no-any-return]


def test_the_wheel_installs_and_its_example_app_synthesizes(tmp_path: Path) -> None:
    if not UV.exists():
        _missing("uv is not installed in the venv (make setup installs it)")
    if not CDK_CLI.exists():
        _missing("the CDK CLI is not installed: run `npm ci --prefix cdk`")
    dist = tmp_path / "dist"
    run([str(UV), "build", "--wheel", "--quiet", "--out-dir", str(dist)], cwd=REPO_DIR,
        timeout=600)
    [wheel] = dist.glob("s3slice-*.whl")
    assert wheel.name == f"s3slice-{s3slice.__version__}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    assert "s3slice_cdk/pipeline.py" in names and "layerbuild/code_asset.py" in names
    assert not [n for n in names if n.startswith(("tests/", "examples/", "cdk/", "layers/"))]
    # Every package of the function ships (found, not listed: a new one ships too).
    packages = {"/".join(p.parent.relative_to(REPO_DIR / "functions").parts)
                for p in (REPO_DIR / "functions" / "s3slice").rglob("__init__.py")}
    assert {p for p in packages if f"{p}/__init__.py" not in names} == set()
    assert "s3slice/parquet/parquet.thrift" in names

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=300)
    python = venv / "bin" / "python"
    run([str(UV), "pip", "install", "--quiet", "--python", str(python),
         "--constraint", str(REPO_DIR / "constraints.txt"), f"{wheel}[cdk]"],
        cwd=tmp_path, timeout=900)
    # One version: the metadata's is the package's; s3slice_cdk is the installed one.
    probe = run([str(python), "-c",
                 "import importlib.metadata as m, s3slice, s3slice_cdk, sys; "
                 "print(m.version('s3slice'), s3slice.__version__, s3slice_cdk.__file__)"],
                cwd=tmp_path, timeout=300).stdout.split()
    assert probe[0] == probe[1] == s3slice.__version__
    assert Path(probe[2]).is_relative_to(venv)

    # The example app, copied out of the repository, with a layer zip named as a release's.
    app = tmp_path / "app"
    shutil.copytree(EXAMPLE_DIR, app, ignore=shutil.ignore_patterns("cdk.out", "__pycache__"))
    layer_dir = make_stand_in_layer(tmp_path / "layer")
    layer = tmp_path / layer_zip_name(s3slice.__version__, architecture="arm64",
                                      python_version="3.13")
    with zipfile.ZipFile(layer, "w") as archive:
        for path in sorted(layer_dir.rglob("*")):
            archive.write(path, path.relative_to(layer_dir).as_posix())
    env = offline_env(tmp_path)
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env["PATH"]])
    env.pop("PYTHONPATH", None)
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    out = tmp_path / "cdk.out"
    result = subprocess.run(
        [str(CDK_CLI), "synth", "--no-version-reporting", "--no-notices", "--no-lookups",
         "--quiet", "--output", str(out), "--context", f"layer={layer}"],
        cwd=app, env=env, text=True, capture_output=True, timeout=900, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    template = check_example_output(out, "AnalyticsSlices")

    # The function's code asset is the installed package alone, not site-packages.
    [function] = [r for r in template["Resources"].values()
                  if r["Type"] == "AWS::Lambda::Function"
                  and r["Properties"].get("Handler") == "s3slice.handler.lambda_handler"]
    asset = out / function["Metadata"]["aws:asset:path"]
    assert sorted(p.name for p in asset.iterdir()) == ["s3slice"]
    assert (asset / "s3slice" / "handler.py").is_file()
    [layer_version] = [r for r in template["Resources"].values()
                       if r["Type"] == "AWS::Lambda::LayerVersion"]
    assert layer_version["Metadata"]["aws:asset:path"].endswith(".zip")
