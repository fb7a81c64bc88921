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
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from . import report, selfcheck, substrate
from .approaches import APPROACHES, PEERS, SERVICE
from .cases import CASE_NAMES, Case, cases, query_to_json
from .common import BUCKET, REPO, RESULTS, WORK, client_env
from .datasets import data_dir, ensure_data
from .metrics import Counters
from .verify import Summary, compare, oracle


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


def run_worker(spec: dict[str, Any], stem: Path, timeout: float) -> tuple[dict[str, Any], int]:
    """Run one worker process; its JSON record and its peak RSS in KiB."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    spec_path = stem.with_suffix(".spec.json")
    out_path = stem.with_suffix(".out.json")
    out_path.unlink(missing_ok=True)
    spec_path.write_text(json.dumps(spec, indent=1))
    with stem.with_suffix(".log").open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.benchmark.worker", str(spec_path), str(out_path)],
            cwd=REPO,
            env=client_env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline and not timed_out:
                timed_out = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(0.05)
    finally:
        if proc.returncode is None:  # interrupted: do not leave it running
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    if timed_out:
        return {
            "ok": False,
            "error": f"timed out after {timeout:.0f} s",
            "runs": [],
        }, usage.ru_maxrss
    if not out_path.exists():
        tail = stem.with_suffix(".log").read_text()[-500:]
        return {
            "ok": False,
            "error": f"worker died ({proc.returncode}): {tail}",
            "runs": [],
        }, usage.ru_maxrss
    return json.loads(out_path.read_text()), usage.ru_maxrss


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "_", text).strip("_")


def summarize_record(
    rec: dict[str, Any], maxrss_kib: int, want: Summary, kind: str
) -> dict[str, Any]:
    # The worker's own VmHWM; wait4's figure (a floor of the harness's RSS at fork, see
    # worker._peak_rss_kib) only when the worker was killed before it could say.
    peak = rec.get("peak_rss_kib") or maxrss_kib
    out: dict[str, Any] = {"kind": kind, "peak_rss_mb": peak * 1024 / 1e6, "notes": []}
    runs = rec.get("runs", [])
    out["runs"] = runs
    out["setup_s"] = rec.get("setup_s")
    out["rss_before_mb"] = rec.get("rss_before_kib", 0) * 1024 / 1e6
    if not rec.get("ok"):
        out["status"] = "failed"
        out["error"] = rec.get("error")
        out["traceback"] = rec.get("traceback")
        return out
    diff = compare(Summary.from_json(rec["summary"]), want)
    if diff is not None:
        out["status"] = "wrong"
        out["error"] = f"answer differs from the oracle: {diff}"
        return out
    timed = [r for r in runs if not r["warmup"]] or runs
    counters = [Counters.from_json(r["counters"]) for r in timed]
    walls = [r["wall_s"] for r in timed]
    # The run whose request count is the median represents the approach.
    mid = sorted(counters, key=lambda c: (c.total_requests, c.minio_sent_bytes))[len(counters) // 2]
    out.update(
        status="ok",
        wall_median_s=statistics.median(walls),
        wall_runs_s=walls,
        requests=mid.requests,
        requests_total=mid.total_requests,
        requests_text=mid.describe(),
        bytes=mid.minio_sent_bytes,
    )
    totals = {(c.total_requests, c.minio_sent_bytes) for c in counters}
    if len(totals) > 1:
        lo = min(counters, key=lambda c: c.minio_sent_bytes)
        hi = max(counters, key=lambda c: c.minio_sent_bytes)
        out["notes"].append(
            f"timed runs vary: {lo.describe()} / {lo.minio_sent_bytes / 1e6:.1f} MB to "
            f"{hi.describe()} / {hi.minio_sent_bytes / 1e6:.1f} MB"
        )
    for r in runs:
        if r["warmup"]:
            w = Counters.from_json(r["counters"])
            if (w.total_requests, w.minio_sent_bytes) != (mid.total_requests, mid.minio_sent_bytes):
                out["notes"].append(f"warm-up: {w.describe()}, {w.minio_sent_bytes / 1e6:.1f} MB")
    stats = [r.get("info", {}).get("service_stats") for r in timed]
    stats = [s for s in stats if isinstance(s, dict)]
    if stats:
        s = stats[len(stats) // 2]
        out["service_stats"] = s
        if "strategy" in s:
            out["notes"].append(f"strategy {s['strategy']}")
        said = []
        if "requests" in s:
            said.append(f"{s['requests']} req")
        if "bytes_fetched" in s:
            said.append(f"{int(s['bytes_fetched']) / 1e6:.1f} MB")
        if said:
            out["notes"].append("engine reports " + ", ".join(said))
    return out


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


def run_case(
    args: argparse.Namespace,
    sub: substrate.Substrate,
    prof: str,
    case: Case,
    keys: list[str],
    approach_names: list[str],
    want: Summary,
    service_problem: str | None,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    prefix = f"s{args.scale:g}/{case.prefix()}"
    for name in approach_names:
        kind = "service" if name in SERVICE else "peer"
        row: dict[str, Any] = {"profile": prof, "case": case.name, "approach": name, "kind": kind}
        if kind == "service" and service_problem:
            rows.append(
                {**row, "status": "skipped", "error": f"s3slice: {service_problem}", "notes": []}
            )
            continue
        stem = WORK / "runs" / f"scale-{args.scale:g}" / prof / case.name / slug(name)
        spec = {
            "approach": name,
            "endpoint": sub.endpoint,
            "bucket": BUCKET,
            "keys": keys,
            "many": case.many,
            "prefix": prefix,
            "format": case.format,
            "query": query_to_json(case.query),
            "service_query": case.service_query,
            "schema": case.schema,
            "warmup": args.warmup,
            "repeats": args.repeats,
            "minio_metrics_url": sub.minio_metrics_url,
            "frame_path": str(stem.with_suffix(".parquet")),
        }
        rec, maxrss = run_worker(spec, stem, args.timeout)
        row.update(summarize_record(rec, maxrss, want, kind))
        rows.append(row)
        if row["status"] == "ok":
            print(
                f"  {prof:9} {case.name:9} {name:26} {row['wall_median_s']:8.3f} s "
                f"{row['requests_text']:>22} {row['bytes'] / 1e6:9.1f} MB "
                f"{row['peak_rss_mb']:7.0f} MB RSS",
                flush=True,
            )
        else:
            print(
                f"  {prof:9} {case.name:9} {name:26} {row['status'].upper()}: "
                f"{(row.get('error') or '')[:200]}",
                flush=True,
            )
    best = min(
        (r["wall_median_s"] for r in rows if r["approach"] in PEERS and r["status"] == "ok"),
        default=None,
    )
    for r in rows:
        if best and r["status"] == "ok":
            r["ratio_to_best_peer"] = r["wall_median_s"] / best
    return rows


if __name__ == "__main__":
    sys.exit(main())
