"""results/latest.{json,md,png}: the figures, with date, commit and machine."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from .common import REPO, human_bytes

PACKAGES = [
    "s3slice",
    "polars",
    "pyarrow",
    "duckdb",
    "duckdb-extension-httpfs",
    "fsspec",
    "s3fs",
    "boto3",
    "botocore",
    "s3transfer",
    "obstore",
    "numpy",
    "matplotlib",
    "psutil",
]


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def git_commit() -> str:
    def git(*args: str) -> str:
        proc = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=False, timeout=30
        )
        return proc.stdout.strip() if proc.returncode == 0 else ""

    head = git("rev-parse", "HEAD") or "no commit yet"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return head + (" (+ uncommitted changes)" if dirty else "")


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / (1 << 20), 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "load_average_at_end": os.getloadavg(),
    }


def _fmt_s(v: float | None) -> str:
    if v is None:
        return ""
    return f"{v:.3f} s" if v < 10 else f"{v:.1f} s"


def markdown(doc: dict[str, Any]) -> str:
    meta = doc["meta"]
    lines = [
        "# s3slice benchmark: latest run",
        "",
        "Written by `python -m tests.benchmark.run` (see tests/benchmark/README.md). "
        "Requests and bytes are the server's count (MinIO's live v3 API metrics, diffed "
        "around each run); wall is the median of the timed runs after the warm-up, in one "
        "warm process per approach; peak RSS is that process's own maximum (`VmHWM`), "
        "imports included; x best peer divides by the fastest correct peer of the same case and "
        "profile (below 1: faster than every peer).",
        "",
        f"- date: {meta['date']}"
        + (
            "" if meta.get("complete", True) else " (**incomplete**: the run stopped or is running)"
        ),
        f"- commit: `{meta['commit']}`",
        f"- command: `{meta['command']}`",
        f"- scale: {meta['scale']:g}; repeats: {meta['repeats']} timed after "
        f"{meta['warmup']} warm-up",
        f"- machine: {meta['machine']['cpu']}, {meta['machine']['cores']} cores, "
        f"{meta['machine']['memory_gib']} GiB, {meta['machine']['os']}, "
        f"Python {meta['machine']['python']}; load average at the end "
        f"{', '.join(f'{x:.1f}' for x in meta['machine']['load_average_at_end'])}",
        "- packages: " + ", ".join(f"{k} {v}" for k, v in meta["packages"].items()),
        f"- substrate: `{meta['substrate']['minio_module']}`, "
        f"`{meta['substrate']['toxiproxy_module']}`, {meta['substrate'].get('go', '')}",
    ]
    sc = meta["selfcheck"]
    rg = sc["range_gets"]
    lines.append(
        f"- counter self-check: {'passed' if sc['ok'] else 'FAILED'}: 3 range GETs of "
        f"{rg['expected_body_bytes']} body bytes counted as {rg['requests']} and "
        f"{rg['minio_sent_bytes']} bytes by MinIO ({rg['minio_overhead_bytes']} over the "
        f"body); 1 HEAD + 1 LIST counted as "
        f"{sc['head_list']['requests']}; 1 s idle with scrapes counted "
        f"{sc['idle']['total_requests']} requests"
    )
    for prof in meta["profiles"]:
        pc = prof["check"]
        lines.append(
            f"- profile `{prof['name']}`: 1-byte GET {pc['one_byte_get_ms']} ms, one "
            f"connection {pc['one_connection_MB_per_s']} MB/s ({prof['description']})"
        )
    lines.append("")

    by_profile: dict[str, list[dict[str, Any]]] = {}
    for rec in doc["results"]:
        by_profile.setdefault(rec["profile"], []).append(rec)
    for prof_name, recs in by_profile.items():
        lines += [f"## Profile `{prof_name}`", ""]
        for case in doc["cases"]:
            rows = [r for r in recs if r["case"] == case["name"]]
            if not rows:
                continue
            lines += [
                f"### {case['name']}: {case['title']}",
                "",
                f"{case['objects']} object(s), {human_bytes(case['bytes'])}; "
                f"the answer has {case['oracle_rows']:,} rows.",
                "",
                "| approach | wall | x best peer | requests | bytes | peak RSS | notes |",
                "|---|---:|---:|---|---:|---:|---|",
            ]
            for r in rows:
                if r["status"] != "ok":
                    note = (r.get("error") or "").replace("|", "\\|").replace("\n", " ")[:160]
                    lines.append(f"| {r['approach']} | **{r['status']}** | | | | | {note} |")
                    continue
                ratio = r.get("ratio_to_best_peer")
                lines.append(
                    f"| {r['approach']} | {_fmt_s(r['wall_median_s'])} | "
                    f"{'' if ratio is None else f'{ratio:.2f}'} | {r['requests_text']} | "
                    f"{human_bytes(r['bytes'])} | {r['peak_rss_mb']:.0f} MB | "
                    f"{'; '.join(r['notes'])} |"
                )
            lines.append("")
    return "\n".join(lines)


def chart(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    profiles = list(dict.fromkeys(r["profile"] for r in doc["results"]))
    cases = [c["name"] for c in doc["cases"]]
    approaches = list(dict.fromkeys(r["approach"] for r in doc["results"]))
    fig, axes = plt.subplots(
        len(cases),
        len(profiles),
        figsize=(7.5 * len(profiles), 0.32 * len(approaches) * len(cases) + 1.5),
        squeeze=False,
    )
    for ci, case in enumerate(cases):
        for pi, prof in enumerate(profiles):
            ax = axes[ci][pi]
            rows = {
                r["approach"]: r
                for r in doc["results"]
                if r["case"] == case and r["profile"] == prof
            }
            names = [a for a in approaches if a in rows]
            walls = [rows[a]["wall_median_s"] if rows[a]["status"] == "ok" else 0.0 for a in names]
            colors = [
                "#d62728"
                if rows[a]["status"] != "ok"
                else "#1f77b4"
                if rows[a]["kind"] == "service"
                else "#7f7f7f"
                for a in names
            ]
            ypos = list(range(len(names)))
            ax.barh(ypos, walls, color=colors)
            ax.set_yticks(ypos, labels=names, fontsize=7)
            ax.invert_yaxis()
            top = max(walls, default=0.0) or 1.0
            for y, a, w in zip(ypos, names, walls, strict=True):
                r = rows[a]
                label = (
                    f" {w:.2f} s, {human_bytes(r['bytes'])}, {r['requests_total']} req"
                    if r["status"] == "ok"
                    else f" {r['status']}"
                )
                ax.text(w, y, label, va="center", fontsize=6)
            ax.set_xlim(0, top * 1.6)
            ax.set_title(f"{case} · {prof}", fontsize=9)
            ax.tick_params(axis="x", labelsize=7)
            if ci == len(cases) - 1:
                ax.set_xlabel("median wall time (s)", fontsize=8)
    meta = doc["meta"]
    fig.suptitle(
        f"s3slice vs peers: scale {meta['scale']:g}, {meta['date']}, "
        f"{meta['commit'][:12]} (blue: s3slice, grey: peers, red: failed)",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(doc: dict[str, Any], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "latest.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    (out_dir / "latest.md").write_text(markdown(doc) + "\n")
    chart(doc, out_dir / "latest.png")


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
