"""What the Runtime Interface Emulator runs (``rie.py``), each built once into
``.work/rie`` (``.work/bin`` for the emulator) and reused while its inputs are unchanged:

- ``aws-lambda-rie``: AWS's Runtime Interface Emulator, ``go install`` of a pinned
  pseudo-version (the module proxy serves no semver tag of it that builds with this Go);
- the runtime (Lambda's ``/var/runtime``): ``awslambdaric`` (AWS's runtime interface
  client) for CPython 3.13 x86_64, installed from its manylinux wheel, compiled with 3.13;
- s3slice's layer (``/opt``): ``layers/build.py --arch x86_64`` (it reuses an unchanged
  build itself); its code (``/var/task``): the code asset as the CDK stages it
  (``s3slice_cdk.staging.code_asset.stage_code``);
- the peer: a polars-only function, its handler below (:data:`POLARS_HANDLER`) staged the
  same way, and a layer of polars alone (the layer's own pins), compiled with 3.13.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .common import REPO, WORK
from .substrate import go_install

if TYPE_CHECKING:
    from s3slice_cdk.staging.bytecode import Compiler

RIE_MODULE = "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie"
#: The proxy serves this pseudo-version (main, 2026-10-30); ``v1.23.0`` is not served.
RIE_VERSION = "v0.0.0-20261030222936-bef5c4ba774d"
AWSLAMBDARIC = "awslambdaric==4.2.2"
PYTHON = "3.13"
PLATFORM = ("--python-version", PYTHON, "--implementation", "cp", "--only-binary=:all:",
            "--platform", "manylinux2014_x86_64")
RIE_WORK = WORK / "rie"
S3SLICE_LAYER = REPO / "layers" / "build" / "x86_64"

#: The polars-only function: what ``../shared/bench/lambda_cost.py``'s polars peer does
#: for seed-004 (scan, select, filter, collect, ``write_parquet`` to S3), as a handler.
POLARS_HANDLER = '''"""A polars-only function: the peer s3slice is judged against."""
import os

import polars as pl

SO = {"aws_endpoint_url": os.environ["AWS_ENDPOINT_URL"], "aws_region": os.environ["AWS_REGION"],
      "aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
      "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"], "aws_allow_http": "true"}


def handler(event, context):
    lf = pl.scan_parquet(event["source"], storage_options=SO).select(event["columns"])
    df = lf.filter(pl.col("col_1") <= event["max_col_1"]).collect()
    df.write_parquet(event["output"], storage_options=SO)
    return {"rows": df.height}
'''


@dataclass(frozen=True)
class Function:
    """One function as Lambda lays it out: its layer (``/opt``), its code (``/var/task``)
    and its handler (``_HANDLER``)."""

    name: str
    layer: Path
    task: Path
    handler: str


@dataclass(frozen=True)
class Built:
    rie: Path
    runtime: Path
    python: str  #: the CPython 3.13 executable (not a pyenv shim)
    functions: tuple[Function, ...]
    #: what was built and how long it took (seconds), or "reused"
    timings: dict[str, str]


def _timed(timings: dict[str, str], what: str, started: float, reused: bool) -> None:
    timings[what] = "reused" if reused else f"{time.monotonic() - started:.1f} s"


def _stamp_ok(target: Path, wanted: str) -> bool:
    stamp = target / ".stamp"
    return stamp.exists() and stamp.read_text() == wanted


def _pip_target(packages: list[str], target: Path, compiler: Compiler, loaded_from: str) -> None:
    """``pip install --target`` of the manylinux wheels for CPython 3.13 (no bytecode from
    this interpreter), then unchecked-hash bytecode compiled by 3.13 as under
    ``loaded_from``: ``/opt`` and ``/var/runtime`` are read-only in Lambda."""
    from s3slice_cdk.staging.bytecode import run_compileall

    shutil.rmtree(target, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-compile", "--no-deps",
                    "--target", str(target), *PLATFORM, *packages], check=True, timeout=900)
    run_compileall(compiler, target, loaded_from, str(target))


def _pins(*names: str) -> list[str]:
    """``name==version`` lines of ``layers/requirements.txt`` for ``names``."""
    lines = (REPO / "layers" / "requirements.txt").read_text().splitlines()
    pins = [ln.split("#")[0].strip() for ln in lines]
    out = [p for p in pins if p.split("==")[0] in names]
    if len(out) != len(names):
        raise SystemExit(f"layers/requirements.txt does not pin all of {names}")
    return out


def ensure_all() -> Built:
    cdk = str(REPO / "cdk")
    if cdk not in sys.path:
        sys.path.append(cdk)  # the construct library's staging (standard library only)
    from s3slice_cdk.staging.bytecode import find_compiler
    from s3slice_cdk.staging.code_asset import stage_code

    timings: dict[str, str] = {}
    RIE_WORK.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    with (WORK / "go-install.log").open("a") as log:
        stamp = WORK / "bin" / "aws-lambda-rie.version"
        reused = stamp.exists() and RIE_VERSION in stamp.read_text()
        rie = go_install(RIE_MODULE, RIE_VERSION, "aws-lambda-rie", log)
    _timed(timings, "aws-lambda-rie (go install)", t, reused)

    compiler = find_compiler(PYTHON)
    python = subprocess.run([compiler.executable, "-I", "-S", "-c",
                             "import sys; print(sys.executable)"], capture_output=True,
                            text=True, check=True, timeout=60).stdout.strip()

    runtime = RIE_WORK / "runtime"
    wanted = f"{AWSLAMBDARIC} {compiler.version}"
    t, reused = time.monotonic(), _stamp_ok(runtime, wanted)
    if not reused:
        # awslambdaric and its two requirements, pinned by what 4.2.2 resolved to
        _pip_target([AWSLAMBDARIC, "simplejson==4.3.0", "snapshot-restore-py==1.0.0"], runtime,
                    compiler, "/var/runtime")
        (runtime / ".stamp").write_text(wanted)
    _timed(timings, "runtime: awslambdaric (pip --target + compileall)", t, reused)

    report = S3SLICE_LAYER / "layer-size.json"
    before = report.stat().st_mtime if report.exists() else None
    t = time.monotonic()
    proc = subprocess.run([sys.executable, str(REPO / "layers" / "build.py"), "--arch", "x86_64"],
                          cwd=REPO, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        raise SystemExit("layers/build.py --arch x86_64 failed:\n" + proc.stdout + proc.stderr)
    _timed(timings, "s3slice layer (layers/build.py --arch x86_64)", t,
           before is not None and report.stat().st_mtime == before)

    pins = _pins("polars", "polars-runtime-32")
    polars_layer = RIE_WORK / "polars-layer"
    wanted = f"{' '.join(pins)} {compiler.version}"
    t, reused = time.monotonic(), _stamp_ok(polars_layer, wanted)
    if not reused:
        _pip_target(pins, polars_layer / "python", compiler, "/opt/python")
        (polars_layer / ".stamp").write_text(wanted)
    _timed(timings, "polars layer (pip --target + compileall)", t, reused)

    t = time.monotonic()
    s3slice_code = stage_code(REPO / "functions", RIE_WORK / "code-s3slice", PYTHON)
    src = RIE_WORK / "polars-src" / hashlib.sha256(POLARS_HANDLER.encode()).hexdigest()[:12]
    src.mkdir(parents=True, exist_ok=True)
    (src / "polars_fn.py").write_text(POLARS_HANDLER)
    polars_code = stage_code(src, RIE_WORK / "code-polars", PYTHON)
    _timed(timings, "code assets (stage_code)", t, False)
    for staged in (s3slice_code, polars_code):
        if staged.compiler is None:
            raise SystemExit(f"staged without bytecode: {staged.without_bytecode}")
    return Built(rie=rie, runtime=runtime, python=python, timings=timings, functions=(
        Function("s3slice", S3SLICE_LAYER, s3slice_code.path, "s3slice.handler.lambda_handler"),
        Function("polars", polars_layer, polars_code.path, "polars_fn.handler"),
    ))
