"""CSV and JSON inputs: the whole object (or a scan range of it), decompressed, read by polars.

Text formats carry no index, so they take the whole-object path: the object is fetched in
parallel parts into one object-sized buffer, then polars parses it.
"""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import io
import zlib
from typing import Literal

import polars as pl

from ._errors import ObjectFormatError, RequestError

InputFormat = Literal["parquet", "csv", "json"]
Compression = Literal["none", "gzip", "bzip2"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class InputSpec:
    """How to read a source object (the S3 Select ``InputSerialization``)."""

    format: InputFormat = "parquet"
    compression: Compression = "none"
    # CSV
    header: Literal["use", "ignore", "none"] = "use"
    delimiter: str = ","
    quote: str = '"'
    comment: str | None = None
    # JSON: "lines" (one document per line) or "document"
    json_type: Literal["lines", "document"] = "lines"
    # S3 Select's ScanRange: records that start within [start, end] (end inclusive).
    scan_range: tuple[int, int | None] | None = None
    #: Every CSV value is a string, as in S3 Select (``CAST`` to compare as numbers).
    strings_only: bool = True


def decompress(data: bytes, compression: Compression, *, uri: str) -> bytes:
    try:
        if compression == "gzip":
            return gzip.decompress(data)
        if compression == "bzip2":
            return bz2.decompress(data)
    except (OSError, EOFError, ValueError, zlib.error) as e:
        raise ObjectFormatError(f"cannot decompress as {compression}: {e}", uri=uri) from e
    return data


def scan(data: bytes, scan_range: tuple[int, int | None], *, keep_header: bool) -> bytes:
    """The records that start within the range, as S3 Select's ScanRange picks them: a
    record starts at 0 or after a newline; one that starts inside is read to its end."""
    start, end = scan_range
    last = len(data) - 1 if end is None else min(end, len(data) - 1)
    if start == 0:
        begin = 0
    else:
        newline = data.find(b"\n", start - 1)
        begin = len(data) if newline < 0 else newline + 1
    if begin > last:
        body = b""
    else:
        stop = data.find(b"\n", last)
        body = data[begin:len(data) if stop < 0 else stop + 1]
    if keep_header and begin > 0:
        first = data.find(b"\n")
        return (data if first < 0 else data[:first + 1]) + body
    return body


def read_text(data: bytes, spec: InputSpec, *, uri: str) -> pl.DataFrame:
    """Parse a decompressed CSV or JSON object into a frame."""
    if spec.scan_range is not None:
        if spec.compression != "none" or (spec.format == "json" and spec.json_type != "lines"):
            raise RequestError("a scan range applies only to uncompressed CSV and JSON lines",
                               field="ScanRange")
        data = scan(data, spec.scan_range, keep_header=spec.format == "csv"
                    and spec.header != "none")
    try:
        if spec.format == "csv":
            return _read_csv(data, spec)
        if spec.json_type == "lines":
            return pl.read_ndjson(io.BytesIO(data)) if data.strip() else pl.DataFrame()
        return pl.read_json(io.BytesIO(data))
    except (pl.exceptions.PolarsError, ValueError, UnicodeDecodeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ObjectFormatError(f"cannot read as {spec.format.upper()}: {first}",
                                uri=uri) from e


def _read_csv(data: bytes, spec: InputSpec) -> pl.DataFrame:
    has_header = spec.header in ("use", "ignore")
    frame = pl.read_csv(
        io.BytesIO(data), has_header=has_header, separator=spec.delimiter,
        quote_char=spec.quote or None, comment_prefix=spec.comment,
        infer_schema=not spec.strings_only, truncate_ragged_lines=False,
        raise_if_empty=False)
    if spec.header != "use":
        # Headerless (or header ignored): columns are addressed by position, _1, _2, ...
        frame = frame.rename({c: f"_{i + 1}" for i, c in enumerate(frame.columns)})
    return frame
