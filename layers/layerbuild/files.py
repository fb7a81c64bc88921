"""Walking, sizing and removing files: the unzipped size Lambda counts."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from s3slice_cdk.staging.bytecode import iter_files

__all__ = ["iter_files", "mib", "path_size", "remove", "tree_size"]


def tree_size(root: Path, *, skip_dirs: Iterable[str] = ()) -> tuple[int, int]:
    """``(bytes, files)`` under ``root``: the unzipped size Lambda counts."""
    total = count = 0
    for path in iter_files(root, skip_dirs=skip_dirs):
        total += path.stat().st_size
        count += 1
    return total, count


def path_size(path: Path) -> int:
    if path.is_dir() and not path.is_symlink():
        return tree_size(path)[0]
    return path.lstat().st_size


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def mib(n: int) -> float:
    return round(n / 2**20, 1)
