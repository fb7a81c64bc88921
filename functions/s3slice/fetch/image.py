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

Where the system will not reserve that much address space at once (Linux's default
overcommit refuses one allocation larger than the machine's memory, so a 100 GB object's
image on a 2 GB function), the image is a ``memfd`` instead: an anonymous in-memory file
that is just as sparse, which polars and pyarrow open by its ``/proc/self/fd`` path.

In /tmp it is a sparse file, for objects larger than the memory budget; polars and pyarrow
open its path.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import tempfile
from typing import NoReturn, Protocol

import pyarrow as pa

from s3slice._errors import S3SliceTransientError


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


def _check_bounds(size: int, start: int, length: int) -> None:
    if start < 0 or start + length > size:
        raise ValueError(f"a part of {length} bytes at {start} lies outside an image of "
                         f"{size} bytes")


def _zeroed(size: int) -> bytes:
    return bytes(size)  # calloc: zero pages, each backed by memory on its first write


class _BytesImage:
    """An object-sized ``bytes``; only the pages written to become resident.

    The bytes and their address are one attribute, swapped whole by :meth:`close`: a
    write on another thread reads both at once and holds the bytes while it copies, so it
    never copies into memory that was let go, nor to address 0 (a write after the close
    fails the bounds check instead)."""

    def __init__(self, data: bytes) -> None:
        self.size = len(data)
        self._held: tuple[bytes, int] = (data, pa.py_buffer(data).address)

    def reader_source(self) -> bytes:
        return self._held[0]

    def write(self, start: int, data: memoryview) -> None:
        held, address = self._held  # one read: the close may come between two
        _check_bounds(len(held), start, len(data))  # a closed image holds no bytes
        if not len(data):
            return
        # The bytes object is ours alone until the fill is done (see the module's note);
        # ctypes releases the GIL for the copy, and ``held`` keeps the bytes alive for it.
        ctypes.memmove(address + start, pa.py_buffer(data).address, len(data))

    def source(self) -> pa.NativeFile:
        return pa.BufferReader(pa.py_buffer(self._held[0]))

    def close(self) -> None:
        # Readers may still hold zero-copy views of the bytes; then they are freed with
        # the last of those.
        self._held = (b"", 0)
        self.size = 0


class _FileBacked:
    """An image held by an open file descriptor, sparse until written."""

    def __init__(self, size: int, fd: int, path: str) -> None:
        self.size = size
        self._fd = fd
        self.path = path
        try:
            os.ftruncate(fd, size)
        except OSError as e:
            self.close()
            self._fail(e)

    def _fail(self, e: OSError) -> NoReturn:
        """Raise what ``e`` means for this image (here, ``e`` itself)."""
        raise e

    def reader_source(self) -> str:
        return self.path

    def write(self, start: int, data: memoryview) -> None:
        _check_bounds(self.size, start, len(data))
        view = data
        try:
            while view:
                written = os.pwrite(self._fd, view, start)
                start += written
                view = view[written:]
        except OSError as e:
            self._fail(e)

    def source(self) -> pa.NativeFile:
        if self.size == 0:
            return pa.BufferReader(b"")
        return pa.memory_map(self.path, "r")

    def close(self) -> None:
        # A reader's memory map (zero-copy columns) outlives the descriptor on its own. As
        # with the bytes image, a late write fails the bounds check rather than reach a
        # descriptor number the process may have given to another file since.
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self.size = 0


def MemoryImage(size: int) -> Image:
    """An in-memory image: a zero-filled ``bytes``, or a memfd where the system will not
    reserve ``size`` bytes of address space at once."""
    try:
        return _BytesImage(_zeroed(size))
    except MemoryError:
        try:
            fd = os.memfd_create("s3slice-image", os.MFD_CLOEXEC)
        except (AttributeError, OSError):
            raise MemoryError(f"no memory for an image of {size} bytes") from None
        return _FileBacked(size, fd, f"/proc/self/fd/{fd}")


class FileImage(_FileBacked):
    """A sparse file in the temporary directory, removed on close."""

    def __init__(self, size: int, directory: str) -> None:
        self.directory = directory
        try:
            fd, path = tempfile.mkstemp(prefix="s3slice-", suffix=".image", dir=directory)
        except OSError as e:
            self._fail(e)
        super().__init__(size, fd, path)

    def _fail(self, e: OSError) -> NoReturn:
        raise tmp_dir_error(self.directory, e) from e

    def close(self) -> None:
        super().close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def read_at(f: pa.NativeFile, offset: int, nbytes: int) -> bytes:
    f.seek(offset)
    return bytes(f.read(nbytes))
