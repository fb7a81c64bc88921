"""Why a peer's job costs more CPU here than in ``../shared/bench/lambda_cost.py``: the same
whole job (the polars function: scan, ``collect``, ``write_parquet`` to S3) in Lambda-size
workers (:func:`lambda_jobs.run_one`: a fresh process per run in a memory + CPU cgroup),
on the same MinIO and the same objects, through several shapings, alternated:

    sudo .venv/bin/python -m tests.benchmark.peer_cpu --case full --size 1024 --repeats 2

Paths (``--paths``, in this order within each repeat):

- ``harness``: this harness's ``lambda-s3`` profile: toxiproxy (+25 ms latency toxic on the
  request stream, so on the uploaded bodies too) -> pacer (90 MB/s per connection, 64 KiB
  chunks) -> MinIO.
- ``judge``: the judge's shaping (``../shared/bench/substrate.sh``): its countproxy.py (run
  from there, unchanged) -> toxiproxy (the judge's build when ``/tmp/substrate/bin/server``
  exists, else ours) with a 25 ms latency toxic and a 90,000 KB/s bandwidth toxic on the
  *response* stream only -> MinIO.
- ``pacer``: the pacer alone (90 MB/s per connection, no latency; uploads unshaped).
- ``pacer-1m``: the pacer with 1 MiB chunks instead of 64 KiB.
- ``direct``: MinIO itself.

Objects (``--objects``): ``pyarrow`` (the harness's seed-004 object, written by pyarrow's
ParquetWriter) and ``polars`` (the judge's, as ``gen_seed004.py`` writes it: polars'
``write_parquet``, snappy, 1M-row groups, ``default_rng(0)``); both are 10M rows x 10 int64.

Per run: the warm job's CPU split into read (``collect``) and write (``write_parquet``),
with their voluntary context switches (a thread that waited, for a socket or a lock) and
page faults, from ``getrusage`` in the worker; and the requests MinIO counted for the run
(init + both jobs). Writes ``results/<--out-stem>.{md,json}``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import socket
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import lambda_jobs, lambda_python, report, selfcheck, substrate
from .case_run import slug
from .cases import cases
from .common import BIN, BUCKET, REPO, RESULTS, WORK, free_port
from .datasets import data_dir, ensure_data
from .lambda_python import _f as _fmt  # one formatter for both reports
from .metrics import snapshot
from .run import ensure_bucket, upload

APPROACH = "polars collect+write"
JUDGE_DIR = REPO.parent / "shared" / "bench"
JUDGE_TOXIPROXY = Path("/tmp/substrate/bin/server")  # noqa: S108 - the judge's build, if any
PATHS = ["harness", "judge", "pacer", "pacer-1m", "direct"]
#: With --strace: the syscalls counted (every thread; init and both jobs).
TRACED = ("read,recvfrom,recvmsg,readv,write,sendto,sendmsg,writev,epoll_wait,epoll_pwait,"
          "futex,sched_yield,connect,mmap,munmap,madvise")


@dataclasses.dataclass(frozen=True)
class Traced(lambda_python.Interpreter):
    """The peers' interpreter under ``strace -f -c`` (a count per syscall, in ``out``)."""

    out: str = ""

    def argv(self, *args: str) -> list[str]:
        return ["strace", "-f", "-c", "-o", self.out, "-e", f"trace={TRACED}",
                *super().argv(*args)]


def strace_counts(path: Path) -> dict[str, int]:
    """Calls per syscall from ``strace -c``'s table."""
    out: dict[str, int] = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
            out[parts[-1]] = int(parts[3])
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.benchmark.peer_cpu", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", default="full")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--paths", default="harness,judge")
    p.add_argument("--objects", default="pyarrow")
    p.add_argument("--approach", default=APPROACH)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--out-stem", default="peer-cpu")
    p.add_argument("--strace", action="store_true", help="count syscalls (strace -f -c)")
    p.add_argument("--minio-data", type=Path, default=substrate.default_data_dir())
    return p.parse_args(argv)


def _wait_port(port: int, what: str, deadline_s: float = 20.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.1)
    raise substrate.SubstrateError(f"{what} did not listen on {port}")


def _toxiproxy(binary: Path, name: str, upstream: int, toxics: list[dict[str, Any]],
               procs: list[Any]) -> int:
    """A toxiproxy server of its own with one proxy to ``upstream``; its listening port."""
    api, listen = free_port(), free_port()
    proc = substrate._start([str(binary), "-host", "127.0.0.1", "-port", str(api)],
                            dict(os.environ), WORK / "logs" / f"peer-cpu-{name}.log")
    procs.append(proc)
    substrate._wait_http_ok(f"http://127.0.0.1:{api}/version", proc, name, 30)
    status, body = substrate._http("POST", f"http://127.0.0.1:{api}/proxies", {
        "name": "s3", "listen": f"127.0.0.1:{listen}", "upstream": f"127.0.0.1:{upstream}",
        "enabled": True})
    if status not in (200, 201):
        raise substrate.SubstrateError(f"{name}: creating the proxy answered {status}: {body!r}")
    for toxic in toxics:
        status, body = substrate._http("POST", f"http://127.0.0.1:{api}/proxies/s3/toxics", toxic)
        if status != 200:
            raise substrate.SubstrateError(f"{name}: adding a toxic answered {status}: {body!r}")
    return listen


def _pacer(name: str, upstream: int, chunk: int, procs: list[Any]) -> int:
    listen = free_port()
    procs.append(substrate._start(
        [str(BIN / "pacer"), "-listen", f"127.0.0.1:{listen}", "-upstream",
         f"127.0.0.1:{upstream}", "-control", f"127.0.0.1:{free_port()}",
         "-bytes-per-s", "90000000", "-chunk", str(chunk)],
        dict(os.environ), WORK / "logs" / f"peer-cpu-{name}.log"))
    _wait_port(listen, name)
    return listen


@contextlib.contextmanager
def extra_paths(sub: substrate.Substrate, wanted: list[str]) -> Iterator[dict[str, str]]:
    """Path name -> endpoint; the processes started for them are stopped on the way out."""
    procs: list[Any] = []
    out = {"harness": sub.endpoint, "direct": sub.direct_endpoint}
    try:
        if "judge" in wanted:
            binary = JUDGE_TOXIPROXY if JUDGE_TOXIPROXY.exists() else BIN / "toxiproxy-server"
            toxi = _toxiproxy(binary, "judge-toxiproxy", sub.minio_port, [
                {"name": "lat", "type": "latency", "stream": "downstream",
                 "attributes": {"latency": 25, "jitter": 0}},
                {"name": "bw", "type": "bandwidth", "stream": "downstream",
                 "attributes": {"rate": 90000}},
            ], procs)
            count, ctl = free_port(), free_port()
            procs.append(substrate._start(
                [sys.executable, str(JUDGE_DIR / "countproxy.py"), str(count), str(toxi),
                 str(ctl)], dict(os.environ), WORK / "logs" / "peer-cpu-countproxy.log"))
            _wait_port(count, "countproxy")
            out["judge"] = f"http://127.0.0.1:{count}"
        if "pacer" in wanted:
            out["pacer"] = f"http://127.0.0.1:{_pacer('pacer', sub.minio_port, 64 << 10, procs)}"
        if "pacer-1m" in wanted:
            port = _pacer("pacer-1m", sub.minio_port, 1 << 20, procs)
            out["pacer-1m"] = f"http://127.0.0.1:{port}"
        yield out
    finally:
        for proc in reversed(procs):
            substrate.stop_group(proc)


def polars_object(scale: float) -> Path:
    """seed-004 as the judge's gen_seed004.py writes it (polars, snappy, 1M-row groups)."""
    import numpy as np
    import polars as pl

    path = data_dir(scale) / "judge-seed-004" / "data.parquet"
    if not path.exists():
        rows = max(1000, round(10_000_000 * scale))
        df = pl.from_numpy(np.random.default_rng(0).integers(1, 1_000_000, (rows, 10)),
                           schema=[f"col_{i}" for i in range(1, 11)])
        path.parent.mkdir(parents=True, exist_ok=True)
        df.write_parquet(path.with_suffix(".tmp"), compression="snappy",
                         row_group_size=max(100, rows // 10))
        path.with_suffix(".tmp").replace(path)
    return path


def markdown(doc: dict[str, Any]) -> str:
    meta = doc["meta"]
    lines = [
        f"# {meta['approach']}: CPU of one whole job by substrate path ({meta['case']}, "
        f"{meta['size_mb']} MB)",
        "",
        "Written by `python -m tests.benchmark.peer_cpu` (see its docstring and "
        "tests/benchmark/README.md). Each run: a fresh worker in a Lambda-size cgroup; init, "
        "a cold job and a warm job (another copy of the object, a new output). CPU = "
        "`getrusage` user + sys of every thread; read = `collect()`, write = "
        "`write_parquet` to S3; vcsw = voluntary context switches; requests = what MinIO "
        "counted for the whole run (init + both jobs). Medians of the repeats.",
        "",
        f"- date: {meta['date']}; commit `{meta['commit']}`; command `{meta['command']}`",
        f"- paths: {json.dumps(meta['endpoints'])}; judge's toxiproxy: `{meta['judge_toxiproxy']}`",
        f"- load average at the end: {meta['load_average_at_end']}",
        "",
        "| path | object | ok/runs | warm job s | warm CPU s | read CPU s | write CPU s | "
        "read vcsw | write vcsw | cold CPU s | init CPU s | CPU s, all (as the judge's) | "
        "peak RSS MB | requests (run) | MinIO sent MB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in doc["runs"]:
        groups.setdefault((r["path"], r["object"]), []).append(r)
    for (path, obj), rs in groups.items():
        ok = [r for r in rs if r["status"] == "ok"]

        def med(get: Any, runs: list[dict[str, Any]] = ok) -> float | None:
            vals = [v for v in (get(r) for r in runs) if v is not None]
            return statistics.median(vals) if vals else None

        def part(r: dict[str, Any], half: str, key: str) -> Any:
            return ((r.get("job2_info") or {}).get(half) or {}).get(key)

        reqs = "; ".join(sorted({json.dumps(r.get("requests", {}), sort_keys=True) for r in ok}))
        lines.append(
            f"| {path} | {obj} | {len(ok)}/{len(rs)} | {_fmt(med(lambda r: r['job2_s']))} | "
            f"{_fmt(med(lambda r: r['job2_cpu_s']))} | "
            f"{_fmt(med(lambda r: part(r, 'read', 'cpu_s')))} | "
            f"{_fmt(med(lambda r: part(r, 'write', 'cpu_s')))} | "
            f"{_fmt(med(lambda r: part(r, 'read', 'nvcsw')), 0)} | "
            f"{_fmt(med(lambda r: part(r, 'write', 'nvcsw')), 0)} | "
            f"{_fmt(med(lambda r: r['job1_cpu_s']))} | {_fmt(med(lambda r: r['init_cpu_s']))} | "
            f"{_fmt(med(lambda r: r.get('cpu_s')))} | {_fmt(med(lambda r: r['peak_rss_mb']), 0)} | "
            f"{reqs} | {_fmt(med(lambda r: r.get('minio_sent_bytes', 0) / 1e6), 0)} |"
        )
    traced = [r for r in doc["runs"] if r.get("syscalls")]
    if traced:
        names = sorted({n for r in traced for n in r["syscalls"]})
        lines += ["", "Syscalls of the whole run (init + both jobs, every thread; `strace -f -c`, "
                  "which slows the run: read its counts, not its times):", "",
                  "| path | object | repeat | " + " | ".join(names) + " |",
                  "|---|---|---:|" + "---:|" * len(names)]
        lines += [f"| {r['path']} | {r['object']} | {r['repeat']} | "
                  + " | ".join(str(r["syscalls"].get(n, "")) for n in names) + " |"
                  for r in traced]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    [case] = cases(args.scale, [args.case])
    paths = [p for p in args.paths.split(",") if p]
    unknown = set(paths) - set(PATHS)
    if unknown:
        raise SystemExit(f"unknown path(s) {sorted(unknown)}; known: {PATHS}")
    objects = [o for o in args.objects.split(",") if o]
    [key] = ensure_data(case.data_key, args.scale)
    local = {"pyarrow": data_dir(args.scale) / key}
    if "polars" in objects:
        local["polars"] = polars_object(args.scale)
    want = {o: (lambda_jobs.expected_rows(case, p), list(case.schema)) for o, p in local.items()}
    lambda_python.compile_venv()
    stem = RESULTS / args.out_stem
    doc: dict[str, Any] = {"runs": [], "meta": {
        "approach": args.approach, "case": case.name, "size_mb": args.size,
        "commit": report.git_commit(),
        "command": " ".join([".venv/bin/python -m tests.benchmark.peer_cpu", *sys.argv[1:]]),
        "judge_toxiproxy": str(JUDGE_TOXIPROXY if JUDGE_TOXIPROXY.exists()
                               else BIN / "toxiproxy-server"),
    }}
    with substrate.running(args.minio_data) as sub:
        ensure_bucket(sub)
        pairs: dict[str, list[str]] = {}
        [first] = upload(sub, args.scale, case.data_key, [key])
        pairs["pyarrow"] = [first, lambda_jobs.second_copy(sub, first)]
        if "polars" in local:
            s3 = selfcheck.s3_client(sub.direct_endpoint)
            dest = f"s{args.scale:g}/judge-seed-004/data.parquet"
            there = {o["Key"]: o["Size"] for o in s3.list_objects_v2(
                Bucket=BUCKET, Prefix=dest).get("Contents", [])}
            if there.get(dest) != local["polars"].stat().st_size:
                s3.upload_file(str(local["polars"]), BUCKET, dest)
            pairs["polars"] = [dest, lambda_jobs.second_copy(sub, dest)]
        sub.set_profile("lambda-s3")
        with extra_paths(sub, paths) as endpoints:
            doc["meta"]["endpoints"] = {p: endpoints[p] for p in paths}
            for rep in range(args.repeats):
                for path in paths:
                    for obj in objects:
                        run_id = slug(f"peer-cpu-{path}-{obj}-r{rep}-{time.time_ns()}")
                        view = dataclasses.replace(sub, procs=[])
                        # run_one hands the worker sub.endpoint: point it at this path
                        view.proxy_port = int(endpoints[path].rsplit(":", 1)[1])
                        trace = WORK / "lambda-runs" / f"{run_id}.strace"
                        if args.strace:
                            lambda_python.PEERS = Traced(out=str(trace))
                        before = snapshot(sub.minio_metrics_url)
                        row = lambda_jobs.run_one(view, args.approach, case, args.size,
                                                  pairs[obj], run_id, args.timeout)
                        counted = snapshot(sub.minio_metrics_url) - before
                        row.update(path=path, object=obj, repeat=rep,
                                   requests=counted.requests,
                                   minio_sent_bytes=counted.minio_sent_bytes)
                        for n in (1, 2):
                            problem, _ = lambda_jobs.check_and_delete_outputs(
                                sub, f"{lambda_jobs.OUT_PREFIX}/{run_id}/job{n}/", *want[obj])
                            if row["status"] == "ok" and problem:
                                row["status"], row["error"] = "wrong", f"job {n}: {problem}"
                        if args.strace and trace.exists():
                            row["syscalls"] = strace_counts(trace)
                        doc["runs"].append(row)
                        info = row.get("job2_info") or {}
                        print(f"  r{rep} {path:8} {obj:7} {row['status']} j2 "
                              f"{_fmt(row.get('job2_s'))} s cpu {_fmt(row.get('job2_cpu_s'))} "
                              f"(read {_fmt((info.get('read') or {}).get('cpu_s'))}, write "
                              f"{_fmt((info.get('write') or {}).get('cpu_s'))}) "
                              f"{counted.describe()} {(row.get('error') or '')[:200]}",
                              flush=True)
                        doc["meta"].update(date=report.now_iso(),
                                           load_average_at_end=[round(x, 1)
                                                                for x in os.getloadavg()])
                        stem.with_suffix(".json").write_text(
                            json.dumps(doc, indent=1, default=str) + "\n")
                        stem.with_suffix(".md").write_text(markdown(doc) + "\n")
    print(f"[report] {stem.with_suffix('.md')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
