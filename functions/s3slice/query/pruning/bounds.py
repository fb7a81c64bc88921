"""polars' own comparisons of column values with a constant's SQL text: how
:mod:`.predicate` judges statistics in the column's own type, exactly as the filter will
compare the rows (see there)."""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import json
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import polars as pl

from s3slice.core.errors import is_native_panic
from s3slice.query.polars.sql import execute, reads_one_way

Op = Literal["=", "!=", "<", "<=", ">", ">="]
OPS: tuple[Op, ...] = ("<", "<=", "=", ">=", ">", "!=")
_TABLE = "__s3slice_stats"
#: Per constant text, polars' answer to each of :data:`OPS` at each value (None: null).
Answers = dict[str, list[tuple[bool | None, ...]]]


def values_series(values: Sequence[Any], dtype: pl.DataType) -> pl.Series:
    """``values`` as a column of ``dtype``, exactly; temporal values may be physical."""
    if dtype.is_temporal() and values and all(type(v) is int for v in values):
        return pl.Series("v", values, dtype=pl.Int64).cast(dtype)
    return pl.Series("v", values, dtype=dtype, strict=True)


def literal_sql(value: Any) -> str | None:
    """SQL text polars reads as the constant ``value`` stands for (an ``int`` an integer,
    a ``float`` a float, a ``Decimal`` a decimal, a ``str`` a string, a ``date`` a DATE, a
    naive ``datetime`` a TIMESTAMP); None for a value with no such text."""
    match value:
        case bool():
            return "TRUE" if value else "FALSE"
        case int():
            return str(value)
        case float():
            # An exponent makes polars read a float (a plain 1.5 is a decimal); 17
            # digits give back the same double.
            return f"{value:.17e}" if math.isfinite(value) else None
        case decimal.Decimal():
            return format(value, "f") if value.is_finite() else None
        case str():
            return "'" + value.replace("'", "''") + "'"
        case dt.datetime():
            return None if value.tzinfo is not None else f"TIMESTAMP '{value.isoformat(' ')}'"
        case dt.date():
            return f"DATE '{value.isoformat()}'"
    return None


class Refused(Exception):
    """polars refuses a comparison: nothing is pruned, the filter itself will say why."""


def compare_all(values: list[Any], dtype: pl.DataType, constants: Sequence[tuple[str, Any]]
                ) -> tuple[Answers, bool] | None:
    """polars' answers at ``values`` for each constant (its text, its value), and at NaN,
    last, for a float type (the second item says so); None when they are not values of
    ``dtype`` (they then judge nothing). Raises :class:`Refused` when polars cannot
    compare the column with a constant."""
    if dtype == pl.String and any(isinstance(v, int | float | decimal.Decimal)
                                  for _, v in constants):
        # A number compares with text as numbers (:mod:`~s3slice.query.coercion.text_numbers`):
        # text order is not numeric order, so the statistics judge nothing.
        raise Refused
    try:
        series = values_series(values, dtype)
    except Exception:  # noqa: BLE001 - a statistic that is no value of the column's type
        return None
    nan = dtype.is_float()
    # The values as Python holds them in ``dtype`` (a date's day count as its date), so
    # that a constant Python compares exactly meets a value of its own kind.
    try:
        values = series.to_list()
    except (OverflowError, ValueError):  # a zoned year 9999 leaves Python's datetime
        return None
    answers: Answers = {}
    texts: list[str] = []
    for text, value in constants:
        key = _exact_key(dtype, text, value)
        if not is_constant(text):  # never run: it judges nothing
            answers[text] = [(None,) * len(OPS)] * (len(values) + nan)
        elif key is None:
            texts.append(text)
        else:  # polars compares these exactly as Python does
            answers[text] = [_python(v, key) for v in values]
            if nan:
                answers[text].append((False, False, False, True, True, True))
    if texts:
        answers.update(_polars(series, dtype, texts))
    return answers, nan


@functools.lru_cache(maxsize=1024)
def is_constant(text: str) -> bool:
    """Whether polars reads ``text`` as a constant (a literal, or a cast of one), and
    nothing else: no column, no subquery, no function reaches the statistics' SQL."""
    if not reads_one_way(text, expression=True):  # the sandbox's lexical form first
        return False
    try:
        node = json.loads(pl.sql_expr(text).meta.serialize(format="json"))
    except Exception:  # noqa: BLE001 - not an expression polars reads
        return False
    if isinstance(node, dict) and set(node) == {"Cast"}:
        node = node["Cast"].get("expr")
    return isinstance(node, dict) and set(node) == {"Literal"}


def _python(v: Any, key: Any) -> tuple[bool | None, ...]:
    return (v < key, v <= key, v == key, v >= key, v > key, v != key)


#: Integer types and their ranges (half-open).
_INTEGERS: tuple[tuple[pl.DataType, int, int], ...] = (
    (pl.Int8(), -(1 << 7), 1 << 7), (pl.Int16(), -(1 << 15), 1 << 15),
    (pl.Int32(), -(1 << 31), 1 << 31), (pl.Int64(), -(1 << 63), 1 << 63),
    (pl.UInt8(), 0, 1 << 8), (pl.UInt16(), 0, 1 << 16), (pl.UInt32(), 0, 1 << 32),
    (pl.UInt64(), 0, 1 << 63))


def _exact_key(dtype: pl.DataType, text: str, value: Any) -> Any:
    """``value`` when polars compares the column with this constant as Python compares
    their values (no cast of the column: an integer within the column's type, a string,
    a double, a date, each written as :func:`literal_sql` writes it); else None."""
    if isinstance(value, bool) or text != literal_sql(value):
        return None
    if dtype.is_integer() and type(value) is int:
        # (an integer past Int64 is a decimal to polars; UInt64's top half is left to it)
        return next((value for t, low, high in _INTEGERS
                     if dtype == t and low <= value < high), None)
    if (dtype == pl.String and type(value) is str) or (
            dtype == pl.Float64 and type(value) is float) or (
            dtype == pl.Date and type(value) is dt.date):
        return value
    return None


def _polars(series: pl.Series, dtype: pl.DataType, texts: list[str]) -> Answers:
    if dtype.is_float():
        series = series.append(pl.Series("v", [float("nan")], dtype=dtype))
    try:
        exprs = [f"(v {op} {text}) AS r{i}_{j}" for i, text in enumerate(texts)
                 for j, op in enumerate(OPS)]
        frame = execute(f"SELECT {', '.join(exprs)} FROM {_TABLE}",
                        {_TABLE: pl.DataFrame([series]).lazy()}, field="statistics").collect()
        if frame.height != series.len() or any(t != pl.Boolean for t in frame.dtypes):
            raise Refused
        rows = frame.rows()
    except Refused:
        raise
    except Exception as e:
        raise Refused from e
    except BaseException as e:
        if is_native_panic(e):
            raise Refused from e
        raise
    width = len(OPS)
    return {text: [r[i * width:(i + 1) * width] for r in rows]
            for i, text in enumerate(texts)}


def only_equal(text: str | None, dtype: pl.DataType, candidate: Any,
               neighbours: Sequence[Any]) -> bool:
    """Whether polars finds ``column = constant`` true at ``candidate`` and false at its
    ``neighbours`` (the values of ``dtype`` just below and above it): then, as its
    comparisons are monotone, ``candidate`` is the one value that matches, and a Bloom
    filter may be asked for it alone."""
    if text is None:
        return False
    try:
        found = compare_all([candidate, *neighbours], dtype, [(text, None)])
    except Refused:
        return False
    if found is None:
        return False
    answers = found[0][text]
    return at(answers, 0, "=") is True and all(at(answers, i + 1, "=") is False
                                               for i in range(len(neighbours)))


def at(results: list[tuple[bool | None, ...]], row: int, op: Op) -> bool | None:
    return results[row][OPS.index(op)]


def possible(lo: Callable[[Op], bool | None], hi: Callable[[Op], bool | None],
             op: Op) -> tuple[bool, bool] | None:
    """(true possible, false possible) of ``column op constant`` on values between the
    bounds, from polars' answers at the bounds; None when an answer is null."""
    match op:
        case "<" | "<=":
            a, b = lo(op), hi(op)
            return None if a is None or b is None else (a, not b)
        case ">" | ">=":
            a, b = hi(op), lo(op)
            return None if a is None or b is None else (a, not b)
    le, ge, eq_lo, eq_hi = lo("<="), hi(">="), lo("="), hi("=")
    if le is None or ge is None or eq_lo is None or eq_hi is None:
        return None
    if op == "=":
        return le and ge, not (eq_lo and eq_hi)
    ne_lo, ne_hi = lo("!="), hi("!=")
    if ne_lo is None or ne_hi is None:
        return None
    return ne_lo or ne_hi, le and ge
