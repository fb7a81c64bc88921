"""The function as Lambda runs it: AWS's Runtime Interface Emulator (``aws-lambda-rie``)
and runtime interface client (``awslambdaric``) run the x86_64 layer at ``/opt`` and the
code asset at ``/var/task`` (the runtime client at ``/var/runtime``), in a private mount
namespace (the real ``/`` is untouched) and a child cgroup sized like the Lambda; beside it
a polars-only function laid out the same way. Per run: a cold invoke (the emulator starts
the runtime at the first invoke; the init is rapid's ``INIT REPORT``, see
:class:`EmulatorLog`) on one object and a warm invoke on a second, the cgroup's CPU and
peak memory, billed GB-s as the cost judge counts them. Runs alternate between the
functions; the table gives medians.

    python -m tests.benchmark.rie --repeats 2          # root, cgroup v1, the judge's S3 up

Needs the cost judge's substrate (``../shared/bench``: S3 on 127.0.0.1:9200 with
``bench-bucket/data.parquet`` and ``data-b.parquet``), Go and root. See README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cgroup import LambdaCgroup
from .common import free_port
from .rie_build import PYTHON, RIE_WORK, Built, Function, ensure_all

#: Lambda's ``sys.path`` for Python 3.13 after the working directory (``/var/task``).
PYTHONPATH = f"/var/task:/opt/python/lib/python{PYTHON}/site-packages:/opt/python:/var/runtime"
#: Lay the function out as Lambda does, then exec the emulator, which starts the runtime
#: at the first invoke. ``/var`` is a tmpfs of the namespace's own (this machine has no
#: ``/var/task``), the three trees read-only as in Lambda.
LAYOUT = r"""set -e
mount --bind "$1" /opt && mount -o remount,bind,ro /opt
mount -t tmpfs -o size=1m,mode=0755 lambda-var /var && mkdir /var/task /var/runtime
mount --bind "$2" /var/task && mount -o remount,bind,ro /var/task
mount --bind "$3" /var/runtime && mount -o remount,bind,ro /var/runtime
cd /var/task
shift 3
exec "$@"
"""
#: ``-S``: this machine's CPython has a ``.pth`` of its own in site-packages, which
#: Lambda's has not (Lambda's site-packages holds nothing the functions import).
RUNTIME_FLAGS = ("-S",)
INVOKE_PATH = "/2015-03-31/functions/function/invocations"
_REPORT = re.compile(r"REPORT RequestId: (?P<id>\S+)\t(?:Init Duration: (?P<init>[\d.]+) ms\t)?"
                     r"Duration: (?P<duration>[\d.]+) ms\t")
_INIT = re.compile(r"\(rapid\) INIT REPORT\(durationMs: (?P<ms>[\d.]+)\)")
_INVOKE = re.compile(r"\(rapid\) INVOKE RTDONE\(status: (?P<status>\w+),[^)]*?"
                     r"duration: (?P<ms>[\d.]+)ms\)")


@dataclass(frozen=True)
class Report:
    """One REPORT line of the emulator: the invoke, its init (the first only), in ms."""

    request_id: str
    init_ms: float | None
    duration_ms: float


@dataclass(frozen=True)
class EmulatorLog:
    """What the emulator's output says, in ms. Its REPORT lines' ``Init Duration`` is not
    the init: the emulator's ``Init`` returns at once (about 0.05 ms) and the runtime's
    start-up is waited for inside the first invoke, whose ``Duration`` therefore holds
    init + invoke. The init itself is rapid's ``INIT REPORT`` (from ``INIT START`` to the
    runtime's first ``/next``), and each invoke's own time its ``INVOKE RTDONE``."""

    init_ms: float | None
    invokes_ms: list[float]
    invoke_status: list[str]
    reports: list[Report]


def parse_log(text: str) -> EmulatorLog:
    """The emulator's output (``text``) parsed: rapid's INIT REPORT and INVOKE RTDONE
    lines and the emulator's REPORT lines, in order."""
    reports = [Report(m["id"], float(m["init"]) if m["init"] else None, float(m["duration"]))
               for m in _REPORT.finditer(text)]
    inits = [float(m["ms"]) for m in _INIT.finditer(text)]
    invokes = list(_INVOKE.finditer(text))
    return EmulatorLog(init_ms=inits[0] if inits else None,
                       invokes_ms=[float(m["ms"]) for m in invokes],
                       invoke_status=[m["status"] for m in invokes], reports=reports)


def lambda_env(fn: Function, memory_mb: int, endpoint: str,
               keys: tuple[str, str]) -> dict[str, str]:
    """Lambda's environment for the function (the emulator passes its own on), with the
    S3 endpoint and keys in the standard variables; s3slice also gets what the CDK sets."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "en_US.UTF-8", "TZ": ":UTC",
        "LAMBDA_TASK_ROOT": "/var/task", "LAMBDA_RUNTIME_DIR": "/var/runtime",
        "PYTHONPATH": PYTHONPATH, "_HANDLER": fn.handler,
        "AWS_EXECUTION_ENV": f"AWS_Lambda_python{PYTHON}", "AWS_LAMBDA_FUNCTION_NAME": fn.name,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(memory_mb), "AWS_LAMBDA_FUNCTION_TIMEOUT": "300",
        "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": keys[0], "AWS_SECRET_ACCESS_KEY": keys[1],
        "AWS_ENDPOINT_URL": endpoint, "AWS_ENDPOINT_URL_S3": endpoint,
    }
    if fn.name == "s3slice":  # s3slice_cdk.function.function_environment's
        env.update(POWERTOOLS_SERVICE_NAME="s3slice", POWERTOOLS_METRICS_NAMESPACE="S3Slice",
                   POWERTOOLS_LOG_LEVEL="INFO")
    return env


def event(fn: Function, source: str, out: str) -> dict[str, Any]:
    """seed-004 (``col_1, col_2 WHERE col_1 <= 1000``) as each function's event."""
    if fn.name == "s3slice":
        return {"source": source, "columns": ["col_1", "col_2"], "filter": "col_1 <= 1000",
                "output": {"uri": out + "/"}}
    return {"source": source, "columns": ["col_1", "col_2"], "max_col_1": 1000,
            "output": out + ".parquet"}


def rows_of(fn: Function, answer: dict[str, Any]) -> int:
    if "errorType" in answer:
        raise RuntimeError(f"{fn.name} failed: {answer.get('errorType')}: "
                           f"{answer.get('errorMessage')}")
    return int(answer["outputs"][0]["rows"] if fn.name == "s3slice" else answer["rows"])


def _invoke(port: int, body: dict[str, Any], trace: bool, timeout: float) -> dict[str, Any]:
    headers = {"Content-Type": "application/json"}
    if trace:  # Lambda passes every invoke a trace header (Sampled=0 without active tracing)
        headers["X-Amzn-Trace-Id"] = (f"Root=1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]};"
                                      f"Parent={uuid.uuid4().hex[:16]};Sampled=0")
    req = urllib.request.Request(f"http://127.0.0.1:{port}{INVOKE_PATH}",
                                 data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        answer: dict[str, Any] = json.loads(resp.read() or b"{}")
    return answer


def _wait_listening(port: int, proc: subprocess.Popen[bytes], deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the emulator exited ({proc.returncode}) before listening")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"the emulator did not listen on {port} within {deadline_s} s")


def processes(cg: LambdaCgroup) -> dict[str, dict[str, float]]:
    """Each process in the cgroup (by name): its CPU s and its own peak RSS (VmHWM)."""
    out: dict[str, dict[str, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for pid in cg.pids():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        hwm = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("VmHWM")), "0")
        out[name] = {"cpu_s": (int(fields[11]) + int(fields[12])) / tick, "hwm_mb": int(hwm) / 1024}
    return out


def laid_out(built: Built, fn: Function, *command: str) -> list[str]:
    """``command`` in a private mount namespace laid out as Lambda lays out ``fn``."""
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", LAYOUT,
            "layout", str(fn.layer), str(fn.task), str(built.runtime), *command]


def importtime(built: Built, fn: Function, memory_mb: int) -> str:
    """``python -X importtime`` of the runtime client and the handler's module, once, laid
    out as Lambda lays it out but in no cgroup (a profile, not a figure to compare): the
    heaviest imports by cumulative time, the runtime client's and the handler's."""
    module = fn.handler.rsplit(".", 1)[0]
    code = f"import awslambdaric.bootstrap, {module}"
    env = lambda_env(fn, memory_mb, "http://127.0.0.1:9", ("k", "s"))
    proc = subprocess.run(laid_out(built, fn, built.python, *RUNTIME_FLAGS, "-X", "importtime",
                                   "-c", code), env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{code} failed in the layout: {proc.stderr[-2000:]}")
    rows: list[tuple[float, str]] = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cum, name = line.split(":", 1)[1].split("|", 2)
        depth = (len(name) - len(name.lstrip()) - 1) // 2
        if depth <= 1:
            rows.append((int(cum) / 1e6, ("  " * depth) + name.strip()))
    top = [r for r in rows if not r[1].startswith(" ")]
    deep = sorted(rows, key=lambda r: -r[0])[:12]
    return "\n".join([f"{fn.name}: `{code}` (-X importtime, cumulative s; no cgroup)",
                      *[f"  {s:7.3f}  {name}" for s, name in sorted(top, key=lambda r: -r[0])[:4]],
                      "  heaviest at depth <= 1:",
                      *[f"  {s:7.3f}  {name.strip()}" for s, name in deep]])


def run_once(built: Built, fn: Function, args: argparse.Namespace, n: int) -> dict[str, Any]:
    """One cold start, a cold invoke and a warm one, in a fresh cgroup and namespace."""
    rie_port, api_port = free_port(), free_port()
    out = f"s3://{args.bucket}/rie-out/{fn.name}/{uuid.uuid4().hex}"
    log_path = RIE_WORK / "logs" / f"{time.strftime('%Y%m%dT%H%M%S')}-{n}-{fn.name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    argv = laid_out(built, fn, str(built.rie),
                    "--runtime-interface-emulator-address", f"127.0.0.1:{rie_port}",
                    "--runtime-api-address", f"127.0.0.1:{api_port}",
                    built.python, *RUNTIME_FLAGS, "-m", "awslambdaric", fn.handler)
    rec: dict[str, Any] = {"function": fn.name, "memory_mb": args.memory, "log": str(log_path)}
    with LambdaCgroup(args.memory) as cg, log_path.open("wb") as log:
        env = lambda_env(fn, args.memory, args.endpoint, (args.access_key, args.secret_key))
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                preexec_fn=cg.enter, start_new_session=True)
        try:
            _wait_listening(rie_port, proc, 30)
            rows, cpu, wall = [], [], []
            for i, source in enumerate(args.sources):
                t0 = time.perf_counter()
                answer = _invoke(rie_port, event(fn, f"s3://{args.bucket}/{source}", f"{out}/{i}"),
                                 args.trace_header, args.timeout)
                wall.append(time.perf_counter() - t0)
                rows.append(rows_of(fn, answer))
                cpu.append(cg.stats().get("cpuacct_s"))
            rec.update(rows=rows, client_wall_s=wall, procs=processes(cg), cgroup=cg.stats())
        finally:
            with_grace(proc)
    parsed = parse_log(log_path.read_text(errors="replace"))
    n_src = len(args.sources)
    if (parsed.init_ms is None or len(parsed.reports) != n_src
            or parsed.invoke_status != ["success"] * n_src):
        raise RuntimeError(f"{fn.name}: expected an INIT REPORT and {n_src} successful "
                           f"invokes, each with a REPORT; see {log_path}")
    init, (invoke1, invoke2) = parsed.init_ms, parsed.invokes_ms[:2]
    procs = rec["procs"]
    cpu_total = rec["cgroup"].get("cpuacct_s") or sum(p["cpu_s"] for p in procs.values())
    gb = args.memory / 1024
    rec.update(
        init_ms=init, invoke1_ms=invoke1, invoke2_ms=invoke2, cpu_s=cpu_total,
        report_ms=[r.duration_ms for r in parsed.reports],
        report_init_ms=parsed.reports[0].init_ms,
        cpu_cold_s=cpu[0], cpu_warm_s=_diff(cpu[1], cpu[0]),
        peak_mb=rec["cgroup"].get("cgroup_peak_mb"),
        runtime_hwm_mb=procs.get(f"python{PYTHON}", {}).get("hwm_mb"),
        rie_cpu_s=procs.get("aws-lambda-rie", {}).get("cpu_s"),
        rie_hwm_mb=procs.get("aws-lambda-rie", {}).get("hwm_mb"),
        gbs_cold=gb * (init + invoke1) / 1000, gbs_warm=gb * invoke2 / 1000,
    )
    return rec


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def with_grace(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the emulator's process group, SIGKILL after 5 s (the cgroup's removal
    kills anything left)."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


COLUMNS = (("init_ms", "init ms", 0), ("invoke1_ms", "cold invoke ms", 0),
           ("invoke2_ms", "warm invoke ms", 0), ("cpu_cold_s", "CPU s init+cold", 3),
           ("cpu_warm_s", "CPU s warm", 3), ("peak_mb", "cgroup peak MB", 0),
           ("runtime_hwm_mb", "runtime VmHWM MB", 0), ("rie_hwm_mb", "RIE VmHWM MB", 0),
           ("gbs_cold", "GB-s cold", 3), ("gbs_warm", "GB-s warm", 3))


def _median(recs: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in recs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else ""


def table(runs: list[dict[str, Any]]) -> str:
    """Medians per function, and s3slice / polars where both ran."""
    names = list(dict.fromkeys(r["function"] for r in runs))
    med = {n: {k: _median([r for r in runs if r["function"] == n], k) for k, _, _ in COLUMNS}
           for n in names}
    lines = ["| function | runs | " + " | ".join(h for _, h, _ in COLUMNS) + " |",
             "|---|---:|" + "---:|" * len(COLUMNS)]
    for n in names:
        cells = ["" if med[n][k] is None else f"{med[n][k]:.{nd}f}" for k, _, nd in COLUMNS]
        count = sum(r["function"] == n for r in runs)
        lines.append(f"| {n} | {count} | " + " | ".join(cells) + " |")
    if {"s3slice", "polars"} <= set(names):
        a, b = med["s3slice"], med["polars"]
        cells = [_ratio(a[k], b[k]) for k, _, _ in COLUMNS]
        lines.append("| s3slice / polars | | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--repeats", type=int, default=2, help="alternated rounds of every function")
    ap.add_argument("--memory", type=int, default=512, help="the Lambda's memory, MB")
    ap.add_argument("--functions", default="s3slice,polars")
    ap.add_argument("--endpoint", default="http://127.0.0.1:9200")
    ap.add_argument("--access-key", default="minioadmin")
    ap.add_argument("--secret-key", default="minioadmin")
    ap.add_argument("--bucket", default="bench-bucket")
    ap.add_argument("--sources", default="data.parquet,data-b.parquet",
                    type=lambda s: s.split(","), help="the cold invoke's object, the warm one's")
    ap.add_argument("--no-trace-header", dest="trace_header", action="store_false")
    ap.add_argument("--timeout", type=float, default=300.0, help="per invoke, s")
    ap.add_argument("--importtime", action="store_true",
                    help="only profile each function's imports once (no runs)")
    args = ap.parse_args(argv)
    built = ensure_all()
    print("builds: " + "; ".join(f"{k}: {v}" for k, v in built.timings.items()), flush=True)
    wanted = args.functions.split(",")
    fns = [f for name in wanted for f in built.functions if f.name == name]
    if args.importtime:
        for fn in fns:
            print(importtime(built, fn, args.memory), flush=True)
        return
    runs: list[dict[str, Any]] = []
    for n in range(args.repeats):
        for fn in fns:
            rec = run_once(built, fn, args, n)
            runs.append(rec)
            print(f"[{n}] {fn.name}: init {rec['init_ms']:.0f} ms, invokes "
                  f"{rec['invoke1_ms']:.0f}/{rec['invoke2_ms']:.0f} ms, rows {rec['rows']}, "
                  f"CPU {rec['cpu_s']:.2f} s, peak {rec['peak_mb']:.0f} MB", flush=True)
    answers = {tuple(r["rows"]) for r in runs}
    if len(answers) != 1:
        raise SystemExit(f"the functions' answers differ (rows per invoke): {sorted(answers)}")
    out = RIE_WORK / f"results-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(json.dumps({"args": vars(args), "builds": built.timings, "runs": runs},
                              indent=1, default=str))
    print(f"\nseed-004 at {args.memory} MB under aws-lambda-rie + awslambdaric, medians "
          f"({out}):\n\n{table(runs)}")


if __name__ == "__main__":
    main()
