"""Bounds on what a text object decodes to: its longest line, and what it decompresses to.

A text object is parsed whole, so one line (one CSV record, one JSON-lines record) is held
and parsed at once however long it is, and a small compressed object can expand to far more
than its size. Both are checked before the parser sees the data, each refused with a typed
error that names the object and the limit.
"""

from __future__ import annotations

import io
import mmap
import os
from collections.abc import Iterator
from typing import Literal

import pyarrow as pa

from s3slice.core.errors import ObjectFormatError
from s3slice.core.model import Compression, InputSpec

#: The most fields a CSV record may have: polars' cost per column grows faster than their
#: count (100,000 columns take seconds, a million minutes), so a record of many more is
#: refused before it is parsed.
MAX_CSV_FIELDS = 100_000
#: A streamed decompression's read size.
STREAM_CHUNK = 8 << 20
PYARROW_CODECS: dict[str, Literal["gzip", "bz2", "zstd"]] = {
    "gzip": "gzip", "bzip2": "bz2", "zstd": "zstd"}


def line_limit(memory_budget_bytes: int) -> int:
    """The least line length refused: a sixteenth of the memory budget (one line is copied
    and parsed at once, a few times its size), and 64 KiB at least."""
    return max(64 << 10, memory_budget_bytes // 16)


def decompressed_chunks(source: str | pa.Buffer, compression: Compression, *, uri: str,
                        limit: int | None) -> Iterator[bytes]:
    """The decompressed content of ``source`` (a path or a buffer) in chunks, refused once it
    passes ``limit`` bytes (a compression bomb) before more is produced."""
    total = 0
    with pa.input_stream(source, compression=PYARROW_CODECS[compression]) as src:
        while True:
            try:
                chunk = src.read(STREAM_CHUNK)
            except (OSError, EOFError, ValueError, pa.ArrowException) as e:
                raise ObjectFormatError(f"cannot decompress as {compression}: {e}",
                                        uri=uri) from e
            if not chunk:
                return
            total += len(chunk)
            if limit is not None and total > limit:
                raise ObjectFormatError(
                    f"decompresses ({compression}) to more than {limit:,} bytes, the most "
                    "this read may hold (the memory budget, or the room in the temporary "
                    "directory, bounds it)", uri=uri)
            yield chunk


def line_delimited(spec: InputSpec, head: bytes) -> bool:
    """Whether the format is read line by line: CSV and JSON lines, not a JSON document
    (an array, which may be written on one line)."""
    if spec.format == "csv":
        return True
    if spec.json_type == "auto":
        return head.lstrip()[:1] != b"["
    return spec.json_type == "lines"


def check_lines(source: str | bytes, spec: InputSpec, limit: int, *, uri: str) -> None:
    """Refuse a line-delimited object (bytes, or a file's path) with a line of ``limit``
    bytes or more. Each aligned block of ``limit`` bytes must hold a line break, so a line
    passed is shorter than twice the limit and one refused is at least the limit; a block
    search stops at its first line break, so this reads little of a well-formed object."""
    if isinstance(source, bytes):
        if len(source) >= limit and line_delimited(spec, source[:4096]):
            _check_blocks(source, limit, spec, uri)
        return
    with open(source, "rb") as f:
        if os.fstat(f.fileno()).st_size < limit or not line_delimited(spec, f.read(4096)):
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            _check_blocks(m, limit, spec, uri)


def _check_blocks(data: bytes | mmap.mmap, limit: int, spec: InputSpec, uri: str) -> None:
    for start in range(0, len(data) - limit + 1, limit):
        if data.find(b"\n", start, start + limit) < 0:
            raise ObjectFormatError(
                f"a {spec.format.upper()} line of {limit:,} bytes or more (from byte "
                f"{start:,}): lines are limited to under {limit:,} bytes, a sixteenth of the "
                "memory budget", uri=uri)


def check_width(source: str | bytes, spec: InputSpec, *, uri: str) -> None:
    """Refuse a CSV whose first record (after leading comment lines) has more than
    :data:`MAX_CSV_FIELDS` fields, counted as delimiters (one inside quotes counts too, so
    this errs towards refusing only a header that is absurdly wide anyway). Its line is
    already bounded by :func:`check_lines`."""
    if spec.format != "csv":
        return
    comment = spec.comment.encode() if spec.comment else None
    with open(source, "rb") if isinstance(source, str) else io.BytesIO(source) as f:
        line = f.readline()
        while comment and line.startswith(comment):
            line = f.readline()
    fields = line.count(spec.delimiter.encode()) + 1
    if fields > MAX_CSV_FIELDS:
        raise ObjectFormatError(
            f"a CSV record of {fields:,} fields: at most {MAX_CSV_FIELDS:,} columns are "
            "read", uri=uri)
