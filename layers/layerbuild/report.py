"""The size report: bytes per distribution and the largest files, measured against
Lambda's unzipped limit, and its summary for the terminal."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from s3slice_cdk.staging.code_asset import stage_code

from .files import iter_files, mib, tree_size
from .layout import FUNCTION_DIR, REPO_DIR, ZIP_NAME
from .pins import installed_distributions, normalize

#: Lambda's limit for the function code plus all its layers, unzipped (250 MiB).
LAMBDA_UNZIPPED_LIMIT = 262_144_000


def function_code_size(python: str) -> int:
    """Bytes of the function's code asset for Python ``python``, as Lambda counts them
    (unzipped): ``functions/`` staged, with its bytecode, as the constructs stage it."""
    with tempfile.TemporaryDirectory(prefix="s3slice-code-") as tmp:
        return tree_size(stage_code(FUNCTION_DIR.parent, Path(tmp), python).path)[0]


def owners(site: Path) -> dict[str, str]:
    """Top-level entry of ``site`` -> the distribution that installed it (from RECORD; a
    top-level module ``x.py`` is shipped as ``x.pyc``)."""
    found: dict[str, str] = {}
    for info in site.glob("*.dist-info"):
        dist = info.name.removesuffix(".dist-info").rsplit("-", 1)[0]
        found[info.name] = dist
        record = info / "RECORD"
        if record.is_file():
            for line in record.read_text(encoding="utf-8").splitlines():
                top = line.split(",", 1)[0].split("/", 1)[0]
                if top and not top.startswith(".."):
                    found.setdefault(top, dist)
                    if top.endswith(".py"):
                        found.setdefault(top + "c", dist)
    return found


def measure(site: Path) -> dict[str, Any]:
    """Total and per-distribution unzipped sizes, and the largest files."""
    by_top = owners(site)
    versions = installed_distributions(site)
    packages: dict[str, dict[str, Any]] = {}
    files: list[tuple[int, str]] = []
    for path in iter_files(site):
        rel = path.relative_to(site).as_posix()
        size = path.stat().st_size
        files.append((size, rel))
        dist = normalize(by_top.get(rel.split("/", 1)[0], "(unowned)"))
        entry = packages.setdefault(dist, {"version": versions.get(dist), "bytes": 0,
                                           "files": 0})
        entry["bytes"] += size
        entry["files"] += 1
    total = sum(s for s, _ in files)
    for entry in packages.values():
        entry["mib"] = mib(entry["bytes"])
    ordered = dict(sorted(packages.items(), key=lambda kv: -kv[1]["bytes"]))
    largest = [{"path": rel, "bytes": size, "mib": mib(size)}
               for size, rel in sorted(files, reverse=True)[:15]]
    return {"total_bytes": total, "total_mib": mib(total), "file_count": len(files),
            "packages": ordered, "largest_files": largest}


def summarize(report: dict[str, Any], out: Path) -> str:
    total = report["total_bytes"]
    function = function_code_size(report["python"])
    lines = [
        f"layer {report['arch']}/python{report['python']}: {total:,} bytes ({mib(total)} MiB) "
        f"in {report['file_count']:,} files -> {out / 'python'}",
    ]
    lines += [f"  {name:<24} {p['bytes']:>12,}  {p['mib']:>6} MiB"
              for name, p in report["packages"].items()]
    lines.append(f"  function code ({FUNCTION_DIR.parent.relative_to(REPO_DIR)}/, with its "
                 f"bytecode): {function:,} bytes;"
                 f" layer + function = {total + function:,} of {LAMBDA_UNZIPPED_LIMIT:,}"
                 f" ({LAMBDA_UNZIPPED_LIMIT - total - function:,} to spare)")
    if "bytecode" in report:
        b = report["bytecode"]
        lines.append(f"  bytecode: {b['modules']:,} modules compiled by Python {b['python']} "
                     f"({b['invalidation_mode']}, for {b['loaded_from']}), {b['bytecode_bytes']:,}"
                     f" bytes; {b['source_bytes_removed']:,} bytes of source removed, "
                     f"{len(b['kept_source'])} kept")
    if "seconds" in report:
        lines.append("  seconds: " + ", ".join(f"{k} {v}" for k, v in report["seconds"].items())
                     + f" (wheels from {report.get('wheels', '?')})")
    if "zip_bytes" in report:
        lines.append(f"  zip: {report['zip_bytes']:,} bytes -> {out / ZIP_NAME}")
    return "\n".join(lines)
