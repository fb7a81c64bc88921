"""The direct-invoke request contract, parsed and validated into typed values::

    {"source": "s3://b/k" | ["s3://b/k1", ...] | "s3://b/prefix/" | "s3://b/p/*/x-*.csv",
     "sql": "SELECT a, b FROM s3object WHERE a <= 1000 LIMIT 10",
     -- or instead of sql: "columns": ["a", "b"], "filter": "a <= 1000", "limit": 10,
     "output": {"uri": "s3://b/out/", "format": "parquet", "compression": "zstd"},
     "input": {"format": "csv", "header": true, "delimiter": ";"}, "return_rows": false}
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal
from urllib.parse import unquote

from s3slice.core.contract import OUTPUT_FORMATS, OutputFormat, file_format
from s3slice.core.errors import RequestError
from s3slice.core.table import TableSource, parse_table_source

InputFormat = Literal["parquet", "csv", "json"]
Compression = Literal["auto", "none", "gzip", "bzip2", "zstd"]
INPUT_COMPRESSIONS: tuple[Compression, ...] = ("auto", "none", "gzip", "bzip2", "zstd")


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
    # JSON: "lines" (one document per line), "document" (an array of records, or one
    # record), or "auto" (an array when the data starts with "[", else lines)
    json_type: Literal["lines", "document", "auto"] = "lines"
    # S3 Select's ScanRange: records that start within [start, end] (end inclusive); no
    # end: to the object's end; no start: those in the last ``end`` bytes.
    scan_range: tuple[int | None, int | None] | None = None
    #: Every CSV value is a string, as in S3 Select (``CAST`` to compare as numbers).
    strings_only: bool = True


COMPRESSIONS: dict[str, tuple[str, ...]] = {
    "parquet": ("zstd", "snappy", "gzip", "lz4", "brotli", "uncompressed"),
    "csv": ("none", "gzip"),
    "json": ("none", "gzip"),
}
DEFAULT_COMPRESSION = {"parquet": "zstd", "csv": "none", "json": "none"}
MAX_SQL_LENGTH = 64 * 1024
REQUEST_FIELDS = frozenset(
    {"source", "sql", "columns", "filter", "limit", "output", "input", "return_rows"})
INPUT_FIELDS = frozenset({"format", "compression", "header", "delimiter", "quote", "comment",
                          "json_type", "infer_types"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class ObjectRef:
    """One S3 object; ``size`` and ``etag`` are filled in when the caller already knows them."""

    bucket: str
    key: str
    size: int | None = None
    etag: str | None = None

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


GLOB_CHARS = "*?["


def is_glob(key: str) -> bool:
    return any(c in key for c in GLOB_CHARS)


def literal_prefix(pattern: str) -> str:
    """What to list a glob under: its directories before the first wildcard's segment.

    An object store lists by whole path segments (obstore's ``a/b-`` lists ``a/b-/``), so
    the prefix ends at the last ``/`` before the first wildcard, never inside a segment.
    """
    cut = min((i for i in (pattern.find(c) for c in GLOB_CHARS) if i >= 0), default=len(pattern))
    return pattern[:pattern.rfind("/", 0, cut) + 1]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SourceSpec:
    """What a request names: objects, prefixes to be listed, or glob patterns."""

    bucket: str
    key: str  # a prefix when ``is_prefix``, a pattern when ``is_glob``

    @property
    def is_prefix(self) -> bool:
        return self.key == "" or self.key.endswith("/")

    @property
    def is_glob(self) -> bool:
        return is_glob(self.key)

    @property
    def listed(self) -> str:
        """The key prefix every object this source can name starts with."""
        return literal_prefix(self.key) if self.is_glob else self.key

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Query:
    columns: tuple[str, ...] | None = None
    filter: str | None = None
    sql: str | None = None
    limit: int | None = None

    def canonical(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclasses.dataclass(frozen=True, kw_only=True)
class OutputSpec:
    uri: str
    format: OutputFormat = "parquet"
    compression: str = "zstd"
    #: Whether the request named the compression. A Parquet answer copied without decoding
    #: keeps the source's codec unless one was named (and differs).
    compression_given: bool = dataclasses.field(default=False, compare=False)

    @functools.cached_property
    def _location(self) -> tuple[str, str]:  # parsed once, on first use
        return parse_s3_uri(self.uri, field="output.uri")

    @property
    def bucket(self) -> str:
        return self._location[0]

    @property
    def prefix(self) -> str:
        return self._location[1]

    @property
    def file_key(self) -> str | None:
        """The exact key of a URI naming one object (``.../result.parquet``), else None."""
        return self.prefix if file_format(self.prefix) is not None else None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Request:
    sources: tuple[SourceSpec | ObjectRef | TableSource, ...]
    query: Query
    output: OutputSpec | None = None
    return_rows: bool = False
    #: How to read the sources; Parquet when not given.
    input: InputSpec | None = None

    def query_hash(self) -> str:
        """A stable hash of what determines the result's content (not where it goes)."""
        return self._query_hash

    @functools.cached_property
    def _query_hash(self) -> str:  # once per request, not once per object's output key
        material = {"query": self.query.canonical(),
                    "format": self.output.format if self.output else None,
                    "compression": self.output.compression if self.output else None}
        if self.input is not None:
            material["input"] = dataclasses.asdict(self.input)
        blob = json.dumps(material, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def parse_s3_uri(uri: object, *, field: str) -> tuple[str, str]:
    """``s3://bucket/key`` → (bucket, key). The key may be empty (``s3://bucket/``, the
    whole bucket) or a prefix, and is taken exactly as written (``//`` and ``..`` too)."""
    if not isinstance(uri, str):
        raise RequestError(f"expected an s3:// URI string, got {type(uri).__name__}", field=field)
    if not uri.startswith("s3://"):
        raise RequestError(f"expected an s3:// URI, got {uri!r}", field=field)
    bucket, slash, key = uri[5:].partition("/")
    if not bucket or any(c in bucket for c in " \\?#"):
        raise RequestError(f"no valid bucket in {uri!r}", field=field)
    if not slash:
        raise RequestError(f"{uri!r} names no key: give s3://{bucket}/ for the whole bucket",
                           field=field)
    return bucket, key


def _source(value: object, field: str) -> SourceSpec:
    bucket, key = parse_s3_uri(value, field=field)
    return SourceSpec(bucket=bucket, key=key)


def _parse_sources(raw: object) -> tuple[SourceSpec | TableSource, ...]:
    if raw is None:
        raise RequestError("is required", field="source")
    if isinstance(raw, str):
        return (_source(raw, "source"),)
    if isinstance(raw, Mapping) and "iceberg" in raw:
        return (parse_table_source(raw),)
    if isinstance(raw, Sequence) and not isinstance(raw, bytes | bytearray):
        if not raw:
            raise RequestError("must name at least one object", field="source")
        return tuple(_source(v, f"source[{i}]") for i, v in enumerate(raw))
    raise RequestError(f"expected a URI or a list of URIs, got {type(raw).__name__}",
                       field="source")


def _parse_columns(raw: object) -> tuple[str, ...] | None:
    if raw is None:
        return None
    listed = not isinstance(raw, str)  # a list may name a column '', as Parquet allows
    raw = [c.strip() for c in raw.split(",")] if isinstance(raw, str) else raw
    if not isinstance(raw, Sequence) or isinstance(raw, bytes | bytearray):
        raise RequestError(f"expected a list of column names, got {type(raw).__name__}",
                           field="columns")
    names: list[str] = []
    for i, c in enumerate(raw):
        if not isinstance(c, str) or not (c or listed):
            raise RequestError(f"expected a non-empty string, got {c!r}", field=f"columns[{i}]")
        names.append(c)
    if not names:
        raise RequestError("must name at least one column (omit it for all columns)",
                           field="columns")
    if len(set(names)) != len(names):
        raise RequestError(f"names a column twice: {names}", field="columns")
    return tuple(names)


#: The most rows a result can hold (polars counts rows in 32 bits): a larger limit is this.
MAX_ROWS = 2**32 - 1


def _parse_limit(raw: object) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise RequestError(f"expected a whole number, got {raw!r}", field="limit")
    if raw < 0:
        raise RequestError(f"must not be negative, got {raw}", field="limit")
    return min(raw, MAX_ROWS)


def _parse_text(raw: object, field: str) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw.strip():
        raise RequestError(f"expected non-empty text, got {raw!r}", field=field)
    if len(raw) > MAX_SQL_LENGTH:
        raise RequestError(f"is {len(raw)} characters; at most {MAX_SQL_LENGTH} are accepted",
                           field=field)
    return raw


def parse_query(raw: Mapping[str, Any]) -> Query:
    sql = _parse_text(raw.get("sql"), "sql")
    columns = _parse_columns(raw.get("columns"))
    filter_ = _parse_text(raw.get("filter"), "filter")
    limit = _parse_limit(raw.get("limit"))
    if sql is not None and (columns is not None or filter_ is not None or limit is not None):
        raise RequestError("give either sql, or columns/filter/limit, not both", field="sql")
    return Query(columns=columns, filter=filter_, sql=sql, limit=limit)


def parse_output(raw: object, *, field: str = "output") -> OutputSpec | None:
    if raw is None:
        return None
    if isinstance(raw, str):
        raw = {"uri": raw}
    if not isinstance(raw, Mapping):
        raise RequestError(f"expected an object with 'uri', got {type(raw).__name__}", field=field)
    unknown = set(raw) - {"uri", "format", "compression"}
    if unknown:
        raise RequestError(f"unknown field(s) {sorted(unknown)}", field=field)
    uri = raw.get("uri")
    key = parse_s3_uri(uri, field=f"{field}.uri")[1]
    assert isinstance(uri, str)
    named = file_format(key)  # a URI naming one object: its extension says the format
    fmt = raw.get("format", named[0] if named else "parquet")
    if fmt not in OUTPUT_FORMATS:
        raise RequestError(f"must be one of {', '.join(OUTPUT_FORMATS)}, got {fmt!r}",
                           field=f"{field}.format")
    if named is not None and named[0] != fmt:
        raise RequestError(f"{uri} names a {named[0]} object, but the format is {fmt}: "
                           f"name the key with its format's extension", field=f"{field}.uri")
    default = named[1] if named is not None and named[1] else DEFAULT_COMPRESSION[fmt]
    compression = raw.get("compression", default)
    if compression not in COMPRESSIONS[fmt]:
        raise RequestError(f"for {fmt} must be one of {', '.join(COMPRESSIONS[fmt])}, "
                           f"got {compression!r}", field=f"{field}.compression")
    return OutputSpec(uri=uri, format=fmt, compression=compression,
                      compression_given="compression" in raw)


def _one_of(raw: Mapping[str, Any], key: str, choices: Sequence[str], default: str) -> str:
    value = raw.get(key, default)
    if value not in choices:
        raise RequestError(f"must be one of {', '.join(choices)}, got {value!r}",
                           field=f"input.{key}")
    assert isinstance(value, str)
    return value


def one_char(raw: Mapping[str, Any], name: str, default: str, field: str) -> str:
    """``raw[name]`` (else ``default``), which must be a single character."""
    value = raw.get(name, default)
    if not isinstance(value, str) or len(value) != 1:
        raise RequestError(f"expected one character, got {value!r}", field=f"{field}.{name}")
    return value


def parse_input(raw: object) -> InputSpec | None:
    """The ``input`` field: how to read the sources. Without it, the format comes from each
    key's extension (else Parquet) and the compression from the data's magic bytes."""
    if raw is None:
        return None
    if isinstance(raw, str):
        raw = {"format": raw}
    if not isinstance(raw, Mapping):
        raise RequestError(f"expected an object with 'format', got {type(raw).__name__}",
                           field="input")
    unknown = set(raw) - INPUT_FIELDS
    if unknown:
        raise RequestError(f"unknown field(s) {sorted(unknown)}; expected some of "
                           f"{sorted(INPUT_FIELDS)}", field="input")
    fmt = _one_of(raw, "format", ("parquet", "csv", "json"), "")
    compression = _one_of(raw, "compression", INPUT_COMPRESSIONS, "auto")
    if fmt == "parquet":
        if set(raw) - {"format", "compression"} or compression not in ("auto", "none"):
            raise RequestError("Parquet takes no other input options (it is compressed "
                               "inside)", field="input")
        return InputSpec(format="parquet")
    header = raw.get("header", True)
    if isinstance(header, bool):
        header = "use" if header else "none"
    if header not in ("use", "ignore", "none"):
        raise RequestError(f"must be true, false, 'use', 'ignore' or 'none', got {header!r}",
                           field="input.header")
    infer = raw.get("infer_types", True)
    if not isinstance(infer, bool):
        raise RequestError(f"expected true or false, got {infer!r}", field="input.infer_types")
    comment = None if raw.get("comment") is None else one_char(raw, "comment", "#", "input")
    return InputSpec(format=fmt, compression=compression,  # type: ignore[arg-type]
                     header=header, delimiter=one_char(raw, "delimiter", ",", "input"),
                     quote=one_char(raw, "quote", '"', "input"), comment=comment,
                     json_type=_one_of(raw, "json_type", ("auto", "lines", "document"),
                                       "auto"),  # type: ignore[arg-type]
                     strings_only=not infer)


def parse_request(raw: object, *, default_output: OutputSpec | None = None) -> Request:
    """Validate a direct-invoke request; every problem names its field."""
    if not isinstance(raw, Mapping):
        raise RequestError(f"a request must be a JSON object, got {type(raw).__name__}")
    unknown = set(raw) - REQUEST_FIELDS
    if unknown:
        raise RequestError(f"unknown field(s) {sorted(unknown)}; expected some of "
                           f"{sorted(REQUEST_FIELDS)}")
    return_rows = raw.get("return_rows", False)
    if not isinstance(return_rows, bool):
        raise RequestError(f"expected true or false, got {return_rows!r}", field="return_rows")
    output = parse_output(raw.get("output")) or default_output
    sources = _parse_sources(raw.get("source"))
    if output is not None:
        _check_disjoint(sources, output)
    return Request(sources=sources, query=parse_query(raw), output=output,
                   return_rows=return_rows, input=parse_input(raw.get("input")))


def _check_disjoint(sources: Sequence[SourceSpec | TableSource], output: OutputSpec) -> None:
    """Refuse an output that a source would read back (the recursion guard)."""
    for i, src in enumerate(sources):
        if src.bucket != output.bucket:
            continue
        field = "source" if len(sources) == 1 else f"source[{i}]"
        if (src.is_prefix or src.is_glob) and output.prefix.startswith(src.listed):
            raise RequestError(f"{output.uri} lies inside the source prefix {src.uri}; "
                               "results would be read back as input", field="output.uri")
        if src.listed.startswith(output.prefix):
            raise RequestError(f"{src.uri} lies under the output location {output.uri}; "
                               "outputs are never read as input", field=field)


def object_ref(bucket: str, key: str, *, size: object = None, etag: object = None,
               url_encoded: bool = False) -> ObjectRef:
    """An object named by an event (keys in S3 notifications are URL-encoded)."""
    if url_encoded:
        key = unquote(key.replace("+", " "))
    return ObjectRef(bucket=bucket, key=key,
                     size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                     etag=f'"{etag.strip(chr(34))}"' if isinstance(etag, str) and etag.strip('"')
                     else None)
