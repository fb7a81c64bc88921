"""Lambda-size mode's report: the runs aggregated per (approach, size, case), the
smallest size that runs each, and results/lambda-size.{md,json,png}."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from . import copy_object
from .cases import cases
from .lambda_jobs import DUCKDB_MEMORY_FRACTION
from .lambda_python import _f

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
