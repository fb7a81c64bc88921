"""Walking, sizing and removing files: the unzipped size Lambda counts."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

from .layout import FUNCTION_DIR


def iter_files(root: Path, *, skip_dirs: Iterable[str] = ()) -> Iterator[Path]:
    """Regular files under ``root`` (symlinks are not followed), in a stable order."""
    skip = set(skip_dirs)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        for name in sorted(filenames):
            path = Path(dirpath, name)
            if path.is_file() and not path.is_symlink():
                yield path


def tree_size(root: Path, *, skip_dirs: Iterable[str] = ()) -> tuple[int, int]:
    """``(bytes, files)`` under ``root``: the unzipped size Lambda counts."""
    total = count = 0
    for path in iter_files(root, skip_dirs=skip_dirs):
        total += path.stat().st_size
        count += 1
    return total, count


def function_code_size(function_dir: Path = FUNCTION_DIR) -> int:
    """Bytes of the function's code asset (``__pycache__`` directories excluded: they are
    generated, ignored by git and not part of the asset)."""
    if not function_dir.is_dir():
        return 0
    return tree_size(function_dir, skip_dirs=("__pycache__",))[0]


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
