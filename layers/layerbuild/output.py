"""The output directory: whether a previous build there can be reused, where to stage a
new one, replacing it with the finished layer, and the deterministic zip."""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path
from typing import Any

from .files import iter_files, tree_size
from .layout import SIZE_REPORT


def reusable(out: Path, stamp: str) -> dict[str, Any] | None:
    """The report of the build in ``out`` if it has fingerprint ``stamp`` and its files
    still add up to what was recorded; otherwise ``None``."""
    report_path = out / SIZE_REPORT
    site = out / "python"
    if not (report_path.is_file() and site.is_dir()):
        return None
    try:
        report: dict[str, Any] = json.loads(report_path.read_text())
    except ValueError:
        return None
    if report.get("fingerprint") != stamp:
        return None
    if tree_size(site) != (report.get("total_bytes"), report.get("file_count")):
        return None
    return report


def staging_root(out: Path) -> Path:
    """Where to assemble the layer: a RAM disk when there is one with room, because the
    build writes, strips and deletes several times the layer's final size."""
    shm = Path("/dev/shm")  # noqa: S108 - a private mkdtemp under it, removed afterwards
    try:
        if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 2**31:
            return shm
    except OSError:
        pass
    return out.parent


def publish(site: Path, dest: Path) -> None:
    """Copy the finished ``site`` to ``dest``, replacing what was there."""
    new = dest.with_name(dest.name + ".new")
    old = dest.with_name(dest.name + ".old")
    for leftover in (new, old):
        if leftover.exists():
            shutil.rmtree(leftover)
    shutil.copytree(site, new, symlinks=True)
    if dest.exists():
        dest.rename(old)
    new.rename(dest)
    if old.exists():
        shutil.rmtree(old)


def write_zip(site: Path, dest: Path) -> int:
    """A deterministic zip of ``site`` as ``python/...`` (fixed times, sorted entries)."""
    tmp = dest.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        for path in iter_files(site):
            info = zipfile.ZipInfo("python/" + path.relative_to(site).as_posix(),
                                   date_time=(1980, 1, 1, 0, 0, 0))
            mode = 0o755 if os.access(path, os.X_OK) else 0o644
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            with path.open("rb") as src, zf.open(info, "w") as out:
                shutil.copyfileobj(src, out, 1 << 20)
    tmp.replace(dest)
    return dest.stat().st_size
