"""Writing a request's answer: serialization, deterministic keys, inline rows, uploads.

An output's key is derived from its source's key (extension included) and a hash of the
query and the source's bucket, so a retried invocation overwrites its earlier output
instead of adding a second one, and two sources never share an output. Outputs are
written only after every object has been read; if one write fails, those already written
by this invocation are deleted, so no partial result is left behind.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from s3slice.answer.textual import json_records, nested_as_json_text, non_finite_rows, textual
from s3slice.core.cost import cost
from s3slice.core.errors import OutputError, RequestError, ResultTooLargeError, contained
from s3slice.core.model import ObjectRef, OutputSpec, Request
from s3slice.core.values import patched
from s3slice.engine.engine import Engine
from s3slice.engine.results import ReadResult, Stats
from s3slice.readers.base import Timings

# Lambda's synchronous response limit is 6 MB; rows returned inline stay well under it.
MAX_INLINE_BYTES = 5 * 1024 * 1024
EXTENSIONS = {"parquet": "parquet", "csv": "csv", "json": "ndjson"}


def serialize(frame: pl.DataFrame, output: OutputSpec) -> bytes:
    """The output object's bytes; CSV and NDJSON written by :mod:`s3slice.core.values`' rule
    (a nested value in a CSV field is its JSON text)."""
    buf = io.BytesIO()
    if output.format == "parquet":
        _check_parquet_holds(frame.schema)
        frame.write_parquet(buf, compression=output.compression)  # type: ignore[arg-type]
        return buf.getvalue()
    frame = textual(frame)
    if output.format == "csv":
        nested_as_json_text(frame).write_csv(buf)
    elif non_finite_rows(frame):
        buf.write("".join(line + "\n" for line in json_records(frame)).encode())
    else:  # as polars writes it, without a copy per line
        frame.write_ndjson(buf)
    data = buf.getvalue()
    return gzip.compress(data, mtime=0) if output.compression == "gzip" else data


def _empty_structs(name: str, dtype: object) -> list[str]:
    """The paths, under ``name``, of struct types with no fields (a JSON ``{}``)."""
    if isinstance(dtype, pl.Struct):
        if not dtype.fields:
            return [name]
        return [p for f in dtype.fields for p in _empty_structs(f"{name}.{f.name}", f.dtype)]
    if isinstance(dtype, pl.List | pl.Array):
        return _empty_structs(f"{name}[]", dtype.inner)
    return []


def _check_parquet_holds(schema: pl.Schema) -> None:
    """Parquet has no group without fields: a struct column with none (read from JSON's
    ``{}``) is refused by name before anything is written, where polars' writer would fail
    with no column named."""
    empty = [p for name, dtype in schema.items() for p in _empty_structs(name, dtype)]
    if empty:
        raise OutputError(f"column {empty[0]!r} is a struct with no fields, which Parquet "
                          "cannot hold: leave it out, or write the result as json or csv")


def output_key(output: OutputSpec, request: Request, source: ObjectRef | None) -> str:
    """``<prefix><source key>.<hash of query and source bucket>.<ext>``, or for a result
    combined from several objects ``<prefix>combined.<hash of query and sources>.<ext>``.

    The source key keeps its extension (``x/data.csv`` and ``x/data.parquet`` are two
    outputs) and the hash covers its bucket (``s3://a/k`` and ``s3://b/k`` are two too),
    so distinct sources never share a key.
    """
    if output.file_key is not None:  # the URI names the one object to write
        return output.file_key
    ext = EXTENSIONS[output.format]
    if output.compression == "gzip" and output.format != "parquet":
        ext += ".gz"
    prefix = output.prefix
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    if source is not None:
        return f"{prefix}{source.key}.{_digest(request.query_hash(), source.bucket)}.{ext}"
    sources = sorted(s.uri for s in request.sources)
    return f"{prefix}combined.{_digest(request.query_hash(), *sources)}.{ext}"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def inline_rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """The rows as JSON objects, valued as in :func:`s3slice.answer.textual.json_records`."""
    with contained(lambda e: OutputError(f"cannot return the rows inline: {e}"),
                   native=(pl.exceptions.PolarsError,)):
        frame = textual(frame)  # a datetime polars cannot show panics
        # One chunk: polars' write_json writes `[]` for a frame whose first chunks are
        # empty (row groups the filter emptied), however many rows follow.
        text = frame.rechunk().write_json()
    if len(text) > MAX_INLINE_BYTES:
        raise ResultTooLargeError(
            f"{frame.height} rows are {len(text)} bytes as JSON; at most {MAX_INLINE_BYTES} "
            "are returned inline. Give an output location instead", field="return_rows")
    rows: list[dict[str, Any]] = json.loads(text)
    for i, row in non_finite_rows(frame):
        rows[i] = {**rows[i], **{k: patched(rows[i][k], v) for k, v in row.items()}}
    return rows


def put_file(engine: Engine, result: ReadResult, output: OutputSpec, key: str, path: Path,
              rows: int) -> list[dict[str, Any]]:
    [size] = put_all(engine, output.bucket, [(key, lambda: path)])
    return [{"uri": f"s3://{output.bucket}/{key}", "rows": rows, "bytes": size,
             "format": output.format, "source": result.objects[0].obj.uri}]


def timed_write(engine: Engine, result: ReadResult,
                write: Callable[[], list[dict[str, Any]]]) -> tuple[list[dict[str, Any]], Stats]:
    """``write()``'s outputs, and the read's stats with the write's time and requests."""
    timings = Timings(span=engine.span)
    before = engine.fetcher.counters.snapshot()[2]
    with timings.phase("write"):
        outputs = write()
    after = engine.fetcher.counters.snapshot()[2]
    tiers = {k: n + after.get(k, 0) - before.get(k, 0)
             for k, n in result.requests_by_tier.items()}
    write_ms = timings.ms["write"]
    total_ms = round(result.stats.timings_ms.get("total", 0.0) + write_ms, 1)
    return outputs, result.stats.with_write(
        write_ms, cost(engine.settings, duration_ms=total_ms, requests=tiers))


def write_outputs(result: ReadResult, request: Request, output: OutputSpec,
                  engine: Engine) -> list[dict[str, Any]]:
    pieces: list[tuple[ObjectRef | None, pl.DataFrame]]
    if result.per_object is not None:
        pieces = list(result.per_object)
    elif len(result.objects) == 1:
        pieces = [(result.objects[0].obj, result.frame)]
    else:
        pieces = [(None, result.frame)]
    if output.file_key is not None and len(pieces) > 1:
        raise RequestError(f"{output.uri} names one object, but this request makes a result "
                           f"for each of {len(pieces)} objects: end the URI with '/' to "
                           "write them under it, or combine them with sql", field="output.uri")
    keys = [output_key(output, request, source) for source, _ in pieces]
    _check_distinct(keys, [source for source, _ in pieces])

    def serialized(frame: pl.DataFrame, key: str) -> Callable[[], bytes]:
        def data() -> bytes:
            with contained(functools.partial(_unserializable, f"s3://{output.bucket}/{key}"),
                           native=(pl.exceptions.PolarsError,)):
                return serialize(frame, output)
        return data
    sizes = put_all(engine, output.bucket,
                    [(key, serialized(frame, key)) for (_, frame), key in zip(pieces, keys,
                                                                               strict=True)])
    return [{"uri": f"s3://{output.bucket}/{key}", "rows": frame.height, "bytes": size,
             "format": output.format, **({"source": source.uri} if source is not None else {})}
            for (source, frame), key, size in zip(pieces, keys, sizes, strict=True)]


def put_all(engine: Engine, bucket: str,
            items: Sequence[tuple[str, Callable[[], bytes | Path]]]) -> list[int]:
    """Each item's bytes made and put under its key, in order; their sizes. If any fails,
    those this call already wrote are deleted: no partial result is left behind."""
    written: list[str] = []
    sizes: list[int] = []
    try:
        for key, make in items:
            data = make()
            engine.deadline()
            engine.fetcher.put(bucket, key, data)
            written.append(key)
            sizes.append(data.stat().st_size if isinstance(data, Path) else len(data))
    except BaseException:
        for key in written:
            try:
                engine.fetcher.delete(bucket, key)
            except Exception as e:
                raise OutputError(f"could not remove partial output s3://{bucket}/{key} "
                                  f"after a failed write: {e}") from e
        raise
    return sizes


def _unserializable(uri: str, text: str) -> OutputError:
    return OutputError(f"cannot serialize the result for {uri}: {text}")


def _check_distinct(keys: list[str], sources: list[ObjectRef | None]) -> None:
    """Refuse, before anything is written, outputs that would overwrite one another (one
    object named twice in a request)."""
    seen: dict[str, ObjectRef | None] = {}
    for key, source in zip(keys, sources, strict=True):
        if key in seen:
            first, again = seen[key], source
            names = (f"{first.uri} and {again.uri}" if first is not None and again is not None
                     else "two results")
            raise RequestError(f"{names} would both be written to {key}; name each object "
                               "once", field="source")
        seen[key] = source
