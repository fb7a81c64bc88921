"""One approach on one case, in its own process: ``python -m tests.benchmark.worker SPEC OUT``.

Runs the warm-up and the timed repeats in this process (like warm Lambda invocations),
takes a server-side counter snapshot right before and after each run, checks that every
run gives the same answer, and writes a JSON record. The parent takes this process's peak
RSS from ``os.wait4``, so it is this approach's alone.
"""

from __future__ import annotations

import gc
import json
import resource
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from .approaches import APPROACHES, Target
from .cases import query_from_json
from .metrics import snapshot
from .verify import compare, normalize, summarize


def _rss_now_kib() -> int:
    """Current RSS in KiB from /proc."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() // 1024


def _peak_rss_kib() -> int:
    """This process's peak RSS (VmHWM) in KiB.

    Not ``wait4``'s ``ru_maxrss`` in the parent: Linux carries the maximum over exec, so a
    child's figure is at least the RSS its parent had when it forked (the harness holds
    the oracles, about 250 MB).
    """
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def main(spec_path: str, out_path: str) -> int:
    spec: dict[str, Any] = json.loads(Path(spec_path).read_text())
    record: dict[str, Any] = {"ok": False, "runs": [], "error": None}
    target = Target(
        endpoint=spec["endpoint"],
        bucket=spec["bucket"],
        keys=spec["keys"],
        many=spec["many"],
        prefix=spec["prefix"],
        format=spec["format"],
        query=query_from_json(spec["query"]),
        service_query=spec["service_query"],
    )
    murl = spec["minio_metrics_url"]
    try:
        setup = APPROACHES[spec["approach"]]
        t0 = time.perf_counter()
        run = setup(target)
        record["setup_s"] = time.perf_counter() - t0
        record["rss_before_kib"] = _rss_now_kib()
        first = None
        total = spec["warmup"] + spec["repeats"]
        for i in range(total):
            gc.collect()
            before = snapshot(murl)
            t0 = time.perf_counter()
            frame = run()
            wall = time.perf_counter() - t0
            after = snapshot(murl)
            last = i == total - 1
            norm = normalize(frame, spec["schema"])
            frame_path = Path(spec["frame_path"])
            summary = summarize(norm, frame_path.with_name(f"{frame_path.stem}-run{i}.parquet"))
            del frame, norm
            entry: dict[str, Any] = {
                "warmup": i < spec["warmup"],
                "wall_s": wall,
                "counters": (after - before).to_json(),
                "rows": summary.rows,
            }
            if i < len(target.info):
                entry["info"] = target.info[i]
            record["runs"].append(entry)
            if first is None:
                first = summary
            elif (diff := compare(summary, first)) is not None:
                raise RuntimeError(f"run {i} answered differently from run 0: {diff}")
            if last:
                record["summary"] = summary.to_json()
        record["ok"] = True
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a failed row
        record["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        record["traceback"] = traceback.format_exc()[-4000:]
    record["peak_rss_kib"] = _peak_rss_kib()
    Path(out_path).write_text(json.dumps(record, indent=1, default=str))
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
