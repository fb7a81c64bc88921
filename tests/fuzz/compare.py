"""Answers compared as a reference reader would: the same column names in the same order,
types of the same family (a time zone exactly), and the same rows, as multisets unless
the query orders them. Nulls equal nulls, NaN equals NaN and nothing else; floats of an
aggregate within a relative tolerance (sums are regrouped), every other value exactly."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections import Counter
from typing import Any

import polars as pl

REL = 1e-6


def family(dtype: pl.DataType) -> str:
    if dtype.is_integer():
        return "int"
    if dtype.is_float():
        return "float"
    if isinstance(dtype, pl.Decimal):
        return "decimal"
    if dtype == pl.String or isinstance(dtype, pl.Categorical | pl.Enum):
        return "string"
    if isinstance(dtype, pl.Datetime):
        return f"datetime[{dtype.time_zone}]"
    if isinstance(dtype, pl.List | pl.Array):
        return f"list[{family(dtype.inner)}]"
    if isinstance(dtype, pl.Struct):
        return "struct{" + ",".join(f"{f.name}:{family(f.dtype)}" for f in dtype.fields) + "}"
    return str(dtype.base_type())


def _canon(value: Any, aggregate: bool) -> Any:
    """A hashable, exactly comparable form of one value."""
    if isinstance(value, float):
        if math.isnan(value):
            return ("nan",)
        if value == 0:
            return 0.0
        return float(f"{value:.9g}") if aggregate else value
    if isinstance(value, decimal.Decimal):
        return value.normalize() if value.is_finite() else str(value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return ("tz", value.astimezone(dt.UTC))
    if isinstance(value, list):
        return ("list", *(_canon(v, aggregate) for v in value))
    if isinstance(value, dict):
        return ("struct", *((k, _canon(v, aggregate)) for k, v in value.items()))
    return value


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=REL, abs_tol=1e-12)
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        return all(_close(x, y) for x, y in zip(a, b, strict=True))
    numbers = int | float | decimal.Decimal
    return (bool(a == b) and type(a) is type(b)) or (
        isinstance(a, numbers) and isinstance(b, numbers)
        and not isinstance(a, bool) and not isinstance(b, bool) and a == b)


def _instants(frame: pl.DataFrame) -> pl.DataFrame:
    """Timestamps as text of their UTC instant to the nanosecond (Python's datetime would
    drop nanoseconds), dates as their day numbers (Python's date holds no year 0); their
    zones are compared with the types."""
    def text(name: str, dtype: pl.DataType) -> pl.Expr:
        c = pl.col(name)
        if isinstance(dtype, pl.Date):
            return c.cast(pl.Int32)
        if getattr(dtype, "time_zone", None) is not None:
            c = c.dt.convert_time_zone("UTC")
        return c.dt.to_string("%Y-%m-%dT%H:%M:%S%.9f")
    return frame.with_columns(text(n, t) for n, t in frame.schema.items()
                              if isinstance(t, pl.Datetime | pl.Date))


def _rows(frame: pl.DataFrame) -> list[tuple[Any, ...]]:
    """The frame's rows as Python values; where Python cannot hold one (a timestamp in a
    list or struct at year 0 of its zone), that nested column as polars' hash of each
    value (equal values of one type hash alike; the types are compared apart)."""
    frame = _instants(frame)
    try:
        return frame.rows()
    except (ValueError, OverflowError):
        held = []
        for n, t in frame.schema.items():
            try:
                frame.select(n).rows()
            except (ValueError, OverflowError):
                if not t.is_nested():
                    raise
                continue
            held.append(n)
        return frame.with_columns(pl.col(n).hash(seed=0)
                                  for n in frame.columns if n not in held).rows()


_NUMBERS = {"int", "float", "decimal"}


def difference(got: pl.DataFrame, want: pl.DataFrame, *, ordered: bool, aggregate: bool,
               loose: bool = False) -> str | None:
    """None when ``got`` answers as ``want``; else what differs, in a line. ``loose``
    (DuckDB's answers): numbers of any family and timestamps of any zone are alike."""
    if got.columns != want.columns:
        return f"columns {got.columns} != {want.columns}"
    for name in want.columns:
        a, b = got.schema[name], want.schema[name]
        fa, fb = family(a), family(b)
        if loose:
            fa, fb = fa.split("[")[0], fb.split("[")[0]
            fa, fb = ("number" if f in _NUMBERS else f for f in (fa, fb))
        null_column = pl.Null in (a, b)
        if fa != fb and not null_column:
            return f"column {name!r}: {a} != {b}"
    if got.height != want.height:
        return f"{got.height} rows != {want.height}"
    tolerant = aggregate or loose
    rows_got = [tuple(_canon(v, tolerant) for v in row) for row in _rows(got)]
    rows_want = [tuple(_canon(v, tolerant) for v in row) for row in _rows(want)]
    if ordered:
        for i, (x, y) in enumerate(zip(rows_got, rows_want, strict=True)):
            if not _close(x, y):
                return f"row {i}: {x} != {y}"
        return None
    extra = Counter(rows_got)
    extra.subtract(Counter(rows_want))
    if all(c == 0 for c in extra.values()):
        return None
    if tolerant:  # floats at the tolerance's edge: matched one by one
        pending = list(rows_want)
        for row in rows_got:
            match = next((i for i, w in enumerate(pending) if _close(row, w)), None)
            if match is None:
                return f"row {row} not in the reference"
            pending.pop(match)
        return None
    surplus = [r for r, c in extra.items() if c > 0][:3]
    missing = [r for r, c in extra.items() if c < 0][:3]
    return f"rows only in the answer {surplus}, only in the reference {missing}"
