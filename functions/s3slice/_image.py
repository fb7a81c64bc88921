"""Where fetched bytes land: a sparse image of the object, in memory or in /tmp.

Each fetched part is written at its own offset, so pyarrow reads the object's layout as it
is, and only the bytes that were fetched occupy memory (an anonymous ``MAP_NORESERVE``
mapping: untouched pages cost nothing) or disk (a sparse file). pyarrow is handed the image
without a copy, unlike a ``BytesIO`` of a whole object.
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

    def write(self, start: int, data: memoryview) -> None: ...

    def source(self) -> pa.NativeFile: ...

    def close(self) -> None: ...


class MemoryImage:
    """An object-sized anonymous mapping; only the pages written to become resident."""

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


class FileImage:
    """A sparse file in the temporary directory, removed on close."""

    def __init__(self, size: int, directory: str) -> None:
        self.size = size
        self.directory = directory
        try:
            fd, self.path = tempfile.mkstemp(prefix="s3slice-", suffix=".image", dir=directory)
        except OSError as e:
            raise self._error(e) from e
        self._fd = fd
        try:
            os.ftruncate(fd, size)
        except OSError as e:
            self.close()
            raise self._error(e) from e

    def _error(self, e: OSError) -> S3SliceTransientError:
        return tmp_dir_error(self.directory, e)

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
        return pa.memory_map(self.path, "r")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)
        with contextlib.suppress(OSError):
            os.unlink(self.path)
