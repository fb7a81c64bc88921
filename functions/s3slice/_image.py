"""Where fetched bytes land: a sparse image of the object, in memory or in /tmp.

Each fetched part is written at its own offset, so a reader sees the object's layout as it
is, and only the bytes that were fetched occupy memory or disk.

In memory the image is a zero-filled ``bytes`` object of the object's size. CPython
allocates a large one with ``calloc``, which maps fresh zero pages: a page is backed by
memory only once a part is written into it, so an image of a 500 MB object holding 100 MB
of column chunks costs about 100 MB. The parts are copied in at their offsets before any
reader sees the object, and nothing else ever holds it while it is being filled. polars
reads a ``bytes`` source in place and decodes it on every core, where from a path it
decoded on one (all ten columns of the benchmark's 518 MB seed-004 object, 2 cores: 0.44
to 0.50 s from ``bytes``, 1.0 to 1.2 s from a file or a memfd); pyarrow reads it through
a zero-copy buffer.

In /tmp it is a sparse file, for objects larger than the memory budget; polars and pyarrow
open its path.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import tempfile
from typing import Protocol

import pyarrow as pa

from ._errors import S3SliceTransientError


def tmp_dir_error(directory: str, e: OSError) -> S3SliceTransientError:
    """A write to the temporary directory failed (it filled up). The free space was checked
    when the strategy was chosen, so something else filled it meanwhile, which a retry may
    not meet."""
    return S3SliceTransientError(f"the temporary directory {directory}: {e.strerror or e}")


class Image(Protocol):
    size: int

    def reader_source(self) -> str | bytes:
        """What polars' readers open: the image's bytes, or its path."""

    def write(self, start: int, data: memoryview) -> None: ...

    def source(self) -> pa.NativeFile: ...

    def close(self) -> None: ...


def _check_bounds(image: Image, start: int, length: int) -> None:
    if start < 0 or start + length > image.size:
        raise ValueError(f"a part of {length} bytes at {start} lies outside an image of "
                         f"{image.size} bytes")


class MemoryImage:
    """An object-sized ``bytes`` in memory; only the pages written to become resident."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data = bytes(size)  # calloc: zero pages, mapped on first write
        self._address = pa.py_buffer(self._data).address

    def reader_source(self) -> bytes:
        return self._data

    def write(self, start: int, data: memoryview) -> None:
        _check_bounds(self, start, len(data))
        if not len(data):
            return
        # The bytes object is ours alone until the fill is done (see the module's note);
        # ctypes releases the GIL for the copy.
        ctypes.memmove(self._address + start, pa.py_buffer(data).address, len(data))

    def source(self) -> pa.NativeFile:
        return pa.BufferReader(pa.py_buffer(self._data))

    def close(self) -> None:
        # Readers may still hold zero-copy views of the bytes; then they are freed with
        # the last of those.
        self._data = b""
        self._address = 0


class FileImage:
    """A sparse file in the temporary directory, removed on close."""

    def __init__(self, size: int, directory: str) -> None:
        self.size = size
        self.directory = directory
        try:
            self._fd, self.path = tempfile.mkstemp(prefix="s3slice-", suffix=".image",
                                                   dir=directory)
        except OSError as e:
            raise tmp_dir_error(directory, e) from e
        try:
            os.ftruncate(self._fd, size)
        except OSError as e:
            self.close()
            raise tmp_dir_error(directory, e) from e

    def reader_source(self) -> str:
        return self.path

    def write(self, start: int, data: memoryview) -> None:
        _check_bounds(self, start, len(data))
        view = data
        try:
            while view:
                written = os.pwrite(self._fd, view, start)
                start += written
                view = view[written:]
        except OSError as e:
            raise tmp_dir_error(self.directory, e) from e

    def source(self) -> pa.NativeFile:
        if self.size == 0:
            return pa.BufferReader(b"")
        return pa.memory_map(self.path, "r")

    def close(self) -> None:
        # A reader's memory map (zero-copy columns) outlives the descriptor and the name.
        with contextlib.suppress(OSError):
            os.close(self._fd)
        with contextlib.suppress(OSError):
            os.unlink(self.path)
