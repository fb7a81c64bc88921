"""A polars expression as SQL filter text, for pruning only.

``s3slice.read_parquet(..., filter=pl.col("ts") >= t)`` prunes row groups, pages and Bloom
filters as the same filter given as SQL text does: the expression's tree
(``Expr.meta.serialize(format="json")``, polars' own stable description of it) is read
into the subset the pruning understands, comparisons of a bare column with a constant
(``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``), ``is_in``, ``is_between``,
``is_null``/``is_not_null``, combined by ``&``, ``|`` and ``~``. The read is then filtered
by that SQL and by the expression itself, so the answer is the expression's on the whole
file:

- a part that is not in the subset is dropped from an ``&`` (the SQL keeps more rows than
  the expression: still safe) and makes an ``|`` or a ``~`` of it untranslated (``~`` of a
  weaker filter would be a stronger one);
- a constant is written only where its SQL reads the same value: integers, finite floats,
  strings, booleans, dates, timestamps at microseconds or coarser (a zoned one as its
  instant with ``+00:00``, which the SQL compares as that instant, as polars does with a
  column of the same zone); ``is_in`` of a list holding a null is not translated.

None when nothing translates: the read is then filtered by the expression alone.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

import polars as pl
import pyarrow as pa

_COMPARISONS = {"Eq": "=", "NotEq": "<>", "Lt": "<", "LtEq": "<=", "Gt": ">", "GtEq": ">="}
_FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_UNITS = {"Milliseconds": 1_000, "Microseconds": 1, "Nanoseconds": None}
_EPOCH = dt.datetime(1970, 1, 1)


class _Untranslated(Exception):
    """A part of the expression outside the subset."""


def to_sql(expr: pl.Expr) -> str | None:
    """SQL filter text that keeps every row ``expr`` keeps (exactly ``expr`` where the
    whole expression is in the subset), or None when no part of it translates."""
    try:
        tree = json.loads(expr.meta.serialize(format="json"))
    except (pl.exceptions.PolarsError, ValueError):  # not serialisable: no pruning
        return None
    try:
        sql, _ = _node(tree)
    except (_Untranslated, KeyError, TypeError, ValueError, IndexError):
        return None
    return sql


def _node(node: Any) -> tuple[str, bool]:
    """(SQL, exact): the SQL keeps every row ``node`` keeps, and exactly those when exact.
    _Untranslated when no such SQL is known."""
    if not isinstance(node, dict) or len(node) != 1:
        raise _Untranslated
    kind, body = next(iter(node.items()))
    if kind == "BinaryExpr":
        op = body["op"]
        if op in ("And", "LogicalAnd"):
            return _and([body["left"], body["right"]])
        if op in ("Or", "LogicalOr"):
            left, right = _node(body["left"]), _node(body["right"])
            return f"({left[0]} OR {right[0]})", left[1] and right[1]
        if op in _COMPARISONS:
            return _comparison(body["left"], _COMPARISONS[op], body["right"]), True
        raise _Untranslated
    if kind == "Function":
        return _function(body["function"], body["input"]), True
    raise _Untranslated


def _and(items: list[Any]) -> tuple[str, bool]:
    parts: list[str] = []
    exact = True
    for item in items:
        try:
            sql, item_exact = _node(item)
        except (_Untranslated, KeyError, TypeError, ValueError, IndexError):
            exact = False  # dropped: the SQL keeps more rows, never fewer
            continue
        parts.append(sql)
        exact = exact and item_exact
    if not parts:
        raise _Untranslated
    return "(" + " AND ".join(parts) + ")", exact


def _function(function: Any, inputs: list[Any]) -> str:
    if function == {"Boolean": "Not"}:
        sql, exact = _node(inputs[0])
        if not exact:
            raise _Untranslated
        return f"(NOT {sql})"
    if function == {"Boolean": "IsNull"}:
        return f"({_column(inputs[0])} IS NULL)"
    if function == {"Boolean": "IsNotNull"}:
        return f"({_column(inputs[0])} IS NOT NULL)"
    if isinstance(function, dict) and isinstance(function.get("Boolean"), dict):
        boolean = function["Boolean"]
        if "IsIn" in boolean:
            values = _list(inputs[1])
            if not values or any(v is None for v in values):
                raise _Untranslated
            texts = ", ".join(_literal_value(v) for v in values)
            return f"({_column(inputs[0])} IN ({texts}))"
        if "IsBetween" in boolean:
            closed = boolean["IsBetween"]["closed"]
            column = inputs[0]
            low = _comparison(column, ">=" if closed in ("Both", "Left") else ">", inputs[1])
            high = _comparison(column, "<=" if closed in ("Both", "Right") else "<", inputs[2])
            return f"({low} AND {high})"
    raise _Untranslated


def _comparison(left: Any, op: str, right: Any) -> str:
    if _is_column(left):
        return f"({_column(left)} {op} {_literal(right)})"
    if _is_column(right):
        return f"({_column(right)} {_FLIPPED[op]} {_literal(left)})"
    raise _Untranslated


def _is_column(node: Any) -> bool:
    return isinstance(node, dict) and isinstance(node.get("Column"), str)


def _column(node: Any) -> str:
    if not _is_column(node):
        raise _Untranslated
    name: str = node["Column"]
    return '"' + name.replace('"', '""') + '"'


def _literal(node: Any) -> str:
    """The SQL of a constant (``{"Literal": {"Dyn"|"Scalar": {type: value}}}``)."""
    if not isinstance(node, dict) or "Literal" not in node:
        raise _Untranslated
    literal = node["Literal"]
    typed = literal.get("Dyn") or literal.get("Scalar")
    if not isinstance(typed, dict) or len(typed) != 1:
        raise _Untranslated
    kind, value = next(iter(typed.items()))
    if kind in ("Int", "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32",
                "UInt64") and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if kind in ("Float", "Float32", "Float64") and isinstance(value, float):
        return _literal_value(value)
    if kind in ("Str", "String") and isinstance(value, str):
        return _literal_value(value)
    if kind == "Boolean" and isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if kind == "Date" and isinstance(value, int):
        return _literal_value(dt.date(1970, 1, 1) + dt.timedelta(days=value))
    if kind == "Datetime" and isinstance(value, list) and len(value) == 3:
        amount, unit, zone = value
        scale = _UNITS.get(unit)
        if scale is None or not isinstance(amount, int):
            raise _Untranslated
        moment = _EPOCH + dt.timedelta(microseconds=amount * scale)
        if zone is None:
            return f"CAST('{moment.isoformat(sep=' ')}' AS TIMESTAMP)"
        # Its instant: the SQL compares offset text with a zoned column as that instant.
        return f"'{moment.isoformat(sep=' ')}+00:00'"
    raise _Untranslated


def _literal_value(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Untranslated
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, dt.datetime):
        raise _Untranslated  # in a list: its zone is not told here
    if isinstance(value, dt.date):
        return f"CAST('{value.isoformat()}' AS DATE)"
    raise _Untranslated


def _list(node: Any) -> list[Any]:
    """The values of a list constant (polars writes them as an Arrow IPC stream of one
    column)."""
    literal = node["Literal"]
    scalar = literal.get("Scalar") or {}
    data = scalar.get("List") if isinstance(scalar, dict) else None
    if not isinstance(data, list):
        raise _Untranslated
    table = pa.ipc.open_stream(bytes(data)).read_all()  # one column: the values
    if table.num_columns != 1:
        raise _Untranslated
    values: list[Any] = table.column(0).to_pylist()
    return values
