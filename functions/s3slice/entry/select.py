"""The S3 Select request shape, so a migrating caller swaps ``select_object_content``
for an invoke with the same parameters.

::

    {"Bucket": "b", "Key": "k", "Expression": "SELECT s.a FROM S3Object s WHERE ...",
     "ExpressionType": "SQL",
     "InputSerialization": {"CSV": {"FileHeaderInfo": "USE", "FieldDelimiter": ",",
                                    "QuoteCharacter": "\\"", "Comments": "#"},
                            "CompressionType": "GZIP"}        -- or "JSON": {"Type": "LINES"}
                                                              -- or "Parquet": {}
     "OutputSerialization": {"CSV": {"FieldDelimiter": ",", "RecordDelimiter": "\\n",
                                     "QuoteFields": "ASNEEDED"}} -- or "JSON": {...}
     "ScanRange": {"Start": 0, "End": 1048575},
     "output": {"uri": "s3://b/out/"}}                        -- optional: write, not inline

The answer is ``{"Payload": "<records as S3 Select serializes them>", "Stats":
{"BytesScanned", "BytesProcessed", "BytesReturned"}, "stats": {...}}``; with ``output`` the
records are written to S3 instead and ``outputs`` names the object.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import polars as pl

from s3slice.answer.textual import json_records, nested_as_json_text, textual
from s3slice.answer.write import MAX_INLINE_BYTES, output_key, put_all, timed_write
from s3slice.core.errors import OutputError, RequestError, ResultTooLargeError, contained
from s3slice.core.model import (
    Compression,
    InputSpec,
    ObjectRef,
    OutputSpec,
    Query,
    Request,
    one_char,
    parse_output,
)
from s3slice.engine.engine import Engine
from s3slice.engine.results import Stats
from s3slice.entry.observe import record_stats

SELECT_FIELDS = frozenset({"Bucket", "Key", "Expression", "ExpressionType",
                           "InputSerialization", "OutputSerialization", "ScanRange",
                           "RequestProgress", "output"})
_COMPRESSIONS: dict[str, Compression] = {"NONE": "none", "GZIP": "gzip", "BZIP2": "bzip2"}


def _mapping(raw: object, field: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise RequestError(f"expected an object, got {type(raw).__name__}", field=field)
    return raw


def parse_input(raw: object) -> InputSpec:
    field = "InputSerialization"
    spec = _mapping(raw, field)
    compression = spec.get("CompressionType", "NONE")
    if compression not in _COMPRESSIONS:
        raise RequestError(f"must be one of {', '.join(_COMPRESSIONS)}, got {compression!r}",
                           field=f"{field}.CompressionType")
    formats = [k for k in ("CSV", "JSON", "Parquet") if k in spec]
    if len(formats) != 1:
        raise RequestError("give exactly one of CSV, JSON or Parquet", field=field)
    fmt = formats[0]
    options = _mapping(spec[fmt] or {}, f"{field}.{fmt}")
    if fmt == "Parquet":
        if compression != "NONE":
            raise RequestError("Parquet is compressed inside; use NONE",
                               field=f"{field}.CompressionType")
        return InputSpec(format="parquet")
    if fmt == "JSON":
        kind = options.get("Type", "DOCUMENT")
        if kind not in ("DOCUMENT", "LINES"):
            raise RequestError(f"must be DOCUMENT or LINES, got {kind!r}",
                               field=f"{field}.JSON.Type")
        return InputSpec(format="json", json_type="lines" if kind == "LINES" else "document",
                         compression=_COMPRESSIONS[compression])
    where = f"{field}.CSV"
    header = options.get("FileHeaderInfo", "NONE")
    if header not in ("USE", "IGNORE", "NONE"):
        raise RequestError(f"must be USE, IGNORE or NONE, got {header!r}",
                           field=f"{where}.FileHeaderInfo")
    record = options.get("RecordDelimiter", "\n")
    if record not in ("\n", "\r\n"):
        raise RequestError(f"only \\n and \\r\\n are supported, got {record!r}",
                           field=f"{where}.RecordDelimiter")
    quote = one_char(options, "QuoteCharacter", '"', where)
    escape = options.get("QuoteEscapeCharacter", quote)
    if escape != quote:
        raise RequestError("only a doubled quote character escapes a quote",
                           field=f"{where}.QuoteEscapeCharacter")
    comment = options.get("Comments")
    if comment is not None:
        comment = one_char(options, "Comments", "#", where)
    return InputSpec(format="csv", header=header.lower(), compression=_COMPRESSIONS[compression],
                     delimiter=one_char(options, "FieldDelimiter", ",", where), quote=quote,
                     comment=comment)


def parse_scan_range(raw: object) -> tuple[int | None, int | None] | None:
    """(Start, End) as S3 Select reads them: both, the bytes Start to End inclusive; Start
    only, from Start to the end; End only, the last End bytes (Start None)."""
    if raw is None:
        return None
    spec = _mapping(raw, "ScanRange")
    start, end = spec.get("Start"), spec.get("End")
    for name, value in (("Start", start), ("End", end)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 0):
            raise RequestError(f"expected a non-negative integer, got {value!r}",
                               field=f"ScanRange.{name}")
    if start is not None and end is not None and end < start:
        raise RequestError(f"End {end} is before Start {start}", field="ScanRange")
    return (0 if start is None and end is None else start), end


def s3select_named(frame: pl.DataFrame, expression: str) -> pl.DataFrame:
    """The records' columns named as S3 Select names them: an unnamed expression by its
    position (``SELECT COUNT(*)`` is ``_1``), where polars names it after a column."""
    from s3slice.query.sqlglot.sql import s3select_names  # sqlglot: imported by SQL requests only
    names = s3select_names(expression)
    if names is None or len(names) != frame.width or len(set(names)) != len(names):
        return frame
    return frame.select(pl.nth(i).alias(name) for i, name in enumerate(names))


def serialize_records(frame: pl.DataFrame, raw: object) -> tuple[bytes, str]:
    """Records as S3 Select writes them: CSV without a header, or one JSON object per
    record, each followed by the record delimiter, values by :mod:`s3slice.core.values`' rule
    (a record or a list in a CSV field is its JSON text, as S3 Select writes it). Returns
    the bytes and the format."""
    field = "OutputSerialization"
    spec = _mapping(raw, field)
    formats = [k for k in ("CSV", "JSON") if k in spec]
    if len(formats) != 1:
        raise RequestError("give exactly one of CSV or JSON", field=field)
    options = _mapping(spec[formats[0]] or {}, f"{field}.{formats[0]}")
    delimiter = options.get("RecordDelimiter", "\n")
    if not isinstance(delimiter, str) or not 1 <= len(delimiter) <= 2:
        raise RequestError(f"expected one or two characters, got {delimiter!r}",
                           field=f"{field}.{formats[0]}.RecordDelimiter")
    if formats[0] == "JSON":
        # NaN and infinities as strings, binary as base64 (json_records), one record per
        # row: split at "\n" only, never at U+2028 and the like inside a value.
        return "".join(line + delimiter for line in json_records(frame)).encode(), "json"
    where = f"{field}.CSV"
    quote_fields = options.get("QuoteFields", "ASNEEDED")
    if quote_fields not in ("ASNEEDED", "ALWAYS"):
        raise RequestError(f"must be ASNEEDED or ALWAYS, got {quote_fields!r}",
                           field=f"{where}.QuoteFields")
    buf = io.BytesIO()
    frame = nested_as_json_text(textual(frame))
    frame.write_csv(buf, include_header=False,
                    separator=one_char(options, "FieldDelimiter", ",", where),
                    quote_char=one_char(options, "QuoteCharacter", '"', where),
                    line_terminator=delimiter,
                    quote_style="always" if quote_fields == "ALWAYS" else "necessary")
    return buf.getvalue(), "csv"


def run_select(event: Mapping[str, Any], *, engine: Engine) -> dict[str, Any]:
    unknown = set(event) - SELECT_FIELDS
    if unknown:
        raise RequestError(f"unknown field(s) {sorted(unknown)} in an S3 Select request")
    bucket, key = event.get("Bucket"), event.get("Key")
    for name, value in (("Bucket", bucket), ("Key", key)):
        if not isinstance(value, str) or not value:
            raise RequestError(f"expected a non-empty string, got {value!r}", field=name)
    assert isinstance(bucket, str)
    assert isinstance(key, str)
    if event.get("ExpressionType", "SQL") != "SQL":
        raise RequestError(f"only SQL is supported, got {event.get('ExpressionType')!r}",
                           field="ExpressionType")
    expression = event.get("Expression")
    if not isinstance(expression, str) or not expression.strip():
        raise RequestError("expected SQL text", field="Expression")
    spec = parse_input(event.get("InputSerialization"))
    scan_range = parse_scan_range(event.get("ScanRange"))
    if scan_range is not None:
        if spec.format == "parquet":
            raise RequestError("a scan range applies only to CSV and JSON lines",
                               field="ScanRange")
        spec = InputSpec(**{**spec.__dict__, "scan_range": scan_range})
    output = parse_output(event.get("output"))
    if output is not None and output.bucket == bucket and key.startswith(output.prefix):
        # The recursion guard of a direct request (core.model's _check_disjoint).
        raise RequestError(f"s3://{bucket}/{key} lies under the output location "
                           f"{output.uri}; outputs are never read as input", field="output.uri")
    request = Request(sources=(ObjectRef(bucket=bucket, key=key),),
                      query=Query(sql=expression), input=spec)
    result = engine.read(request)
    with contained(lambda e: OutputError(f"cannot serialize the records: {e}"),
                   native=(pl.exceptions.PolarsError,)):
        payload, fmt = serialize_records(s3select_named(result.frame, expression),
                                         event.get("OutputSerialization"))
    if output is None:
        if len(payload) > MAX_INLINE_BYTES:
            raise ResultTooLargeError(
                f"the records are {len(payload)} bytes; at most {MAX_INLINE_BYTES} are "
                "returned inline. Give an output location", field="OutputSerialization")
        record_stats(result.stats)
        return {**_answer(result.stats, len(payload)), "Payload": payload.decode()}
    source = request.sources[0]
    assert isinstance(source, ObjectRef)
    target = OutputSpec(uri=output.uri, format="csv" if fmt == "csv" else "json",
                        compression="none")
    out_key = output_key(target, request, source)

    def write() -> list[dict[str, Any]]:
        put_all(engine, target.bucket, [(out_key, lambda: payload)])
        return [{"uri": f"s3://{target.bucket}/{out_key}", "rows": result.frame.height,
                 "bytes": len(payload), "format": fmt}]
    outputs, stats = timed_write(engine, result, write)
    record_stats(stats)
    return {**_answer(stats, len(payload)), "outputs": outputs}


def _answer(stats: Stats, returned: int) -> dict[str, Any]:
    """S3 Select's ``Stats`` and the service's own."""
    return {"Stats": {"BytesScanned": stats.bytes_fetched, "BytesProcessed": stats.needed_bytes,
                      "BytesReturned": returned},
            "stats": stats.to_dict()}
