"""Lambda-size mode: whole jobs at Lambda memory sizes, cold and warm, in GB-seconds.

    .venv/bin/python -m tests.benchmark.lambda_size
    .venv/bin/python -m tests.benchmark.lambda_size --cases seed-004 --sizes 1024 --repeats 1

Lambda bills memory x duration (init included) and gives a function M / 1769 vCPUs. So
each (approach, size, case, repeat) runs in a fresh worker process
(:mod:`tests.benchmark.lambda_worker`) inside child cgroups of this process's own
(:mod:`tests.benchmark.cgroup`): ``memory.limit_in_bytes`` = M MiB, CPU quota
min(M / 1769, cores), ``AWS_LAMBDA_FUNCTION_MEMORY_SIZE=M``. The worker times its init,
a cold job (read, query, write the result to S3) and a warm job on another object of the
same shape (a copy, under another key) to a new output. Each output is checked (row
count and columns from its Parquet footer) and deleted.

Billed GB-s: cold = M/1024 x (init + job 1), warm = M/1024 x job 2.

s3slice's handler runs with the packages of its Lambda layer only (``python -S -B -P``,
``sys.path`` = the function code, ``layers/build/native/python``, the repository for the
worker module), as Lambda runs it: the venv has numpy, which pyarrow imports whenever it
can (``--service-packages venv`` for the venv). The function code is staged as the CDK
stages the function's code asset (``cdk/s3slice_cdk/staging/code_asset.py``: the sources with
their bytecode, compiled for this interpreter; ``--service-code-asset sources`` for the
sources alone, as the asset was before it shipped bytecode). The peers run from the venv.

Writes results/lambda-size.{md,json,png} (``--out-stem`` to rename), rewritten after
every run. Optional extras: ``--importtime`` (``python -X importtime -c 'import
s3slice.handler'``, parsed) and ``--cpu-profile`` (cProfile of s3slice's warm job).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from . import copy_object, cpu_breakdown, report, selfcheck, substrate
from .cases import Case, cases, data_dir, ensure_data, query_to_json
from .cgroup import LambdaCgroup
from .common import (
    ACCESS_KEY,
    BUCKET,
    REGION,
    REPO,
    RESULTS,
    SECRET_KEY,
    WORK,
    client_env,
    snapshot_service,
)
from .lambda_worker import APPROACHES, SERVICE_APPROACH
from .run import ensure_bucket, slug, upload

DEFAULT_SIZES = [512, 1024, 1769, 3008]
# `full` (every column, every row) is not a headline: for a user it is S3 CopyObject, and
# where it runs it is shown beside one (copy_object.py). drop-cols is the copy path's.
DEFAULT_CASES = ["seed-004", "drop-cols", "csv"]
COPY_PREFIX = "lambda-copy"  # the second object of each case: same bytes, another key
OUT_PREFIX = "lambda-out"
DUCKDB_MEMORY_FRACTION = 0.75


def _terminate(signum: int, frame: FrameType | None) -> None:
    del frame
    raise SystemExit(128 + signum)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tests.benchmark.lambda_size",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="MB, comma-separated")
    p.add_argument("--cases", default=",".join(DEFAULT_CASES))
    p.add_argument("--approaches", default="", help="substrings of approach names (default all)")
    p.add_argument("--profile", default="lambda-s3", choices=sorted(substrate.PROFILES))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--repeats-for", default="", help="per-case repeats, e.g. csv=1,full=2")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per worker")
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--out-stem", default="lambda-size", help="results/<stem>.{md,json,png}")
    p.add_argument("--resume", action="store_true", help="keep the runs already in the JSON")
    p.add_argument(
        "--importtime",
        type=int,
        default=0,
        metavar="N",
        help="also run `python -X importtime -c 'import s3slice.handler'` N times",
    )
    p.add_argument(
        "--cpu-profile",
        action="store_true",
        help="also cProfile s3slice's warm job on the first case at 1769 MB",
    )
    p.add_argument(
        "--service-source",
        choices=["head", "worktree"],
        default="head",
        help="s3slice from the commit at the start (git archive, default) or the working tree",
    )
    p.add_argument(
        "--service-commit",
        default=None,
        help="with --service-source head: s3slice as committed at this revision instead "
        "(a before/after comparison in one command line each)",
    )
    p.add_argument(
        "--service-code-asset",
        choices=["staged", "sources"],
        default="staged",
        help="s3slice's code staged as the CDK stages the function's code asset, with its "
        "bytecode (default), or its sources alone (the asset before it shipped bytecode: "
        "every cold start compiles them)",
    )
    p.add_argument(
        "--service-packages",
        choices=["layer", "venv"],
        default="layer",
        help="s3slice's handler with its Lambda layer only, as in Lambda (python -S; "
        "layers/build/native/python, built when missing; default), or with the venv's "
        "site-packages like the peers (where pyarrow imports numpy)",
    )
    p.add_argument("--render", action="store_true", help="only rewrite the .md/.png from the .json")
    p.add_argument("--minio-data", type=Path, default=substrate.default_data_dir())
    return p.parse_args(argv)


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


# --------------------------------------------------------------------------- objects


def second_copy(sub: substrate.Substrate, key: str, n: int = 1) -> str:
    """A server-side copy of key under COPY_PREFIX (skipped when already there)."""
    s3 = selfcheck.s3_client(sub.direct_endpoint)
    dest = f"{COPY_PREFIX}/{key}" if n == 1 else f"{COPY_PREFIX}-{n}/{key}"
    size = s3.head_object(Bucket=BUCKET, Key=key)["ContentLength"]
    with contextlib.suppress(Exception):
        if s3.head_object(Bucket=BUCKET, Key=dest)["ContentLength"] == size:
            return dest
    s3.copy_object(Bucket=BUCKET, Key=dest, CopySource={"Bucket": BUCKET, "Key": key})
    return dest


def check_and_delete_outputs(
    sub: substrate.Substrate, prefix: str, want_rows: int, want_cols: list[str]
) -> tuple[str | None, int]:
    """Every Parquet object under prefix: total rows and columns vs the oracle; then gone."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    s3 = selfcheck.s3_client(sub.direct_endpoint)
    keys: list[tuple[str, int]] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        keys += [(o["Key"], o["Size"]) for o in page.get("Contents", [])]
    fs = pafs.S3FileSystem(
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        region=REGION,
        endpoint_override=sub.direct_endpoint.removeprefix("http://"),
        scheme="http",
    )
    rows = 0
    problem = None
    try:
        if not keys:
            return f"no output under {prefix}", 0
        for key, _ in keys:
            md = pq.read_metadata(f"{BUCKET}/{key}", filesystem=fs)
            rows += md.num_rows
            cols = sorted(md.schema.to_arrow_schema().names)
            if cols != sorted(want_cols):
                problem = f"{key}: columns {cols}, expected {sorted(want_cols)}"
        if problem is None and rows != want_rows:
            problem = f"{rows} rows written, oracle has {want_rows}"
        return problem, sum(s for _, s in keys)
    finally:
        for key, _ in keys:
            s3.delete_object(Bucket=BUCKET, Key=key)


def expected_rows(case: Case, path: Path) -> int:
    import polars as pl

    from .approaches import polars_query

    lf = pl.scan_csv(path) if case.format == "csv" else pl.scan_parquet(path)
    return int(polars_query(lf, case.query).select(pl.len()).collect().item())


# --------------------------------------------------------------------------- one run


def run_one(
    sub: substrate.Substrate,
    approach: str,
    case: Case,
    size: int,
    keys: list[str],
    run_id: str,
    timeout: float,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    stem = WORK / "lambda-runs" / run_id
    stem.parent.mkdir(parents=True, exist_ok=True)
    spec_path, out_path, log_path = (
        stem.with_suffix(s) for s in (".spec.json", ".out.json", ".log")
    )
    out_path.unlink(missing_ok=True)
    spec = {
        "approach": approach,
        "endpoint": sub.endpoint,
        "bucket": BUCKET,
        "access_key": ACCESS_KEY,
        "secret_key": SECRET_KEY,
        "region": REGION,
        "keys": keys,
        "outputs": [f"{OUT_PREFIX}/{run_id}/job{n}/" for n in (1, 2)],
        "format": case.format,
        "query": query_to_json(case.query),
        "service_query": case.service_query,
        "duckdb_memory_fraction": DUCKDB_MEMORY_FRACTION,
        **(extra or {}),
    }
    spec_path.write_text(json.dumps(spec, indent=1))
    interp = interpreter_for(approach)
    env = interp.env()
    env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] = str(size)
    env["AWS_ENDPOINT_URL_S3"] = sub.endpoint
    timed_out = False
    with LambdaCgroup(size) as cg, log_path.open("w") as log:
        env["S3SLICE_BENCH_T0"] = repr(time.time())
        proc = subprocess.Popen(
            interp.argv("-m", "tests.benchmark.lambda_worker", str(spec_path), str(out_path)),
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=cg.enter,  # the harness has no threads at this point
        )
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        cgs = cg.stats()
    rec: dict[str, Any] = {}
    if out_path.exists():
        rec = json.loads(out_path.read_text())
    row: dict[str, Any] = {
        "approach": approach,
        "case": case.name,
        "size_mb": size,
        "run_id": run_id,
        "returncode": proc.returncode,
        "timed_out": timed_out,
        **{
            k: rec.get(k)
            for k in (
                "init_s",
                "init_cpu_s",
                "job1_s",
                "job1_cpu_s",
                "job2_s",
                "job2_cpu_s",
                "job1_info",
                "job2_info",
                "job1_usage",
                "job2_usage",
                "phase",
                "error",
                "numpy_imported",
                "interpreter",
            )
        },
        "peak_rss_mb": (rec.get("peak_rss_kib") or 0) / 1024 or None,
        "rss_after_init_mb": (rec.get("rss_after_init_kib") or 0) / 1024 or None,
        **cgs,
    }
    ok = bool(rec.get("ok")) and proc.returncode == 0 and not timed_out
    if cgs.get("oom_kill"):
        row["status"] = "oom"
        ok = False
    elif timed_out:
        row["status"] = "timeout"
    elif not ok:
        row["status"] = "failed"
        if not row.get("error"):
            row["error"] = f"exit {proc.returncode}: " + log_path.read_text()[-300:]
    else:
        row["status"] = "ok"
    if ok:
        cpu = [row["init_cpu_s"], row["job1_cpu_s"], row["job2_cpu_s"]]
        row["cpu_s"] = sum(cpu)
        row["gbs_cold"] = size / 1024 * (row["init_s"] + row["job1_s"])
        row["gbs_warm"] = size / 1024 * row["job2_s"]
        # What the same CPU would bill if the job only ever waited for its CPU share (no
        # network waits, no other work on the machine): a floor that machine noise cannot
        # inflate. Below 1769 MB it does not depend on M.
        row["gbs_cold_cpu_floor"] = size / 1024 * (cpu[0] + cpu[1]) / row["cpus"]
        row["gbs_warm_cpu_floor"] = size / 1024 * cpu[2] / row["cpus"]
    return row


# --------------------------------------------------------------------------- report


def _med(rows: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def aggregate(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (case, size, approach): medians over the completed runs, failures counted."""
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in runs:
        if r["status"] == "ok" and "gbs_cold_cpu_floor" not in r:
            m = r["size_mb"] / 1024 / r["cpus"]
            r["gbs_cold_cpu_floor"] = m * (r["init_cpu_s"] + r["job1_cpu_s"])
            r["gbs_warm_cpu_floor"] = m * r["job2_cpu_s"]
        groups.setdefault((r["case"], r["size_mb"], r["approach"]), []).append(r)
    out = []
    for (case, size, approach), rs in groups.items():
        done = [r for r in rs if r["status"] == "ok"]
        agg: dict[str, Any] = {
            "case": case,
            "size_mb": size,
            "approach": approach,
            "runs": len(rs),
            "ok": len(done),
            "oom": sum(r["status"] == "oom" for r in rs),
            "failed": sum(r["status"] in ("failed", "timeout") for r in rs),
            "errors": sorted(
                {(r.get("error") or r["status"])[:160] for r in rs if r["status"] != "ok"}
            ),
        }
        for key in (
            "init_s",
            "job1_s",
            "job2_s",
            "cpu_s",
            "init_cpu_s",
            "job1_cpu_s",
            "job2_cpu_s",
            "peak_rss_mb",
            "cgroup_peak_mb",
            "gbs_cold",
            "gbs_warm",
            "throttled_s",
            "gbs_cold_cpu_floor",
            "gbs_warm_cpu_floor",
        ):
            agg[key] = _med(done, key)
        if not done:  # how far the failed ones got, for the table
            agg["cgroup_peak_mb"] = _med(rs, "cgroup_peak_mb")
        out.append(agg)
    return out


def smallest(aggs: list[dict[str, Any]]) -> dict[str, dict[str, int | None]]:
    """case -> approach -> the smallest size at which every run completed."""
    out: dict[str, dict[str, int | None]] = {}
    for a in aggs:
        per = out.setdefault(a["case"], {})
        per.setdefault(a["approach"], None)
        if a["ok"] == a["runs"] and a["ok"] > 0:
            cur = per[a["approach"]]
            per[a["approach"]] = a["size_mb"] if cur is None else min(cur, a["size_mb"])
    return out


def _f(v: float | None, nd: int = 2) -> str:
    return "" if v is None else f"{v:.{nd}f}"


def service_packages_line(sp: dict[str, Any] | None) -> str:
    """The header line that says which packages s3slice's handler ran with."""
    if not sp:
        return "- s3slice's packages: the venv's, as the peers' (before `--service-packages`)"
    if sp["mode"] == "venv":
        return (
            "- s3slice's packages: the venv's site-packages, as the peers' "
            "(`--service-packages venv`; pyarrow imports the venv's numpy)"
        )
    code, site, *rest = sp["sys_path"]
    versions = ", ".join(f"{k} {v}" for k, v in sp["versions"].items())
    return (
        f"- s3slice's packages: its layer only, as in Lambda: `python {' '.join(sp['flags'])}` "
        f"(no site-packages; no bytecode written, so every cold start compiles the layer and "
        f"the function code, as in Lambda), `sys.path` = `{code}` (the function code), "
        f"`{site}` (the layer, `{sp['layer']}`: {versions}; "
        f"fingerprint `{(sp.get('layer_fingerprint') or '')[:12]}`; "
        f"{'numpy in it' if sp.get('numpy_in_layer') else 'no numpy'}), "
        + "".join(f"`{p}` (for the worker module), " for p in rest)
        + "then the standard library"
    )


def numpy_lines(runs: list[dict[str, Any]]) -> list[str]:
    """How many runs of each approach had numpy in ``sys.modules`` at their end."""
    per: dict[str, list[bool]] = {}
    for r in runs:
        if r.get("numpy_imported") is not None:
            per.setdefault(r["approach"], []).append(bool(r["numpy_imported"]))
    if not per:
        return []
    return [
        "- numpy imported (in the worker's `sys.modules` at its end), runs: "
        + ", ".join(f"{a} {sum(v)}/{len(v)}" for a, v in per.items())
    ]


def markdown(doc: dict[str, Any]) -> str:
    meta = doc["meta"]
    aggs = doc["aggregates"]
    small = smallest(aggs)
    lines = [
        "# Lambda-size mode: GB-seconds per whole job, cold and warm",
        "",
        "Written by `python -m tests.benchmark.lambda_size` (see tests/benchmark/README.md). "
        "Each run is a fresh process in child cgroups (v1) of the harness's own: "
        "`memory.limit_in_bytes` = M MiB, CPU quota min(M / 1769, cores) of a core, "
        "`AWS_LAMBDA_FUNCTION_MEMORY_SIZE=M`. **init** = process spawn until the approach's "
        "module is imported and configured; **job 1** (cold) and **job 2** (warm, another "
        "object of the same shape, new output) each read, query and **write the result to "
        "S3** (checked: row count and columns of the written Parquet; then deleted). "
        "**CPU** = user + sys of the worker, init + both jobs. **peak RSS** = the worker's "
        "`VmHWM`; **cg peak** = the cgroup's `memory.max_usage_in_bytes` (page cache "
        "included). **GB-s cold** = M/1024 x (init + job 1); **GB-s warm** = M/1024 x job 2 "
        "(Lambda's billing, without its 1 ms rounding). **CPU-floor GB-s** = M/1024 x CPU s / "
        "vCPUs (vCPUs = min(M/1769, cores)): what the same CPU would bill with no waits and no "
        "other work on the machine, so machine noise cannot inflate it; below 1769 MB it does "
        "not depend on M. Medians over the completed runs; "
        "`ok/runs` counts them; OOM = killed by the cgroup's OOM killer.",
        "",
        f"- date: {meta['date']}"
        + ("" if meta.get("complete") else " (**incomplete**: the run stopped or is running)"),
        f"- commit: `{meta['commit']}`",
        f"- command: `{meta['command']}`",
        *[f"- resumed from: `{c}`" for c in meta.get("earlier", [])],
        f"- {meta.get('service_code', '')}",
        "- s3slice's settings from the environment: "
        + (", ".join(f"`{k}={v}`" for k, v in meta["service_env"].items())
           if meta.get("service_env") else "none (its defaults)"),
        service_packages_line(meta.get("service_packages")),
        f"- peers' bytecode: {meta.get('peer_bytecode', 'none (the venv as installed)')}",
        *numpy_lines(doc["runs"]),
        f"- profile: `{meta['profile']}` ({meta.get('profile_check')}); scale {meta['scale']:g}",
        f"- machine: {meta['machine']['cpu']}, {meta['machine']['cores']} cores shared with "
        f"other work, {meta['machine']['memory_gib']} GiB; load average at the end "
        f"{', '.join(f'{x:.1f}' for x in meta['machine']['load_average_at_end'])}",
        "- packages (the harness and the peers: the venv): "
        + ", ".join(f"{k} {v}" for k, v in meta["packages"].items()),
        f"- DuckDB: `memory_limit` = {DUCKDB_MEMORY_FRACTION:.0%} of M, `temp_directory` in a "
        "temp dir; polars and the others size themselves",
        "",
        "## Smallest size at which every run completed",
        "",
    ]
    approaches = list(dict.fromkeys(a["approach"] for a in aggs))
    case_names = list(dict.fromkeys(a["case"] for a in aggs))
    lines += ["| case | " + " | ".join(approaches) + " |", "|---|" + "---:|" * len(approaches)]
    for c in case_names:
        cells = []
        for ap in approaches:
            s = small.get(c, {}).get(ap)
            cells.append("none" if s is None else f"{s} MB")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    lines.append("")
    for c in case_names:
        titles = {x.name: x.title for x in cases(meta["scale"])} | {
            x["name"]: x["title"] for x in doc["cases"]
        }
        title = titles.get(c, "")
        lines += [
            f"## {c}: {title}",
            "",
            "| size | approach | ok/runs | init s | job 1 s | job 2 (warm) s | CPU s "
            "(init+j1+j2) | peak RSS MB | cg peak MB | OOM | GB-s cold | GB-s warm | "
            "CPU-floor GB-s cold / warm |",
            "|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|",
        ]
        for a in sorted(
            (a for a in aggs if a["case"] == c),
            key=lambda a: (a["size_mb"], approaches.index(a["approach"])),
        ):
            cpu = (
                f"{_f(a['cpu_s'])} ({_f(a['init_cpu_s'])}+{_f(a['job1_cpu_s'])}+"
                f"{_f(a['job2_cpu_s'])})"
                if a["ok"]
                else ""
            )
            note = (
                ""
                if a["ok"] == a["runs"]
                else " — " + "; ".join(a["errors"])[:200].replace("|", "\\|").replace("\n", " ")
            )
            lines.append(
                f"| {a['size_mb']} | {a['approach']}{note} | {a['ok']}/{a['runs']} | "
                f"{_f(a['init_s'])} | {_f(a['job1_s'])} | {_f(a['job2_s'])} | {cpu} | "
                f"{_f(a['peak_rss_mb'], 0)} | {_f(a['cgroup_peak_mb'], 0)} | {a['oom'] or ''} | "
                f"{_f(a['gbs_cold'])} | {_f(a['gbs_warm'])} | "
                f"{_f(a['gbs_cold_cpu_floor'])} / {_f(a['gbs_warm_cpu_floor'])} |"
            )
        lines.append("")
    for c in case_names:
        if c in copy_object.CASES:
            copies = [r for r in doc.get("copy_runs", []) if r.get("case") == c]
            md = copy_object.markdown(c, copies, aggs)
            if md:
                lines += [md, ""]
    for extra in ("importtime_md", "cpu_profile_md"):
        if doc.get(extra):
            lines += [doc[extra], ""]
    return "\n".join(lines)


def chart(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    aggs = doc["aggregates"]
    case_names = list(dict.fromkeys(a["case"] for a in aggs))
    approaches = list(dict.fromkeys(a["approach"] for a in aggs))
    sizes = sorted({a["size_mb"] for a in aggs})
    fig, axes = plt.subplots(3, len(case_names), figsize=(5.2 * len(case_names), 12), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ci, c in enumerate(case_names):
        for ri, key in enumerate(("gbs_cold", "gbs_warm", "gbs_cold_cpu_floor")):
            ax = axes[ri][ci]
            top = 0.0
            for ai, ap in enumerate(approaches):
                pts = {a["size_mb"]: a for a in aggs if a["case"] == c and a["approach"] == ap}
                xs = [s for s in sizes if s in pts and pts[s][key] is not None]
                ys = [pts[s][key] for s in xs]
                top = max([top, *ys])
                style = "-" if ap.startswith("s3slice") else "--"
                ax.plot(
                    xs,
                    ys,
                    style,
                    marker="o",
                    color=colors[ai % len(colors)],
                    label=ap,
                    linewidth=2.2 if ap.startswith("s3slice") else 1.2,
                )
                fails = [s for s in sizes if s in pts and pts[s]["ok"] < pts[s]["runs"]]
                for s in fails:
                    ax.plot(
                        [s],
                        [0],
                        marker="x",
                        color=colors[ai % len(colors)],
                        markersize=9,
                        linestyle="none",
                    )
            ax.set_xticks(sizes, labels=[str(s) for s in sizes], fontsize=7)
            ax.set_ylim(bottom=0, top=(top or 1) * 1.12)
            title = ("cold (init + job 1)", "warm (job 2)", "cold, CPU floor (M/1024 x CPU/vCPUs)")
            ax.set_title(f"{c}: {title[ri]}", fontsize=9)
            ax.set_ylabel("GB-s billed (median)" if ri < 2 else "GB-s of CPU (median)", fontsize=8)
            ax.set_xlabel("Lambda memory (MB)", fontsize=8)
            ax.tick_params(axis="y", labelsize=7)
            ax.grid(alpha=0.3)
            if ri == 0 and ci == 0:
                ax.legend(fontsize=7)
    meta = doc["meta"]
    fig.suptitle(
        f"GB-s per whole job by Lambda size ({meta['profile']}, {meta['date']}, "
        f"{meta['commit'][:12]}); x on the axis: a run at that size did not complete",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(doc: dict[str, Any], stem: Path) -> None:
    doc["aggregates"] = aggregate(doc["runs"])
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    stem.with_suffix(".md").write_text(markdown(doc) + "\n")
    if doc["aggregates"]:
        chart(doc, stem.with_suffix(".png"))


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


PROFILED_WARM_JOBS = 5
PROFILE_SIZE_MB = 3008


def cpu_profiles(
    sub: substrate.Substrate,
    case: Case,
    pair: dict[str, list[str]],
    want: dict[str, tuple[int, list[str]]],
    args: argparse.Namespace,
) -> list[dict[str, Any]]:
    """s3slice's handler: a cold job, then PROFILED_WARM_JOBS warm jobs on distinct copies
    of the object (no footer cache hit), profiled: once with cProfile on a CPU clock, once
    with py-spy (native frames). At PROFILE_SIZE_MB, so the profiler has CPU to spare."""
    first = pair[case.data_key][0]
    keys = [first] + [second_copy(sub, first, n) for n in range(1, PROFILED_WARM_JOBS + 1)]
    rows = []
    for profiler, suffix in (("cprofile", "pstats"), ("py-spy", "py-spy.txt")):
        path = WORK / "lambda-runs" / f"cpu-profile-{case.name}.{suffix}"
        path.unlink(missing_ok=True)
        run_id = f"cpu-profile-{profiler}-{case.name}-{time.time_ns()}"
        extra = {
            "keys": keys,
            "outputs": [f"{OUT_PREFIX}/{run_id}/job{n}/" for n in range(1, len(keys) + 1)],
            "profiler": profiler,
            "profile_jobs": list(range(2, len(keys) + 1)),
            "profile_path": str(path),
        }
        row = run_one(
            sub, SERVICE_APPROACH, case, PROFILE_SIZE_MB, keys, run_id, args.timeout, extra
        )
        row["profiler"], row["profile_path"] = profiler, str(path)
        out = WORK / "lambda-runs" / f"{run_id}.out.json"
        rec = json.loads(out.read_text()) if out.exists() else {}
        row["warm_jobs"] = [
            {
                "s": rec.get(f"job{n}_s"),
                "cpu_s": rec.get(f"job{n}_cpu_s"),
                "stats": (rec.get(f"job{n}_info") or {}).get("stats"),
            }
            for n in range(2, len(keys) + 1)
        ]
        row["py_spy_output"] = rec.get("py_spy")
        check_and_delete_outputs(sub, f"{OUT_PREFIX}/{run_id}/", *want[case.name])
        done = [j for j in row["warm_jobs"] if j["s"] is not None]
        print(
            f"[cpu-profile] {profiler}: {row['status']} -> {path}; warm jobs "
            + ", ".join(f"{j['s']:.2f} s/{j['cpu_s']:.2f} cpu" for j in done),
            flush=True,
        )
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    chosen = cases(args.scale, [c for c in args.cases.split(",") if c])
    wanted = [a for a in args.approaches.split(",") if a]
    approaches = [n for n in APPROACHES if not wanted or any(w in n for w in wanted)]
    per_case_repeats = {
        k: int(v) for k, v in (x.split("=") for x in args.repeats_for.split(",") if x)
    }
    stem = RESULTS / args.out_stem
    doc: dict[str, Any]
    if args.render:
        doc = json.loads(stem.with_suffix(".json").read_text())
        runs = doc.get("cpu_profile_runs") or []
        if len(runs) == 2 and Path(runs[0]["profile_path"]).exists() and doc.get("cpu_profile_md"):
            # The profiles are still in .work: the breakdown is recomputed with this code.
            intro = doc["cpu_profile_md"].split("\n")[2]
            doc["cpu_profile_md"] = cpu_breakdown.markdown(
                Path(runs[0]["profile_path"]),
                Path(runs[1]["profile_path"]),
                PROFILED_WARM_JOBS,
                meta=intro,
            )
        write(doc, stem)
        return 0
    WORK.mkdir(parents=True, exist_ok=True)
    doc = {"runs": []}
    earlier: list[str] = []
    if args.resume and stem.with_suffix(".json").exists():
        doc = json.loads(stem.with_suffix(".json").read_text())
        old = doc.get("meta", {})
        earlier = [*old.get("earlier", []), f"{old.get('command')} (commit {old.get('commit')})"]
    meta: dict[str, Any] = {
        "commit": report.git_commit(),
        "command": " ".join([".venv/bin/python -m tests.benchmark.lambda_size", *sys.argv[1:]]),
        "scale": args.scale,
        "profile": args.profile,
        "sizes": sizes,
        "packages": report.package_versions(),
        "duckdb_memory_fraction": DUCKDB_MEMORY_FRACTION,
        "earlier": earlier,
        # The workers inherit the environment: s3slice's settings given there change what
        # is measured, so the report names them.
        "service_env": {k: v for k, v in sorted(os.environ.items())
                        if k.startswith("S3SLICE_")},
    }
    global PEERS, SERVICE
    service_dir: str | None = None  # None: the working tree, through the editable install
    if args.service_source == "head":
        # A resumed run measures the same s3slice as the runs it adds to.
        head = meta["commit"].split()[0]
        if args.service_commit:
            head = subprocess.run(["git", "rev-parse", args.service_commit], cwd=REPO,
                                  check=True, capture_output=True, text=True).stdout.strip()
        if args.resume and doc.get("meta", {}).get("commit"):
            head = doc["meta"].get("service_commit") or doc["meta"]["commit"].split()[0]
        meta["service_commit"] = head
        service_dir = snapshot_service(head)
        meta["service_code"] = f"s3slice as committed at {head} (git archive; {service_dir})"
    else:
        meta["service_code"] = "s3slice from the working tree (functions/)"
    service_run_dir = service_dir or str(REPO / "functions")
    if args.service_code_asset == "staged":
        service_run_dir, held = stage_service(service_run_dir)
        meta["service_code"] += (
            f", staged as the CDK stages the function's code asset "
            f"(cdk/s3slice_cdk/staging/code_asset.py; {held}) in {service_run_dir}"
        )
    else:
        meta["service_code"] += (
            ", its sources alone (--service-code-asset sources: the code asset before it "
            "shipped bytecode, so every cold start compiles them)"
        )
    earlier_packages = doc.get("meta", {}).get("service_packages", {}).get("mode", "venv")
    if doc["runs"] and earlier_packages != args.service_packages:
        raise SystemExit(
            f"--resume: the runs in {stem.with_suffix('.json')} ran s3slice with "
            f"--service-packages {earlier_packages}"
        )
    PEERS = Interpreter(path=(service_dir,) if service_dir else ())
    meta["peer_bytecode"] = compile_venv()
    if args.service_packages == "layer":
        SERVICE, meta["service_packages"] = layer_interpreter(service_run_dir)
    else:
        SERVICE = PEERS
        meta["service_packages"] = {"mode": "venv", "sys_path": list(PEERS.path)}
    doc["meta"] = meta
    known = {x["name"]: x for x in doc.get("cases", [])}  # a resumed run keeps earlier cases
    doc["cases"] = list(
        (known | {c.name: {"name": c.name, "title": c.title} for c in chosen}).values()
    )

    def save(complete: bool) -> None:
        meta.update(date=report.now_iso(), complete=complete, machine=report.machine())
        write(doc, stem)

    if args.importtime:
        md, data = importtime(args.importtime)
        doc["importtime_md"], doc["importtime"] = md, data
        print(md, flush=True)
        save(False)

    local: dict[str, list[str]] = {}
    want: dict[str, tuple[int, list[str]]] = {}
    for case in chosen:
        keys = local.setdefault(case.data_key, ensure_data(case.data_key, args.scale))
        if len(keys) != 1:
            raise SystemExit(f"{case.name}: the Lambda-size mode runs single-object cases")
        want[case.name] = (expected_rows(case, data_dir(args.scale) / keys[0]), list(case.schema))
        print(f"[oracle] {case.name}: {want[case.name][0]:,} rows", flush=True)

    with substrate.running(args.minio_data) as sub:
        ensure_bucket(sub)
        pair: dict[str, list[str]] = {}
        for dk, keys in local.items():
            [first] = upload(sub, args.scale, dk, keys)
            pair[dk] = [first, second_copy(sub, first)]
        sub.set_profile(args.profile)
        meta["profile_check"] = selfcheck.profile(sub)
        print(f"[profile] {args.profile}: {meta['profile_check']}", flush=True)

        if args.cpu_profile:
            prof_runs = cpu_profiles(sub, chosen[0], pair, want, args)
            doc["cpu_profile_runs"] = prof_runs
            jobs = [j for r in prof_runs for j in r["warm_jobs"] if j["s"] is not None]
            doc["cpu_profile_md"] = cpu_breakdown.markdown(
                Path(prof_runs[0]["profile_path"]),
                Path(prof_runs[1]["profile_path"]),
                PROFILED_WARM_JOBS,
                meta=(
                    f"s3slice's handler at {PROFILE_SIZE_MB} MB, `{args.profile}`: one cold job, "
                    f"then {PROFILED_WARM_JOBS} warm jobs, each on a new copy of the "
                    f"{chosen[0].name} object; warm jobs (both profiled runs): "
                    + ", ".join(f"{j['s']:.2f} s / {j['cpu_s']:.2f} CPU s" for j in jobs)
                    + ". Profilers add their own cost; the shares are what to read."
                ),
            )
            save(False)

        done = {(r["case"], r["size_mb"], r["approach"], r.get("repeat")) for r in doc["runs"]}
        max_rep = max([args.repeats, *per_case_repeats.values()])
        for rep in range(max_rep):
            for case in chosen:
                if rep >= per_case_repeats.get(case.name, args.repeats):
                    continue
                copied = {(r["case"], r.get("repeat")) for r in doc.get("copy_runs", [])}
                if case.name in copy_object.CASES and (case.name, rep) not in copied:
                    run_id = slug(f"{case.name}-copy-r{rep}-{time.time_ns()}")
                    row = copy_object.run(
                        sub.endpoint,
                        sub.minio_metrics_url,
                        pair[case.data_key],
                        f"{OUT_PREFIX}/{run_id}/",
                        lambda prefix, c=case: check_and_delete_outputs(sub, prefix, *want[c.name]),
                    )
                    row.update(case=case.name, repeat=rep, run_id=run_id)
                    doc.setdefault("copy_runs", []).append(row)
                    print(
                        f"  r{rep} {case.name:9} {copy_object.APPROACH} {row['status']} "
                        f"j1 {_f(row.get('job1_s'))} j2 {_f(row.get('job2_s'))} "
                        f"{row.get('job2_requests')} {row.get('error') or ''}",
                        flush=True,
                    )
                    save(False)
                for size in sizes:
                    for approach in approaches:
                        if (case.name, size, approach, rep) in done:
                            continue
                        run_id = slug(f"{case.name}-{size}-{approach}-r{rep}-{time.time_ns()}")
                        row = run_one(
                            sub, approach, case, size, pair[case.data_key], run_id, args.timeout
                        )
                        row["repeat"] = rep
                        for n in (1, 2):
                            prefix = f"{OUT_PREFIX}/{run_id}/job{n}/"
                            problem, nbytes = check_and_delete_outputs(
                                sub, prefix, *want[case.name]
                            )
                            row[f"job{n}_output_bytes"] = nbytes
                            if row["status"] == "ok" and problem:
                                row["status"], row["error"] = "wrong", f"job {n}: {problem}"
                        if row["status"] != "ok":
                            for k in ("cpu_s", "gbs_cold", "gbs_warm"):
                                row.pop(k, None)
                        doc["runs"].append(row)
                        print(
                            f"  r{rep} {case.name:9} {size:5} {approach:29} {row['status']:7} "
                            f"init {_f(row.get('init_s'))} j1 {_f(row.get('job1_s'))} "
                            f"j2 {_f(row.get('job2_s'))} cpu {_f(row.get('cpu_s'))} "
                            f"rss {_f(row.get('peak_rss_mb'), 0)} "
                            f"cg {_f(row.get('cgroup_peak_mb'), 0)} "
                            f"GB-s {_f(row.get('gbs_cold'))}/{_f(row.get('gbs_warm'))} "
                            f"{(row.get('error') or '')[:120]}",
                            flush=True,
                        )
                        save(False)
    save(True)
    print(f"[report] {stem.with_suffix('.md')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
