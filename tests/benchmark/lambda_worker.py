"""A whole Lambda-style job pair in a fresh process (``-m tests.benchmark.lambda_worker SPEC OUT``).

Started by :mod:`tests.benchmark.lambda_size` inside a memory + CPU limited cgroup, with
``AWS_LAMBDA_FUNCTION_MEMORY_SIZE`` set. It does what a Lambda does:

- **init**: from the moment the parent spawned this process (``S3SLICE_BENCH_T0``, a
  ``time.time()`` taken right before ``Popen``) until the approach's module is imported
  and configured (clients, connections' settings, DuckDB's extension and secret). The
  interpreter's own start-up is in it, as it is in a Lambda's init.
- **job 1** (cold): read one object, run the query, write the result to S3.
- **job 2** (warm): the same on *another* object of the same shape, to a new output.

Only the standard library is imported before init starts; each approach imports its own
packages inside its setup. s3slice's handler runs, by default, as Lambda runs it: with
``-S -B -P`` and ``sys.path`` = the function code, its layer (no numpy there) and the
repository for this module (see ``lambda_python.layer_interpreter``); the peers run from the
venv. The record says whether numpy was imported and what ``sys.path`` was. CPU is
``getrusage(RUSAGE_SELF)`` user + sys (every thread), taken at each phase boundary. The
record is rewritten after every phase, so a run killed by the OOM killer still says how far
it got.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

Job = Callable[[str, str], dict[str, Any]]  # (source key, output key/prefix) -> info


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _usage() -> dict[str, float]:
    """CPU (user + sys, every thread), wall clock, context switches (voluntary: a thread
    waited, e.g. for the socket; involuntary: it was preempted) and page faults, so far."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "wall_s": time.perf_counter(),
        "nvcsw": ru.ru_nvcsw,
        "nivcsw": ru.ru_nivcsw,
        "minflt": ru.ru_minflt,
        "majflt": ru.ru_majflt,
    }


def _since(before: dict[str, float]) -> dict[str, float]:
    now = _usage()
    return {k: round(now[k] - v, 4) for k, v in before.items()}


def _peak_rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


# --------------------------------------------------------------------------- approaches
# Each takes the spec and returns job(source_key, output_key). Imports happen inside,
# so they are part of the measured init.


def _storage_options(spec: dict[str, Any]) -> dict[str, str]:
    return {
        "aws_endpoint_url": spec["endpoint"],
        "aws_access_key_id": spec["access_key"],
        "aws_secret_access_key": spec["secret_key"],
        "aws_region": spec["region"],
        "aws_allow_http": "true",
    }


def _query(spec: dict[str, Any]) -> Any:
    from .cases import query_from_json

    return query_from_json(spec["query"])


def polars_collect(spec: dict[str, Any]) -> Job:
    """The five-line function: scan, query, collect, ``write_parquet`` to S3."""
    import polars as pl

    from .translate import polars_query

    so = _storage_options(spec)
    q = _query(spec)
    bucket = spec["bucket"]

    def job(key: str, out: str) -> dict[str, Any]:
        url = f"s3://{bucket}/{key}"
        lf = (
            pl.scan_csv(url, storage_options=so)
            if spec["format"] == "csv"
            else (pl.scan_parquet(url, storage_options=so))
        )
        before = _usage()
        df = polars_query(lf, q).collect()
        read = _since(before)
        before = _usage()
        df.write_parquet(f"s3://{bucket}/{out}result.parquet", storage_options=so)
        # the two halves of the job, for tests.benchmark.peer_cpu (two getrusage calls)
        return {"rows": df.height, "read": read, "write": _since(before)}

    return job


def polars_sink(spec: dict[str, Any]) -> Job:
    """polars' streaming engine straight to S3: ``sink_parquet``."""
    import polars as pl

    from .translate import polars_query

    so = _storage_options(spec)
    q = _query(spec)
    bucket = spec["bucket"]

    def job(key: str, out: str) -> dict[str, Any]:
        url = f"s3://{bucket}/{key}"
        lf = (
            pl.scan_csv(url, storage_options=so)
            if spec["format"] == "csv"
            else (pl.scan_parquet(url, storage_options=so))
        )
        polars_query(lf, q).sink_parquet(f"s3://{bucket}/{out}result.parquet", storage_options=so)
        return {}

    return job


def duckdb_copy(spec: dict[str, Any]) -> Job:
    """DuckDB ``COPY (query) TO 's3://...' (FORMAT parquet)``, memory_limit from M."""
    import importlib.resources
    import tempfile

    import duckdb

    from .translate import sql_query

    mem_mb = int(os.environ["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"])
    limit_mb = int(mem_mb * spec["duckdb_memory_fraction"])
    ext = (
        importlib.resources.files("duckdb_extension_httpfs")
        / "extensions"
        / f"v{duckdb.__version__}"
        / "httpfs.duckdb_extension"
    )
    tmp = tempfile.mkdtemp(prefix="s3slice-bench-duckdb-")
    con = duckdb.connect(
        config={
            "autoinstall_known_extensions": False,
            "memory_limit": f"{limit_mb}MB",
            "temp_directory": tmp,
        }
    )
    con.execute("SET enable_progress_bar = false")
    con.execute(f"LOAD '{ext}'")
    host = spec["endpoint"].removeprefix("http://")
    con.execute(
        f"""CREATE SECRET bench (TYPE s3, KEY_ID '{spec["access_key"]}',
        SECRET '{spec["secret_key"]}', REGION '{spec["region"]}', ENDPOINT '{host}',
        URL_STYLE 'path', USE_SSL false)"""
    )
    for setting in ("enable_external_file_cache", "enable_http_metadata_cache"):
        con.execute(f"SET {setting} = false")
    q = _query(spec)
    reader = "read_csv" if spec["format"] == "csv" else "read_parquet"
    bucket = spec["bucket"]

    def job(key: str, out: str) -> dict[str, Any]:
        sql = sql_query(f"{reader}('s3://{bucket}/{key}')", q)
        rows = con.execute(
            f"COPY ({sql}) TO 's3://{bucket}/{out}result.parquet' "
            "(FORMAT parquet, COMPRESSION zstd)"
        ).fetchall()
        return {"rows": int(rows[0][0]) if rows and rows[0] else None}

    return job


def seed_recipe(spec: dict[str, Any]) -> Job:
    """boto3 ``download_fileobj`` into memory, polars, ``put_object`` of the result."""
    import io

    import boto3
    from botocore.config import Config

    from .translate import read_buffer

    s3 = boto3.client(
        "s3",
        endpoint_url=spec["endpoint"],
        region_name=spec["region"],
        aws_access_key_id=spec["access_key"],
        aws_secret_access_key=spec["secret_key"],
        config=Config(s3={"addressing_style": "path"}),
    )
    q = _query(spec)
    bucket = spec["bucket"]

    def job(key: str, out: str) -> dict[str, Any]:
        buf = io.BytesIO()
        s3.download_fileobj(bucket, key, buf)
        buf.seek(0)
        df = read_buffer(buf, spec["format"], q)
        del buf
        body = io.BytesIO()
        df.write_parquet(body)
        s3.put_object(Bucket=bucket, Key=f"{out}result.parquet", Body=body.getvalue())
        return {"rows": df.height}

    return job


class _Context:
    """What Lambda hands the handler, as far as the handler looks at it."""

    def __init__(self, memory_mb: int, timeout_s: float) -> None:
        self.function_name = "s3slice-bench"
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = memory_mb
        self.aws_request_id = f"bench-{time.time_ns()}"
        self.invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:bench"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


SERVICE_APPROACH = "s3slice handler"


def s3slice_handler(spec: dict[str, Any]) -> Job:
    """The deployed entry point: ``import s3slice.handler`` (which validates the config at
    import), then ``lambda_handler(direct-invoke event, context)``."""
    from s3slice.handler import lambda_handler

    mem_mb = int(os.environ["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"])
    bucket = spec["bucket"]

    def job(key: str, out: str) -> dict[str, Any]:
        event = {
            "source": f"s3://{bucket}/{key}",
            **spec["service_query"],
            "output": {"uri": f"s3://{bucket}/{out}"},
        }
        response = lambda_handler(event, _Context(mem_mb, 900.0))
        stats = response.get("stats", {})
        return {
            "rows": sum(int(o.get("rows", 0)) for o in response.get("outputs", [])),
            "stats": {
                k: stats.get(k)
                for k in ("strategy", "requests", "bytes_fetched", "timings_ms", "row_groups")
            },
        }

    return job


APPROACHES: dict[str, Callable[[dict[str, Any]], Job]] = {
    SERVICE_APPROACH: s3slice_handler,
    "polars collect+write": polars_collect,
    "polars sink_parquet": polars_sink,
    "duckdb COPY": duckdb_copy,
    "seed download_fileobj+polars": seed_recipe,
}


# --------------------------------------------------------------------------- main


def _start_py_spy(spec: dict[str, Any]) -> Any:
    """py-spy sampling this process (native frames, every thread, busy samples only)."""
    import signal
    import subprocess

    proc = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("py-spy")),
            "record",
            "--pid",
            str(os.getpid()),
            "--native",
            "--threads",
            "--rate",
            str(spec.get("py_spy_rate", 100)),
            "--format",
            "raw",
            "-o",
            spec["profile_path"],
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    time.sleep(2.0)  # let it attach before the profiled job starts
    return proc, signal.SIGINT


def _stop_py_spy(spy: Any) -> str:
    proc, sig = spy
    proc.send_signal(sig)
    out: bytes = proc.communicate(timeout=120)[0]
    return out.decode(errors="replace")[-1000:]


def main(spec_path: str, out_path: str) -> int:
    t0 = float(os.environ["S3SLICE_BENCH_T0"])
    spec: dict[str, Any] = json.loads(Path(spec_path).read_text())
    out = Path(out_path)
    record: dict[str, Any] = {
        "ok": False,
        "phase": "init",
        "error": None,
        "interpreter": {
            "no_site": bool(sys.flags.no_site),
            "dont_write_bytecode": bool(sys.flags.dont_write_bytecode),
            "sys_path": list(sys.path),
        },
    }

    def save() -> None:
        record["peak_rss_kib"] = _peak_rss_kib()
        # pyarrow imports numpy whenever it can find it; s3slice's layer has none
        record["numpy_imported"] = "numpy" in sys.modules
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1, default=str))
        tmp.replace(out)

    # Profiling (tests.benchmark.lambda_size --cpu-profile): the jobs numbered in
    # profile_jobs run under one cProfile whose clock is this process's CPU time (every
    # thread's, charged to the main thread's frame of the moment), or under py-spy.
    profiled = set(spec.get("profile_jobs", []))
    prof: Any = None
    spy: Any = None
    try:
        job = APPROACHES[spec["approach"]](spec)
        record["init_s"] = time.time() - t0
        record["init_cpu_s"] = _cpu_s()
        record["rss_after_init_kib"] = _peak_rss_kib()
        for n, (key, dest) in enumerate(zip(spec["keys"], spec["outputs"], strict=True), 1):
            record["phase"] = f"job{n}"
            save()
            if n in profiled and spec.get("profiler") == "cprofile" and prof is None:
                import cProfile

                prof = cProfile.Profile(time.process_time)
            if n in profiled and spec.get("profiler") == "py-spy" and spy is None:
                spy = _start_py_spy(spec)
            c0, w0, u0 = _cpu_s(), time.perf_counter(), _usage()
            if prof is not None and n in profiled:
                prof.enable()
            info = job(key, dest)
            if prof is not None and n in profiled:
                prof.disable()
            record[f"job{n}_s"] = time.perf_counter() - w0
            record[f"job{n}_cpu_s"] = _cpu_s() - c0
            record[f"job{n}_usage"] = _since(u0)
            record[f"job{n}_info"] = info
        record["phase"] = "done"
        record["ok"] = True
        if prof is not None:
            prof.dump_stats(spec["profile_path"])
        if spy is not None:
            record["py_spy"] = _stop_py_spy(spy)
    except BaseException as exc:  # noqa: BLE001 - every failure is recorded
        record["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        record["traceback"] = traceback.format_exc()[-4000:]
    save()
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
