"""Invoking the handler on this machine, as the command line and the demo do: a stand-in
for Lambda's context, and the response printed as JSON on stdout."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from s3slice.core.values import cell_text, dump


class LambdaContext:
    """What Lambda hands the handler, as far as the handler looks at it."""

    def __init__(self, *, timeout_s: float = 900.0, memory_mb: int = 3008) -> None:
        self.function_name = "s3slice-local"
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = memory_mb
        self.aws_request_id = str(uuid.uuid4())
        self.invoked_function_arn = (
            "arn:aws:lambda:us-east-1:000000000000:function:s3slice-local")
        self.log_group_name = "/aws/lambda/s3slice-local"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def invoke(event: Any, context: LambdaContext, *, environment: Mapping[str, str] | None = None,
           verbose: bool = True) -> Any:
    """The handler, under ``environment`` (variables set for the call, then restored), with
    anything it prints (EMF metrics) sent to stderr: stdout carries only the response.
    Unless ``verbose``, its logs and metrics are off."""
    quiet = {} if verbose else {"POWERTOOLS_METRICS_DISABLED": "true"}
    with _environ({**(environment or {}), **quiet}):
        from s3slice.handler import lambda_handler

        # Powertools names its Logger after the service (entry/observe.py).
        logger = logging.getLogger(os.environ.get("POWERTOOLS_SERVICE_NAME", "s3slice"))
        level = logger.level
        if not verbose:
            logger.setLevel(logging.CRITICAL)
        try:
            # Powertools prints its ColdStart metric even with metrics off: quiet, whatever
            # the handler prints goes nowhere.
            with contextlib.redirect_stdout(sys.stderr if verbose else io.StringIO()):
                return lambda_handler(event, context)
        finally:
            logger.setLevel(level)


@contextlib.contextmanager
def _environ(variables: Mapping[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def print_rows(rows: Sequence[Mapping[str, Any]], form: str,
               columns: Sequence[str] | None = None) -> None:
    """Rows on stdout: ``json`` (one JSON object a line), ``csv`` (a header, then a line a
    row) or ``table`` (every row, aligned), values by :mod:`s3slice.core.values`' rule (a
    record or a list as its compact JSON text, non-ASCII as is). ``columns`` names them in
    order (a header even with no rows); else the first row's keys."""
    names = list(columns) if columns is not None else list(rows[0]) if rows else []
    try:
        if form == "json":
            for row in rows:
                sys.stdout.write(dump(dict(row)) + "\n")
        elif form == "csv":
            writer = csv.writer(sys.stdout, lineterminator="\n")
            if names:
                writer.writerow(names)
            writer.writerows([cell_text(row.get(n)) for n in names] for row in rows)
        else:
            sys.stdout.write(_table(rows, names))
        sys.stdout.flush()
    except BrokenPipeError as e:
        raise StdoutClosed from e


def _table(rows: Sequence[Mapping[str, Any]], names: list[str]) -> str:
    cells = [names, *([_cell(row.get(n)) for n in names] for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(names))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
             for line in cells]
    if names:
        lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(f"({len(rows)} row{'' if len(rows) == 1 else 's'})")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    text = cell_text(value)
    return "null" if text is None else text


class StdoutClosed(Exception):
    """Nobody reads stdout any more (``s3slice ... | head``): the response is undelivered."""


def print_json(obj: Any) -> None:
    try:
        json.dump(obj, sys.stdout, indent=2, default=str, ensure_ascii=False)
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError as e:
        raise StdoutClosed from e
