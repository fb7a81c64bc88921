"""The benchmark, in one command.

    .venv/bin/python -m tests.benchmark.run --scale 0.1
    .venv/bin/python -m tests.benchmark.run --cases seed-004,csv --profiles lambda-s3

Generates (once, cached in .work/data) the cases' data, builds MinIO and toxiproxy (once,
into .work/bin), starts them on 127.0.0.1, uploads the data, proves its counters exact,
then runs every approach on every case under each profile, each approach in its own
process, checks each answer against the oracle, and writes results/latest.{md,json,png}.
Everything it started is stopped on the way out, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from . import report, selfcheck, substrate
from .approaches import APPROACHES, SERVICE
from .case_run import run_case
from .cases import CASE_NAMES, cases, query_to_json
from .common import BUCKET, REPO, RESULTS, WORK, client_env
from .datasets import data_dir, ensure_data
from .verify import Summary, oracle


def _terminate(signum: int, frame: FrameType | None) -> None:
    del frame
    raise SystemExit(128 + signum)  # unwinds through every `finally`, which stops servers


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tests.benchmark.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--scale", type=float, default=1.0, help="data size factor (1 = reference)")
    p.add_argument(
        "--cases",
        # `full` (every column, every row) only when named: for a user it is S3 CopyObject
        # (the Lambda-size mode shows it beside one)
        default=",".join(c for c in CASE_NAMES if c != "full"),
        help="comma-separated case names",
    )
    p.add_argument(
        "--approaches",
        default="",
        help="comma-separated substrings of approach names (default: all)",
    )
    p.add_argument("--profiles", default="lambda-s3,unshaped")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per approach")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs before them")
    p.add_argument(
        "--timeout",
        type=float,
        default=1800.0,
        help="seconds one approach may take for all its runs before it is killed",
    )
    p.add_argument("--out", type=Path, default=RESULTS, help="where latest.* are written")
    p.add_argument(
        "--minio-data",
        type=Path,
        default=substrate.default_data_dir(),
        help="MinIO's bucket directory (default: on /dev/shm when there is one)",
    )
    return p.parse_args(argv)


def service_importable() -> str | None:
    """None when `import s3slice; s3slice.read` works in a worker's interpreter."""
    proc = subprocess.run(
        [sys.executable, "-c", "import s3slice; s3slice.read; s3slice.Settings.from_env"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=client_env(),
    )
    if proc.returncode == 0:
        return None
    return (proc.stderr.strip().splitlines() or ["import failed"])[-1]


def upload(sub: substrate.Substrate, scale: float, data_key: str, keys: list[str]) -> list[str]:
    """Put the generated files in the bucket (skipping those already there, same size)."""
    from boto3.s3.transfer import TransferConfig

    s3 = selfcheck.s3_client(sub.direct_endpoint)
    prefix = f"s{scale:g}/"
    existing: dict[str, int] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=BUCKET, Prefix=f"{prefix}{data_key}/"
    ):
        existing.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
    config = TransferConfig(multipart_threshold=64 << 20, multipart_chunksize=64 << 20)
    todo = [k for k in keys if existing.get(prefix + k) != (data_dir(scale) / k).stat().st_size]
    if todo:
        print(f"[upload] {data_key}: {len(todo)} object(s)", flush=True)
    for k in todo:
        s3.upload_file(str(data_dir(scale) / k), BUCKET, prefix + k, Config=config)
    return [prefix + k for k in keys]


def ensure_bucket(sub: substrate.Substrate) -> None:
    s3 = selfcheck.s3_client(sub.direct_endpoint)
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
        s3.create_bucket(Bucket=BUCKET)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    chosen = cases(args.scale, [c for c in args.cases.split(",") if c])
    wanted = [a for a in args.approaches.split(",") if a]
    approach_names = [n for n in APPROACHES if not wanted or any(w in n for w in wanted)]
    profiles = [p for p in args.profiles.split(",") if p]
    for p in profiles:
        if p not in substrate.PROFILES:
            raise SystemExit(f"unknown profile {p!r}; known: {sorted(substrate.PROFILES)}")
    WORK.mkdir(parents=True, exist_ok=True)
    commit = report.git_commit()  # the code that runs, whatever is committed meanwhile

    # Data and oracle, before any server is up.
    local_keys: dict[str, list[str]] = {}
    oracles: dict[str, Summary] = {}
    case_meta: list[dict[str, Any]] = []
    for case in chosen:
        keys = local_keys.setdefault(case.data_key, ensure_data(case.data_key, args.scale))
        paths = [data_dir(args.scale) / k for k in keys]
        t0 = time.perf_counter()
        oracles[case.name] = oracle(
            case, paths, WORK / "oracle" / f"scale-{args.scale:g}" / f"{case.name}.parquet"
        )
        print(
            f"[oracle] {case.name}: {oracles[case.name].rows:,} rows "
            f"({time.perf_counter() - t0:.1f} s)",
            flush=True,
        )
        case_meta.append(
            {
                "name": case.name,
                "title": case.title,
                "objects": len(keys),
                "bytes": sum(p.stat().st_size for p in paths),
                "oracle_rows": oracles[case.name].rows,
                "query": query_to_json(case.query),
                "service_query": case.service_query,
            }
        )

    service_problem = service_importable() if any(n in SERVICE for n in approach_names) else None
    if service_problem:
        print(
            f"[service] s3slice is not importable ({service_problem}); its rows are skipped",
            flush=True,
        )

    results: list[dict[str, Any]] = []
    profile_meta: list[dict[str, Any]] = []
    meta: dict[str, Any] = {
        "commit": commit,
        "command": " ".join([".venv/bin/python -m tests.benchmark.run", *sys.argv[1:]]),
        "scale": args.scale,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "packages": report.package_versions(),
        "substrate": substrate.versions(),
        "profiles": profile_meta,
        "pool_threads_for_multi_object_peers": 8,
    }

    def write_report(complete: bool) -> None:
        """The report so far: rewritten after every case, so a stopped run still has one."""
        meta.update(date=report.now_iso(), complete=complete, machine=report.machine())
        report.write({"meta": meta, "cases": case_meta, "results": results}, args.out)

    with substrate.running(args.minio_data) as sub:
        ensure_bucket(sub)
        remote: dict[str, list[str]] = {
            dk: upload(sub, args.scale, dk, keys) for dk, keys in local_keys.items()
        }
        check = selfcheck.counters(sub)
        meta["selfcheck"] = check
        print(
            f"[self-check] counters {'exact' if check['ok'] else 'NOT EXACT'}: "
            f"{json.dumps(check['range_gets'])}",
            flush=True,
        )
        if not check["ok"]:
            print(json.dumps(check, indent=1), file=sys.stderr)
            return 2
        for prof in profiles:
            sub.set_profile(prof)
            pcheck = selfcheck.profile(sub)
            profile_meta.append(
                {"name": prof, "description": substrate.PROFILES[prof].description, "check": pcheck}
            )
            print(f"[profile] {prof}: {pcheck}", flush=True)
            for case in chosen:
                results += run_case(
                    args,
                    sub,
                    prof,
                    case,
                    remote[case.data_key],
                    approach_names,
                    oracles[case.name],
                    service_problem,
                )
                write_report(complete=False)

    write_report(complete=True)
    print(f"[report] {args.out / 'latest.md'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
