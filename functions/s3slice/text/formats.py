"""CSV and JSON inputs: the whole object (or a scan range of it), decompressed, read by polars.

Text formats carry no index, so they take the whole-object path: the object is fetched in
parallel parts into one object-sized buffer, then polars parses it.

The format comes from the request, else from the key's extension (``.csv``, ``.tsv``,
``.json``, ``.jsonl``, ``.ndjson``, optionally followed by ``.gz``, ``.bz2`` or ``.zst``),
else it is Parquet (whose ``PAR1`` magic the footer parser checks). The compression comes
from the request, else from the data's magic bytes.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import os
import tempfile
import zlib
from collections.abc import Iterator
from typing import Literal

import polars as pl
import pyarrow as pa

from s3slice._errors import ObjectFormatError, QueryError, RequestError
from s3slice._model import Compression, InputSpec
from s3slice.contract import source_format
from s3slice.fetch.image import tmp_dir_error


def input_for_key(key: str, spec: InputSpec | None) -> InputSpec:
    """The spec to read ``key`` with: the request's, else one from the key's extension
    (compression is then detected from the data), else Parquet."""
    if spec is not None:
        return spec
    fmt, name = source_format(key)
    if fmt == "parquet":
        return InputSpec(format="parquet")
    return InputSpec(format=fmt, compression="auto",  # type: ignore[arg-type]
                     strings_only=False, json_type="auto",
                     delimiter="\t" if name.endswith(".tsv") else ",")


#: Leading bytes of each compressed stream (RFC 1952, bzip2, RFC 8878).
MAGIC: tuple[tuple[bytes, Compression], ...] = (
    (b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\x28\xb5\x2f\xfd", "zstd"))


def detect_compression(data: bytes) -> Compression:
    """The compression the data's magic bytes show, or "none"."""
    for magic, name in MAGIC:
        if data.startswith(magic):
            return name
    return "none"


def decompress(data: bytes, compression: Compression, *, uri: str) -> bytes:
    if compression == "auto":
        compression = detect_compression(data)
    try:
        if compression == "gzip":
            return gzip.decompress(data)
        if compression == "bzip2":
            return bz2.decompress(data)
        if compression == "zstd":
            # pyarrow's zstd stream (Python's own zstd arrives only in 3.14).
            with pa.CompressedInputStream(pa.BufferReader(data), "zstd") as stream:
                return bytes(stream.read())
    except (OSError, EOFError, ValueError, zlib.error, pa.ArrowException) as e:
        raise ObjectFormatError(f"cannot decompress as {compression}: {e}", uri=uri) from e
    return data


def scan(data: bytes, scan_range: tuple[int | None, int | None], *,
         keep_header: bool) -> bytes:
    """The records that start within the range, as S3 Select's ScanRange picks them: a
    record starts at 0 or after a newline; one that starts inside is read to its end. A
    range with no start is the last ``end`` bytes (AWS: "End only: the last N bytes")."""
    start, end = scan_range
    if start is None:
        start, end = max(0, len(data) - (end or 0)), None
        if not scan_range[1]:  # the last 0 bytes hold no record
            start = len(data)
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
        if spec.compression not in ("none", "auto") or (spec.format == "json"
                                                        and spec.json_type != "lines"):
            raise RequestError("a scan range applies only to uncompressed CSV and JSON lines",
                               field="ScanRange")
        header = spec.format == "csv" and spec.header != "none"
        scanned = scan(data, spec.scan_range, keep_header=header)
        if scanned.strip() == scan(data, (len(data), None), keep_header=header).strip():
            # No record starts in the range (a start past the end, say): no rows, in the
            # columns and types of the object's first record.
            return _parse(_first_records(data, 2 if header else 1), spec, uri).clear()
        data = scanned
    return _parse(data, spec, uri)


def _parse(data: bytes, spec: InputSpec, uri: str) -> pl.DataFrame:
    try:
        if spec.format == "csv":
            return _read_csv(data, spec)
        return _read_json(data, spec.json_type)
    except (pl.exceptions.PolarsError, ValueError, UnicodeDecodeError) as e:
        raise _format_error(e, spec, uri) from e


def _first_records(data: bytes, count: int) -> bytes:
    """The first ``count`` lines of ``data`` (the header and a record, or a record)."""
    end = -1
    for _ in range(count):
        end = data.find(b"\n", end + 1)
        if end < 0:
            return data
    return data[:end + 1]


def _read_json(data: bytes, json_type: str) -> pl.DataFrame:
    if json_type == "auto":
        if data.lstrip()[:1] == b"[":
            json_type = "document"
        else:
            try:
                return _read_json(data, "lines")
            except pl.exceptions.PolarsError:
                return _read_json(data, "document")  # one record over several lines
    if json_type == "lines":
        return pl.read_ndjson(io.BytesIO(data)) if data.strip() else pl.DataFrame()
    return pl.read_json(io.BytesIO(data))


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


# ------------------------------------------------------------------ large objects, streamed
# A large CSV or JSON-lines object is fetched into a file in the temporary directory
# (decompressed there by streaming when compressed), then scanned lazily by polars: the
# row filter and the projection are applied while the file is parsed in batches, so memory
# holds the result, not the object.
_STREAM_CHUNK = 8 << 20
_PYARROW_CODECS: dict[str, Literal["gzip", "bz2", "zstd"]] = {
    "gzip": "gzip", "bzip2": "bz2", "zstd": "zstd"}


def streamable(spec: InputSpec) -> bool:
    return spec.scan_range is None


@contextlib.contextmanager
def decompressed_file(source: str | bytes, compression: Compression, directory: str, *,
                      uri: str) -> Iterator[str | bytes]:
    """The decompressed content of ``source`` (a path or the bytes themselves): itself when
    not compressed, else a file in ``directory`` it is decompressed into by streaming."""
    if compression in ("none", "auto"):
        yield source
        return
    fd, out = tempfile.mkstemp(prefix="s3slice-", suffix=".text", dir=directory)
    compressed = source if isinstance(source, str) else pa.py_buffer(source)
    try:
        with os.fdopen(fd, "wb") as dst, \
                pa.input_stream(compressed, compression=_PYARROW_CODECS[compression]) as src:
            while True:
                try:
                    chunk = src.read(_STREAM_CHUNK)
                except (OSError, EOFError, ValueError, pa.ArrowException) as e:
                    raise ObjectFormatError(f"cannot decompress as {compression}: {e}",
                                            uri=uri) from e
                if not chunk:
                    break
                try:
                    dst.write(chunk)
                except OSError as e:
                    raise tmp_dir_error(directory, e) from e
        yield out
    finally:
        with contextlib.suppress(OSError):
            os.unlink(out)


def scan_text(path: str | bytes, spec: InputSpec, *, uri: str) -> pl.LazyFrame:
    """A lazy scan of decompressed CSV or JSON lines, a file or in memory (its schema
    already read)."""
    try:
        if spec.format == "csv":
            lf = pl.scan_csv(
                path, has_header=spec.header in ("use", "ignore"), separator=spec.delimiter,
                quote_char=spec.quote or None, comment_prefix=spec.comment,
                infer_schema=not spec.strings_only, truncate_ragged_lines=False,
                raise_if_empty=False)
            if spec.header != "use":
                names = lf.collect_schema().names()
                lf = lf.rename({c: f"_{i + 1}" for i, c in enumerate(names)})
        else:
            lf = _scan_json(path, spec.json_type)
        lf.collect_schema()
    except (pl.exceptions.PolarsError, ValueError, UnicodeDecodeError) as e:
        raise _format_error(e, spec, uri) from e
    return lf


def _scan_json(path: str | bytes, json_type: str) -> pl.LazyFrame:
    """JSON lines are scanned lazily; a JSON document (an array, or one record over several
    lines) is parsed whole."""
    if json_type == "auto":
        if isinstance(path, bytes):
            head = path[:4096].lstrip()
        else:
            with open(path, "rb") as f:
                head = f.read(4096).lstrip()
        if head[:1] == b"[":
            json_type = "document"
        else:
            try:
                lf = pl.scan_ndjson(path)
                lf.collect_schema()
                return lf
            except pl.exceptions.PolarsError:
                json_type = "document"
    if json_type == "document":
        return pl.read_json(path).lazy()
    return pl.scan_ndjson(path)


def collect_text(lf: pl.LazyFrame, spec: InputSpec, *, uri: str,
                 streaming: bool = False) -> pl.DataFrame:
    """Run a scan: a parse failure is the object's fault, anything else the query's."""
    try:
        return lf.collect(engine="streaming" if streaming else "auto")
    except (pl.exceptions.ComputeError, pl.exceptions.NoDataError, UnicodeDecodeError) as e:
        raise _format_error(e, spec, uri) from e
    except pl.exceptions.PolarsError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise QueryError(f"the query cannot run on this data: {first}") from e


def _format_error(e: BaseException, spec: InputSpec, uri: str) -> ObjectFormatError:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if spec.format == "csv" and "more fields" in first:
        first += (f" (a record has more fields than the header: is {spec.delimiter!r} the "
                  "delimiter, and is each field holding it quoted? give the delimiter as "
                  "input.delimiter, or --delimiter)")
    return ObjectFormatError(f"cannot read as {spec.format.upper()}: {first}", uri=uri)
