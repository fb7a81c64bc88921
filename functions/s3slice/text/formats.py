"""CSV and JSON inputs: the whole object (or a scan range of it), decompressed, read by polars.

Text formats carry no index, so they take the whole-object path: the object is fetched in
parallel parts into one object-sized buffer, then polars parses it.

Column types come from every record of the object, as polars infers them reading it whole
(``infer_schema_length=None``): never from the first records only. One exception keeps a
large CSV's parse single-pass: above :data:`CSV_WHOLE_INFERENCE_BYTES` its types come from
the rows of its first :data:`CSV_SAMPLE_BYTES`, and are widened (the object read again with every
row's inference) when a later value does not parse as them; a column empty in those rows
takes every row's inference from the start.

The format comes from the request, else from the key's extension (``.csv``, ``.tsv``,
``.json``, ``.jsonl``, ``.ndjson``, optionally followed by ``.gz``, ``.bz2`` or ``.zst``),
else it is Parquet (whose ``PAR1`` magic the footer parser checks). The compression comes
from the request, else from the data's magic bytes.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import polars as pl
import pyarrow as pa

from s3slice.core.contract import source_format
from s3slice.core.errors import ObjectFormatError, QueryError, RequestError
from s3slice.core.model import Compression, InputSpec
from s3slice.fetch.image import tmp_dir_error
from s3slice.text.bounds import check_lines, check_width, decompressed_chunks


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


def decompress(data: bytes, compression: Compression, *, uri: str,
               limit: int | None = None) -> bytes:
    """``data`` decompressed, refused past ``limit`` bytes (a compression bomb)."""
    if compression == "auto":
        compression = detect_compression(data)
    if compression == "none":
        return data
    return b"".join(decompressed_chunks(pa.py_buffer(data), compression, uri=uri,
                                        limit=limit))


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


def read_text(data: bytes, spec: InputSpec, *, uri: str,
              max_line: int | None = None) -> pl.DataFrame:
    """Parse a decompressed CSV or JSON object into a frame, in the types every record
    gives (a scan range's records too: in the whole object's types)."""
    if max_line is not None:
        check_lines(data, spec, max_line, uri=uri)
        check_width(data, spec, uri=uri)
    if spec.scan_range is not None:
        if spec.compression not in ("none", "auto") or (spec.format == "json"
                                                        and spec.json_type != "lines"):
            raise RequestError("a scan range applies only to uncompressed CSV and JSON lines",
                               field="ScanRange")
        header = spec.format == "csv" and spec.header != "none"
        schema = _whole_schema(data, spec, uri)
        scanned = scan(data, spec.scan_range, keep_header=header)
        if scanned.strip() == scan(data, (len(data), None), keep_header=header).strip():
            # No record starts in the range (a start past the end, say): no rows, in the
            # columns and types of the object.
            return _named(pl.DataFrame(schema=schema), spec)
        return _parse(scanned, spec, uri, schema)
    return _parse(data, spec, uri)


def _whole_schema(data: bytes, spec: InputSpec, uri: str) -> pl.Schema:
    """The columns and types of the whole object (CSV or JSON lines), as polars names them
    (before a headerless CSV's columns are renamed)."""
    try:
        if spec.format == "csv":
            return pl.scan_csv(data, infer_schema_length=None, **_csv_options(spec)
                               ).collect_schema()
        if not data.strip():
            return pl.Schema()
        return pl.scan_ndjson(data, infer_schema_length=None).collect_schema()
    except (pl.exceptions.PolarsError, ValueError, UnicodeDecodeError) as e:
        raise _format_error(e, spec, uri) from e


def _parse(data: bytes, spec: InputSpec, uri: str,
           schema: pl.Schema | None = None) -> pl.DataFrame:
    try:
        if spec.format == "csv":
            return _read_csv(data, spec, schema)
        if schema is not None:  # a scan range's JSON lines
            return (pl.read_ndjson(io.BytesIO(data), schema=schema) if data.strip()
                    else pl.DataFrame(schema=schema))
        return _read_json(data, spec.json_type)
    except (pl.exceptions.PolarsError, ValueError, UnicodeDecodeError) as e:
        raise _format_error(e, spec, uri) from e


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
        return (pl.read_ndjson(io.BytesIO(data), infer_schema_length=None) if data.strip()
                else pl.DataFrame())
    return pl.read_json(io.BytesIO(data), infer_schema_length=None)


def _csv_options(spec: InputSpec) -> dict[str, Any]:
    """polars' CSV options for the request's dialect."""
    return {"has_header": spec.header in ("use", "ignore"), "separator": spec.delimiter,
            "quote_char": spec.quote or None, "comment_prefix": spec.comment,
            "infer_schema": not spec.strings_only, "truncate_ragged_lines": False,
            "raise_if_empty": False}


def _read_csv(data: bytes, spec: InputSpec, schema: pl.Schema | None) -> pl.DataFrame:
    typed: dict[str, Any] = ({"infer_schema_length": None} if schema is None
                             else {"schema": schema})
    return _named(pl.read_csv(io.BytesIO(data), **typed, **_csv_options(spec)), spec)


def _named(frame: pl.DataFrame, spec: InputSpec) -> pl.DataFrame:
    if spec.format == "csv" and spec.header != "use":
        # Headerless (or header ignored): columns are addressed by position, _1, _2, ...
        frame = frame.rename({c: f"_{i + 1}" for i, c in enumerate(frame.columns)})
    return frame


# ------------------------------------------------------------------ large objects, streamed
# A large CSV or JSON-lines object is fetched into a file in the temporary directory
# (decompressed there by streaming when compressed), then scanned lazily by polars: the
# row filter and the projection are applied while the file is parsed in batches, so memory
# holds the result, not the object.
#: A CSV decompressed to more than this takes its types from its first rows (whole-object
#: inference is single-threaded in polars, several times the parallel parse's cost).
CSV_WHOLE_INFERENCE_BYTES = 16 << 20
#: The leading bytes whose rows type a larger CSV (widened if a later value does not parse
#: as them).
CSV_SAMPLE_BYTES = 64 << 10


def streamable(spec: InputSpec) -> bool:
    return spec.scan_range is None


@contextlib.contextmanager
def decompressed_file(source: str | bytes, compression: Compression, directory: str, *,
                      uri: str, limit: int | None = None) -> Iterator[str | bytes]:
    """The decompressed content of ``source`` (a path or the bytes themselves): itself when
    not compressed, else a file in ``directory`` it is decompressed into by streaming,
    refused past ``limit`` bytes."""
    if compression in ("none", "auto"):
        yield source
        return
    fd, out = tempfile.mkstemp(prefix="s3slice-", suffix=".text", dir=directory)
    compressed = source if isinstance(source, str) else pa.py_buffer(source)
    try:
        with os.fdopen(fd, "wb") as dst:
            for chunk in decompressed_chunks(compressed, compression, uri=uri, limit=limit):
                try:
                    dst.write(chunk)
                except OSError as e:
                    raise tmp_dir_error(directory, e) from e
        yield out
    finally:
        with contextlib.suppress(OSError):
            os.unlink(out)


def sampled_schema(source: str | bytes, spec: InputSpec) -> pl.Schema | None:
    """The types a streamed scan of ``source`` may take from its first rows (those whole
    in its first :data:`CSV_SAMPLE_BYTES`), or None for every row's: for a CSV larger than
    :data:`CSV_WHOLE_INFERENCE_BYTES` none of whose columns is empty in those rows (an empty
    column would be typed String, where a later value may make it a number)."""
    if spec.format != "csv" or spec.strings_only:
        return None
    size = len(source) if isinstance(source, bytes) else os.path.getsize(source)
    if size <= CSV_WHOLE_INFERENCE_BYTES:
        return None
    if isinstance(source, bytes):
        head = source[:CSV_SAMPLE_BYTES]
    else:
        with open(source, "rb") as f:
            head = f.read(CSV_SAMPLE_BYTES)
    head = head[:head.rfind(b"\n") + 1]
    try:
        frame = pl.read_csv(io.BytesIO(head), infer_schema_length=None, **_csv_options(spec))
    except (pl.exceptions.PolarsError, ValueError, UnicodeDecodeError):
        return None  # cut inside a quoted line break, say: typed by every row
    if frame.height == 0 or any(c.null_count() == frame.height for c in frame.get_columns()):
        return None
    return frame.schema


def scan_text(path: str | bytes, spec: InputSpec, *, uri: str,
              schema: pl.Schema | None = None) -> pl.LazyFrame:
    """A lazy scan of decompressed CSV or JSON lines, a file or in memory (its schema
    already read: from every record, or a CSV's ``schema`` from its first rows)."""
    try:
        if spec.format == "csv":
            typed: dict[str, Any] = ({"infer_schema_length": None} if schema is None
                                     else {"schema": schema})
            lf = pl.scan_csv(path, **typed, **_csv_options(spec))
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
                lf = pl.scan_ndjson(path, infer_schema_length=None)
                lf.collect_schema()
                return lf
            except pl.exceptions.PolarsError:
                json_type = "document"
    if json_type == "document":
        return pl.read_json(path, infer_schema_length=None).lazy()
    return pl.scan_ndjson(path, infer_schema_length=None)


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
