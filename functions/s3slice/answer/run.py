"""A request's run: read it through the engine, write its answer, and respond.

:func:`run` is the whole direct-invoke contract for one request, and every writer goes
through it or through :mod:`s3slice.answer.write`'s pieces: direct invokes, triggered
objects, S3 Select, map partials and the reduce. A Parquet output of a query the engine
answers a row group at a time is written as it is computed (:mod:`s3slice.answer.spool`);
a plain column selection the engine copies without decoding is uploaded as that file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from s3slice.answer.spool import ParquetSpool
from s3slice.answer.write import inline_rows, output_key, put_file, timed_write, write_outputs
from s3slice.core.errors import ResultTooLargeError
from s3slice.core.model import Request
from s3slice.engine.engine import Engine
from s3slice.engine.results import ReadResult, Stats
from s3slice.readers.base import Copied


@dataclasses.dataclass(frozen=True, kw_only=True)
class Answer:
    """A request's answer: the outputs written, the rows returned inline, the stats."""

    outputs: list[dict[str, Any]]
    stats: Stats
    rows: list[dict[str, Any]] | None = None
    #: The rows' column names in order (known when there are no rows too).
    columns: list[str] | None = None
    #: Why the rows asked for inline are not (they are in the outputs).
    rows_spilled: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The service's JSON response."""
        response: dict[str, Any] = {"status": "ok", "outputs": self.outputs}
        if self.rows is not None:
            response["rows"] = self.rows
            if self.columns is not None:
                response["columns"] = self.columns
        if self.rows_spilled is not None:
            response["rows_spilled"] = self.rows_spilled
        response["stats"] = self.stats.to_dict()
        return response


def run(request: Request, *, engine: Engine,
        on_result: Callable[[ReadResult], None] | None = None) -> Answer:
    """Read, write and answer: the whole direct-invoke contract for one request."""
    copied = engine.copy(request)
    if copied is not None:
        return _run_copied(request, engine, *copied, on_result)
    if streamed(request, engine):
        return _run_streamed(request, engine, on_result)
    result = engine.read(request)
    if on_result is not None:
        on_result(result)
    rows, spilled, columns = None, None, None
    if request.return_rows or request.output is None:
        try:
            rows, columns = inline_rows(result.frame), result.frame.columns
        except ResultTooLargeError as e:
            if request.output is None:
                raise
            # The rows are in the outputs: say so rather than fail the whole request.
            spilled = e.message
    outputs: list[dict[str, Any]] = []
    stats = result.stats
    if request.output is not None:
        output = request.output
        outputs, stats = timed_write(engine, result, lambda: write_outputs(
            result, request, output, engine))
    return Answer(outputs=outputs, stats=stats, rows=rows, columns=columns,
                  rows_spilled=spilled)


def streamed(request: Request, engine: Engine) -> bool:
    """Whether the answer is written as it is computed (:mod:`s3slice.answer.spool`): a Parquet
    output of a request the engine answers a row group at a time, with no rows asked
    inline, and a temporary directory at least as large as the function's memory (any
    answer that memory could hold fits there)."""
    s = engine.settings
    return (request.output is not None and request.output.format == "parquet"
            and not request.return_rows and engine.streams(request)
            and s.tmp_free_bytes() >= s.memory_mb * 1024 * 1024)


def _run_streamed(request: Request, engine: Engine,
                  on_result: Callable[[ReadResult], None] | None) -> Answer:
    output = request.output
    assert output is not None
    spool = ParquetSpool(engine.settings.tmp_dir, output.compression,
                         hold_bytes=engine.settings.memory_budget_bytes // 4)
    try:
        result = engine.read(request, sink=spool)
        if on_result is not None:
            on_result(result)
        key = output_key(output, request, result.objects[0].obj)

        def write() -> list[dict[str, Any]]:
            path = spool.finish(result.frame)
            if isinstance(path, pl.DataFrame):  # small: written as any other answer is
                return write_outputs(dataclasses.replace(result, frame=path), request,
                                     output, engine)
            return put_file(engine, result, output, key, path, spool.rows)
        outputs, stats = timed_write(engine, result, write)
    finally:
        spool.close()
    return Answer(outputs=outputs, stats=stats)


def _run_copied(request: Request, engine: Engine, result: ReadResult, copied: Copied,
                on_result: Callable[[ReadResult], None] | None) -> Answer:
    """The answer :meth:`Engine.copy` made as a file, uploaded (in parts when large)."""
    output = request.output
    assert output is not None
    try:
        if on_result is not None:
            on_result(result)
        key = output_key(output, request, result.objects[0].obj)
        outputs, stats = timed_write(engine, result, lambda: put_file(
            engine, result, output, key, Path(copied.file.path), copied.rows))
    finally:
        copied.file.close()
    return Answer(outputs=outputs, stats=stats)
