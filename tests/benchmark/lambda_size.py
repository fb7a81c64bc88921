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
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from . import copy_object, cpu_breakdown, lambda_python, report, selfcheck, substrate
from .case_run import slug
from .cases import cases
from .common import (
    REPO,
    RESULTS,
    WORK,
    snapshot_service,
)
from .datasets import data_dir, ensure_data
from .lambda_jobs import (
    DUCKDB_MEMORY_FRACTION,
    OUT_PREFIX,
    PROFILE_SIZE_MB,
    PROFILED_WARM_JOBS,
    check_and_delete_outputs,
    cpu_profiles,
    expected_rows,
    run_one,
    second_copy,
)
from .lambda_python import (
    Interpreter,
    _f,
    compile_venv,
    importtime,
    layer_interpreter,
    stage_service,
)
from .lambda_report import write
from .lambda_worker import APPROACHES
from .run import ensure_bucket, upload

DEFAULT_SIZES = [512, 1024, 1769, 3008]
# `full` (every column, every row) is not a headline: for a user it is S3 CopyObject, and
# where it runs it is shown beside one (copy_object.py). drop-cols is the copy path's.
DEFAULT_CASES = ["seed-004", "drop-cols", "csv"]


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
    # Read by interpreter_for at each run (and set by peer_cpu too).
    lambda_python.PEERS = peers = Interpreter(path=(service_dir,) if service_dir else ())
    meta["peer_bytecode"] = compile_venv()
    if args.service_packages == "layer":
        lambda_python.SERVICE, meta["service_packages"] = layer_interpreter(service_run_dir)
    else:
        lambda_python.SERVICE = peers
        meta["service_packages"] = {"mode": "venv", "sys_path": list(peers.path)}
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
