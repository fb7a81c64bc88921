"""Where fetched bytes land: a sparse image of the object, in memory or in /tmp.

Each fetched part is written at its own offset, so a reader sees the object's layout as it
is, and only the bytes that were fetched occupy memory or disk. In memory the image is a
``memfd`` (an anonymous in-memory file: untouched pages cost nothing); in /tmp it is a
sparse file. Either way it has a path that polars' Parquet reader opens and maps without a
copy, and pyarrow reads it through a memory map, unlike a ``BytesIO`` of a whole object.
Where ``memfd_create`` is missing, an anonymous ``MAP_NORESERVE`` mapping stands in; it
has no path, so only pyarrow reads it.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import sys
import tempfile
from typing import Protocol

import pyarrow as pa

from ._errors import S3SliceTransientError

# Python exposes MAP_NORESERVE only from 3.13; its value is 0x4000 on Linux (x86_64, arm64).
_MAP_NORESERVE: int = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform == "linux" else 0)


def tmp_dir_error(directory: str, e: OSError) -> S3SliceTransientError:
    """A write to the temporary directory failed (it filled up). The free space was checked
    when the strategy was chosen, so something else filled it meanwhile, which a retry may
    not meet."""
    return S3SliceTransientError(f"the temporary directory {directory}: {e.strerror or e}")


class Image(Protocol):
    size: int

    @property
    def path(self) -> str | None:
        """A path a reader can open, when the image has one."""

    def write(self, start: int, data: memoryview) -> None: ...

    def source(self) -> pa.NativeFile: ...

    def close(self) -> None: ...


class _FileBacked:
    """An image held by an open file descriptor of ``size`` bytes."""

    size: int
    path: str | None

    def __init__(self, size: int, fd: int) -> None:
        self.size = size
        self._fd = fd
        try:
            os.ftruncate(fd, size)
        except OSError as e:
            self.close()
            raise self._error(e) from e

    def _error(self, e: OSError) -> Exception:
        return e

    def write(self, start: int, data: memoryview) -> None:
        view = data
        try:
            while view:
                written = os.pwrite(self._fd, view, start)
                start += written
                view = view[written:]
        except OSError as e:
            raise self._error(e) from e

    def source(self) -> pa.NativeFile:
        if self.size == 0 or self.path is None:
            return pa.BufferReader(b"")
        return pa.memory_map(self.path, "r")

    def close(self) -> None:
        # A reader's memory map (zero-copy columns) outlives the descriptor on its own.
        with contextlib.suppress(OSError):
            os.close(self._fd)


class _MappedImage:
    """An object-sized anonymous mapping; only the pages written to become resident."""

    path: str | None = None

    def __init__(self, size: int) -> None:
        self.size = size
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE
        self._map = mmap.mmap(-1, max(size, 1), flags=flags)

    def write(self, start: int, data: memoryview) -> None:
        self._map[start:start + len(data)] = data

    def source(self) -> pa.NativeFile:
        return pa.BufferReader(pa.py_buffer(self._map)[: self.size])

    def close(self) -> None:
        # pyarrow may still hold views of the mapping (zero-copy columns); then the mapping
        # is released when the last of them is collected.
        with contextlib.suppress(BufferError):
            self._map.close()


class _MemfdImage(_FileBacked):
    def __init__(self, size: int, fd: int) -> None:
        self.path = f"/proc/self/fd/{fd}"
        super().__init__(size, fd)


def MemoryImage(size: int) -> Image:
    """An in-memory image: a memfd where the platform has one, else an anonymous mapping."""
    try:
        fd = os.memfd_create("s3slice-image", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return _MappedImage(size)
    return _MemfdImage(size, fd)


class FileImage(_FileBacked):
    """A sparse file in the temporary directory, removed on close."""

    path: str

    def __init__(self, size: int, directory: str) -> None:
        self.directory = directory
        try:
            fd, self.path = tempfile.mkstemp(prefix="s3slice-", suffix=".image", dir=directory)
        except OSError as e:
            raise self._error(e) from e
        super().__init__(size, fd)

    def _error(self, e: OSError) -> Exception:
        return tmp_dir_error(self.directory, e)

    def close(self) -> None:
        super().close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
