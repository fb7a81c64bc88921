"""Lambda-size mode's interpreters: how s3slice's handler runs (the native layer only,
with Lambda's flags, on the function code staged as the CDK stages it) and how the peers
run (the venv), and what importing the handler costs there (``--importtime``, the CPU of
each import). ``PEERS`` and ``SERVICE`` are set by :func:`lambda_size.main` (and
``peer_cpu``); :func:`interpreter_for` reads them at each run."""

from __future__ import annotations

import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import (
    REPO,
    WORK,
    client_env,
)
from .lambda_worker import SERVICE_APPROACH


def _f(v: float | None, nd: int = 2) -> str:
    """A figure in a report's table (one formatter for every report)."""
    return "" if v is None else f"{v:.{nd}f}"


# --------------------------------------------------------------------------- code

#: The native layer (``layers/build.py --native``): s3slice's dependencies as its Lambda
#: layer holds them, built for this interpreter.
NATIVE_LAYER = REPO / "layers" / "build" / "native"
LAYER_SITE = NATIVE_LAYER / "python"
LAYER_REPORT = NATIVE_LAYER / "layer-size.json"
#: The layer's distributions named in the report's header.
LAYER_REPORTED = ("polars", "pyarrow", "sqlglot", "obstore")
#: How Lambda runs the function: no site-packages (``-S``); no bytecode written (``-B``:
#: ``/opt`` and ``/var/task`` are read-only, so only the bytecode the layer and the code
#: asset ship is loaded, and anything else is compiled at every cold start; it also leaves
#: the built layer as it was); nothing implicit before ``PYTHONPATH`` on ``sys.path``
#: (``-P``: no working directory).
LAMBDA_FLAGS = ("-S", "-B", "-P")


@dataclass(frozen=True)
class Interpreter:
    """How a fresh process of this interpreter is started: its flags, and ``PYTHONPATH``
    (nothing: the environment's own; the venv's site-packages follow it unless ``-S``)."""

    flags: tuple[str, ...] = ()
    path: tuple[str, ...] = ()

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, *self.flags, *args]

    def env(self) -> dict[str, str]:
        env = client_env()
        if self.path:
            env["PYTHONPATH"] = os.pathsep.join(self.path)
        return env


#: The peers (and the harness): the venv. ``main`` adds the s3slice snapshot's path, as the
#: peers always had it (they never import s3slice).
PEERS = Interpreter()
#: s3slice's handler, its ``--importtime`` and ``--cpu-profile`` runs: set by ``main``
#: from ``--service-packages`` (the layer only, or the venv like the peers).
SERVICE = Interpreter()


def compile_venv() -> str:
    """Bytecode for the venv's packages, which the peers import: a function deployed with
    a pip-built package has it (pip compiles what it installs), as s3slice's layer does;
    without it every run would compile polars from source. Returns what was done."""
    import sysconfig

    site = sysconfig.get_paths()["purelib"]
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", site], check=True,
                   stdout=subprocess.DEVNULL)
    return (f"the venv's site-packages compiled (`python -m compileall -j 0 {site}`, "
            f"{time.monotonic() - started:.0f} s; nothing to do when up to date)")


def interpreter_for(approach: str) -> Interpreter:
    return SERVICE if approach == SERVICE_APPROACH else PEERS


def stage_service(functions_dir: str) -> tuple[str, str]:
    """s3slice's code as the CDK stages the function's code asset (the same function:
    ``s3slice_cdk.staging.code_asset.stage_code``), for this interpreter's Python, with the
    file names it has where it is staged; the directory and what it holds."""
    cdk_dir = str(Path(__file__).resolve().parents[2] / "cdk")
    if cdk_dir not in sys.path:
        sys.path.append(cdk_dir)  # the construct library's staging (standard library only)
    from s3slice_cdk.staging.code_asset import stage_code

    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    staged = stage_code(Path(functions_dir), WORK / "code-asset", python, loaded_from=None)
    return str(staged.path), staged.describe()


def _layer_report() -> dict[str, Any]:
    try:
        report: dict[str, Any] = json.loads(LAYER_REPORT.read_text())
    except (OSError, ValueError):
        return {}
    return report


def ensure_native_layer() -> Path:
    """``layers/build/native/python``, built by ``layers/build.py --native`` with this
    interpreter when it is missing or was built for another Python (the build downloads
    the pinned wheels unless its wheel cache, ``~/.cache/s3slice-layer``, holds them)."""
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    if LAYER_SITE.is_dir() and _layer_report().get("python") == python:
        return LAYER_SITE
    print(
        f"[layer] building {NATIVE_LAYER.relative_to(REPO)}: layers/build.py --native", flush=True
    )
    proc = subprocess.run(
        [sys.executable, str(REPO / "layers" / "build.py"), "--native"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if proc.returncode != 0 or not LAYER_SITE.is_dir():
        raise SystemExit(
            f"layers/build.py --native failed (exit {proc.returncode}); "
            f"--service-packages venv runs s3slice without the layer:\n"
            + (proc.stdout + proc.stderr)[-3000:]
        )
    return LAYER_SITE


def layer_interpreter(service_dir: str) -> tuple[Interpreter, dict[str, Any]]:
    """s3slice as Lambda runs it: ``-S -B -P``, ``sys.path`` = the function code, the
    layer, then the repository (only for ``tests.benchmark.lambda_worker``, which imports
    nothing but the standard library before the handler), then the standard library. With
    what it describes, for the report."""
    site = ensure_native_layer()
    interp = Interpreter(LAMBDA_FLAGS, (service_dir, str(site), str(REPO)))
    dists = {
        (d.metadata["Name"] or "").lower(): d.version
        for d in importlib.metadata.distributions(path=[str(site)])
    }
    report = _layer_report()
    return interp, {
        "mode": "layer",
        "flags": list(interp.flags),
        "sys_path": list(interp.path),
        "layer": str(NATIVE_LAYER.relative_to(REPO)),
        "layer_python": report.get("python"),
        "layer_fingerprint": report.get("fingerprint"),
        "versions": {name: dists.get(name, "not in the layer") for name in LAYER_REPORTED},
        "numpy_in_layer": "numpy" in dists,
    }


# --------------------------------------------------------------------------- extras


def _python(
    interp: Interpreter, args: list[str], check: bool = True
) -> subprocess.CompletedProcess[str]:
    """A fresh process of ``interp`` on ``args``, as the workers run (output captured; a
    failure raises, unless ``check`` is false)."""
    return subprocess.run(
        interp.argv(*args),
        cwd=REPO,
        env=interp.env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=check,
    )


def interpreters() -> dict[str, Interpreter]:
    """Label -> interpreter, for the import measurements: s3slice's, and the venv's when
    that differs."""
    if SERVICE == PEERS:
        return {"venv": PEERS}
    return {"s3slice's layer only": SERVICE, "venv": PEERS}


def importtime(n: int) -> tuple[str, dict[str, Any]]:
    """``python -X importtime -c 'import s3slice.handler'``, n times, with s3slice's
    packages: top modules by cumulative time (median over the runs), and the total."""
    per: dict[str, list[int]] = {}
    totals: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        proc = _python(SERVICE, ["-X", "importtime", "-c", "import s3slice.handler"])
        totals.append(time.perf_counter() - t0)
        for line in proc.stderr.splitlines():
            if not line.startswith("import time:") or "cumulative" in line:
                continue
            _self_us, cum_us, name = line.split(":", 1)[1].split("|", 2)
            # one space after the bar, then two more per level of nesting
            per.setdefault(name[1:].rstrip(), []).append(int(cum_us))
    labels = interpreters()
    cpu = import_cpu(max(3, n // 2), labels)
    med = {name: statistics.median(v) / 1e6 for name, v in per.items()}
    # Top-level packages (no leading spaces = imported directly by the statement or at
    # depth 0), and the heaviest modules at any depth.
    top = sorted(((k, v) for k, v in med.items() if not k.startswith("  ")), key=lambda kv: -kv[1])[
        :12
    ]
    deep = sorted(((k.strip(), v) for k, v in med.items()), key=lambda kv: -kv[1])[:30]
    service = next(iter(labels))
    command = " ".join(["python", *SERVICE.flags, "-X", "importtime", "-c"])
    lines = [
        f"## Cold start: `{command} 'import s3slice.handler'` ({n} runs)",
        "",
        f"Packages: {service}. Whole command (interpreter start + import + `config()`), "
        f"median wall: {statistics.median(totals):.2f} s "
        f"(runs: {', '.join(f'{t:.2f}' for t in totals)}); "
        "not in a cgroup (the whole machine's CPU). Cumulative import time, median:",
        "",
        "| module (imported at depth 0) | cumulative s |",
        "|---|---:|",
        *[f"| `{k.strip()}` | {v:.3f} |" for k, v in top],
        "",
        "CPU seconds (user + sys) of a fresh interpreter that imports only this, minus one "
        "that imports nothing (median; these overlap: polars is in s3slice.handler too; "
        "empty where it does not import):",
        "",
        "| import | " + " | ".join(f"CPU s, {label}" for label in labels) + " |",
        "|---|" + "---:|" * len(labels),
        *[
            f"| `{k}` | " + " | ".join(_f(v.get(label)) for label in labels) + " |"
            for k, v in cpu.items()
        ],
        "",
        "<details><summary>heaviest modules at any depth</summary>",
        "",
        "| module | cumulative s |",
        "|---|---:|",
        *[f"| `{k}` | {v:.3f} |" for k, v in deep],
        "",
        "</details>",
    ]
    return "\n".join(lines), {"totals_s": totals, "top": top, "deep": deep, "cpu_s": cpu}


IMPORTS = [
    "s3slice.handler",
    "polars",
    "pyarrow.parquet",
    "sqlglot",
    "aws_lambda_powertools.utilities.batch",
    "aws_lambda_powertools",
    "obstore",
    "duckdb",
    "boto3",
]


def import_cpu(n: int, labels: dict[str, Interpreter]) -> dict[str, dict[str, float | None]]:
    """Module -> label -> median CPU s to import it in a fresh process of that interpreter,
    less an empty one's; None where it does not import (duckdb and boto3 are not in
    s3slice's layer: the Lambda runtime brings its own boto3)."""
    code = (
        "import resource{}\nr = resource.getrusage(resource.RUSAGE_SELF)\n"
        "print(r.ru_utime + r.ru_stime)"
    )

    def cpu_of(interp: Interpreter, stmt: str) -> float | None:
        runs = []
        for _ in range(n):
            proc = _python(interp, ["-c", code.format(stmt)], check=False)
            if proc.returncode != 0:
                return None
            runs.append(float(proc.stdout.split()[-1]))
        return statistics.median(runs)

    out: dict[str, dict[str, float | None]] = {m: {} for m in [*IMPORTS, "(empty interpreter)"]}
    for label, interp in labels.items():
        base = cpu_of(interp, "")
        if base is None:
            raise RuntimeError(f"{label}: an empty interpreter failed: {interp.argv()}")
        for m in IMPORTS:
            cpu = cpu_of(interp, f"; import {m}")
            out[m][label] = None if cpu is None else cpu - base
        out["(empty interpreter)"][label] = base
    return out
