"""Walking, sizing and removing files: the unzipped size Lambda counts."""

from __future__ import annotations

import fnmatch
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path


def iter_files(root: Path, *, skip_dirs: Iterable[str] = ()) -> Iterator[Path]:
    """Regular files under ``root`` (symlinks are not followed), in a stable order; no
    directory whose name matches a ``skip_dirs`` pattern (``fnmatch``, case-sensitive) is
    entered."""
    skip = tuple(skip_dirs)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if not any(fnmatch.fnmatchcase(d, p) for p in skip))
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
