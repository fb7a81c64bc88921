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

An image knows the ranges written into it, and never lets a reader take the zeros of the
rest for data: pyarrow reads an image that is not whole through a guard (a Python file
over the same bytes, zero-copy) that raises :class:`Unwritten` for any byte never
written, and polars, which reads the bytes in place, is given one only where
:meth:`Image.holds` says every byte it will read is there.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import os
import tempfile
import threading
from typing import Any, NoReturn, Protocol, cast

import pyarrow as pa

from s3slice.core.errors import S3SliceTransientError
from s3slice.core.ranges import Range


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

    def source(self) -> pa.NativeFile:
        """What pyarrow reads: the image's bytes, where a read of any byte never written
        fails (:class:`Unwritten`) instead of reading zeros."""

    def holds(self, start: int, end: int) -> bool:
        """Whether every byte of ``start``-``end`` (half-open) was written."""

    def close(self) -> None: ...


class Unwritten(OSError):
    """A reader asked an image for bytes that were never written into it (never fetched):
    an image is zeros there, and zeros must never be decoded as data."""

    def __init__(self, start: int, end: int) -> None:
        super().__init__(f"bytes {start}-{end} of the object were read but never fetched")
        self.start, self.end = start, end


class _Extents:
    """The byte ranges written into an image, merged; thread-safe (parts land in
    parallel)."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._lock = threading.Lock()

    def add(self, start: int, end: int) -> None:
        if end <= start:
            return
        with self._lock:
            starts, ends = self._starts, self._ends
            # The ranges that touch or overlap [start, end) merge with it.
            lo = bisect.bisect_left(ends, start)
            hi = bisect.bisect_right(starts, end)
            if lo < hi:
                start, end = min(start, starts[lo]), max(end, ends[hi - 1])
            starts[lo:hi] = [start]
            ends[lo:hi] = [end]

    def holds(self, start: int, end: int) -> bool:
        if end <= start:
            return True
        with self._lock:
            k = bisect.bisect_right(self._starts, start) - 1
            return k >= 0 and self._ends[k] >= end

    def first_missing(self, start: int, end: int) -> Range:
        """The first bytes of ``start``-``end`` not held (assumes some are not)."""
        with self._lock:
            k = bisect.bisect_right(self._starts, start) - 1
            if k >= 0 and self._ends[k] > start:
                start = self._ends[k]
            nxt = bisect.bisect_right(self._starts, start)
            stop = self._starts[nxt] if nxt < len(self._starts) else end
            return (start, min(end, stop))


class _Guarded:
    """A read-only file over ``inner`` (the image's bytes) for :class:`pyarrow.PythonFile`:
    every read is checked against the bytes written, and one that reaches a byte never
    written raises :class:`Unwritten`. Reads return zero-copy slices of ``inner``."""

    def __init__(self, inner: pa.NativeFile, extents: _Extents, size: int) -> None:
        self._inner = inner
        self._extents = extents
        self._size = size
        self._pos = 0
        self.closed = False

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = base + pos
        return self._pos

    def tell(self) -> int:
        return self._pos

    def size(self) -> int:
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def read(self, nbytes: int | None = None) -> pa.Buffer:
        start = self._pos
        end = self._size if nbytes is None or nbytes < 0 else min(self._size, start + nbytes)
        if not self._extents.holds(start, end):
            raise Unwritten(*self._extents.first_missing(start, end))
        self._inner.seek(start)
        out = self._inner.read_buffer(end - start)
        self._pos = end
        return out

    def close(self) -> None:
        self.closed = True
        self._inner.close()


def _guarded(inner: pa.NativeFile, extents: _Extents, size: int) -> pa.NativeFile:
    """``inner`` itself when every byte of the image was written, else a guarded file."""
    if extents.holds(0, size):
        return inner
    return pa.PythonFile(cast(Any, _Guarded(inner, extents, size)), mode="r")


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
        self._extents = _Extents()

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
        self._extents.add(start, start + len(data))

    def source(self) -> pa.NativeFile:
        held = self._held[0]
        return _guarded(pa.BufferReader(pa.py_buffer(held)), self._extents, len(held))

    def holds(self, start: int, end: int) -> bool:
        return end <= self.size and self._extents.holds(start, end)

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
        self._extents = _Extents()
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
        view, at = data, start
        try:
            while view:
                written = os.pwrite(self._fd, view, at)
                at += written
                view = view[written:]
        except OSError as e:
            self._fail(e)
        self._extents.add(start, start + len(data))

    def source(self) -> pa.NativeFile:
        if self.size == 0:
            return pa.BufferReader(b"")
        return _guarded(pa.memory_map(self.path, "r"), self._extents, self.size)

    def holds(self, start: int, end: int) -> bool:
        return end <= self.size and self._extents.holds(start, end)

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
