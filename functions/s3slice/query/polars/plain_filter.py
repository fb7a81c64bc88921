"""A plain filter analysed by polars' own SQL parser, without sqlglot.

Plain means comparisons of columns with constants, AND, OR, NOT, IS [NOT] NULL, [NOT] IN
and BETWEEN: the projection-and-filter request most reads are. polars parses the text it
later runs, unchanged (nothing in it needs translating), and the columns and the pruning
predicate are read off its expression tree (``Expr.meta.serialize``, polars' own format,
pinned with polars). Anything else (paths, qualified names, S3 Select's functions, any
other call, operator or literal, or a tree this polars shapes otherwise) gives None, and
sqlglot's analysis (:mod:`~s3slice.query.sqlglot.analysis`), the reference, decides: a property test
holds the two equal on every filter this module accepts. A filter that polars cannot
parse is also left to sqlglot, whose error names what is wrong.

Why: importing sqlglot with the S3 Select dialect costs about 0.9 CPU s of a cold start,
as much as polars' own import.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import io
import json
from typing import Any

import polars as pl

from s3slice.core.errors import is_native_panic
from s3slice.core.model import Query
from s3slice.query.analysis import Analysis, uses_s3select_functions
from s3slice.query.paths import PATH_PREFIX
from s3slice.query.polars.sql import reads_one_way
from s3slice.query.pruning import predicate as P
from s3slice.query.pruning.bounds import is_constant

_COMPARISONS: dict[str, P.CmpOp] = {"Eq": "=", "NotEq": "!=", "Lt": "<", "LtEq": "<=",
                                    "Gt": ">", "GtEq": ">="}
_EPOCH = dt.datetime(1970, 1, 1)
_MICROSECONDS = {"Microseconds": 1, "Milliseconds": 1000}
#: The element types of an IN list whose values are what sqlglot's literals give.
_IN_TYPES = (pl.Int64, pl.String, pl.Boolean, pl.Date)


class _Unsupported(Exception):
    """The tree has a node this module does not read: sqlglot's analysis decides."""


def analyze_plain_filter(query: Query) -> Analysis | None:
    """The analysis of a ``columns``/``filter`` query whose filter is plain (or absent);
    None for anything else."""
    if query.sql is not None:
        return None
    text = query.filter
    tree = _TreeReader()
    predicate: P.Pred = P.TRUE
    if text is not None:
        # polars' own parse runs a subquery's table function as it parses (pl.sql_expr
        # reads the file): only text in the one lexical form is parsed here (issue 28).
        if uses_s3select_functions(text) or not reads_one_way(text, expression=True):
            return None
        try:
            parsed = json.loads(pl.sql_expr(text).meta.serialize(format="json"))
            predicate = tree.condition(parsed)
        except _Unsupported:
            return None
        except Exception:  # noqa: BLE001 - polars cannot parse it: sqlglot's error says why
            return None
        except BaseException as e:
            if is_native_panic(e):
                return None
            raise
    whole = set(query.columns or ()) | tree.columns
    return Analysis(query=query, columns=query.columns, referenced=frozenset(whole),
                    predicate=predicate, where=text, sql=None, table_names=(),
                    whole=frozenset(whole))


class _TreeReader:
    """Reads a serialized polars expression into a pruning predicate, collecting the
    columns it names; raises :class:`_Unsupported` at any node it does not know."""

    def __init__(self) -> None:
        self.columns: set[str] = set()

    def condition(self, node: Any) -> P.Pred:
        kind, body = _only(node)
        if kind == "BinaryExpr":
            op = body["op"]
            if op == "And":
                return P.And((self.condition(body["left"]), self.condition(body["right"])))
            if op == "Or":
                return P.Or((self.condition(body["left"]), self.condition(body["right"])))
            if op in _COMPARISONS:
                return self._compare(body["left"], _COMPARISONS[op], body["right"])
            raise _Unsupported(op)
        if kind != "Function":
            raise _Unsupported(kind)
        function, inputs = body["function"], body["input"]
        if function == {"Boolean": "IsNull"} and len(inputs) == 1:
            return P.IsNull(self._column(inputs[0]))
        if function == {"Boolean": "IsNotNull"} and len(inputs) == 1:
            return P.Not(P.IsNull(self._column(inputs[0])))
        if function == {"Boolean": "Not"} and len(inputs) == 1:
            return self._negated(inputs[0])
        if _only(function)[0] == "Sql" and len(inputs) == 2:
            sql_kind, sql_body = _only(function["Sql"])
            if sql_kind == "Binary" and sql_body in _COMPARISONS:  # a decimal constant
                return self._compare(inputs[0], _COMPARISONS[sql_body], inputs[1])
            if sql_kind == "IsIn" and sql_body == {"nulls_equal": False}:
                return self._in(inputs)
        raise _Unsupported(function)

    def _negated(self, node: Any) -> P.Pred:
        kind, body = _only(node)
        # The query's own NOT: polars casts its operand to a boolean.
        if kind == "Cast" and body["dtype"] == {"Literal": "Boolean"} and (
                body["options"] == "Strict"):
            return P.Not(self.condition(body["expr"]))
        # ``a <> b`` is polars' NOT (a = b); ``a NOT IN (…)`` its NOT (a IN (…)).
        if kind == "BinaryExpr" and body["op"] == "Eq":
            return self._compare(body["left"], "!=", body["right"])
        if kind == "Function" and len(body["input"]) == 2:
            if body["function"] == {"Sql": {"Binary": "Eq"}}:  # a decimal constant
                return self._compare(body["input"][0], "!=", body["input"][1])
            if body["function"] == {"Sql": {"IsIn": {"nulls_equal": False}}}:
                return P.Not(self._in(body["input"]))
        raise _Unsupported(kind)

    def _column(self, node: Any) -> str:
        kind, name = _only(node)
        if kind != "Column" or not isinstance(name, str) or name.startswith(PATH_PREFIX):
            raise _Unsupported(kind)
        self.columns.add(name)
        return name

    def _compare(self, left: Any, op: P.CmpOp, right: Any) -> P.Pred:
        """``left op right`` of two operands, each a column or a constant; a column
        against a constant is judged by the statistics, anything else is not."""
        sides = [self._operand(left), self._operand(right)]
        match sides:
            case [str(column), (True, value)]:
                return _exact(P.Cmp(column, op, value), right)
            case [(True, value), str(column)]:
                return _exact(P.Cmp(column, P.FLIP[op], value), left)
        return P.TRUE

    def _operand(self, node: Any) -> str | tuple[bool, Any]:
        """A column's name, or (whether the statistics can compare with it, the value)."""
        kind, body = _only(node)
        if kind == "Column":
            return self._column(node)
        if kind != "Literal":
            raise _Unsupported(kind)
        return _literal(body)

    def _in(self, inputs: list[Any]) -> P.Pred:
        column = self._column(inputs[0])
        kind, body = _only(inputs[1])
        if kind != "Literal" or _only(body)[0] != "Series":
            raise _Unsupported(kind)
        series = pl.read_ipc_stream(io.BytesIO(bytes(body["Series"]))).to_series()
        if not isinstance(series.dtype, pl.List) or series.len() != 1:
            raise _Unsupported(series.dtype)
        values = series.explode()
        if values.dtype not in _IN_TYPES or values.null_count() or values.is_empty():
            raise _Unsupported(values.dtype)
        items = tuple(values.to_list())
        return P.In(column, items, tuple(P.literal_sql(v) for v in items))


def _exact(cmp: P.Cmp, node: Any) -> P.Pred:
    """``cmp`` when its constant's SQL text (:func:`~s3slice.query.pruning.predicate.literal_sql`,
    which the statistics are judged with) is one polars reads as the very constant of
    ``node``; else nothing to prune by."""
    text = cmp.text
    if text is None or not is_constant(text):  # checked by the sandbox's rules first
        return P.TRUE
    try:
        again = json.loads(pl.sql_expr(text).meta.serialize(format="json"))
    except Exception:  # noqa: BLE001 - not a text polars reads back: no pruning
        return P.TRUE
    return dataclasses.replace(cmp, sql=text) if again == node else P.TRUE


def _literal(body: Any) -> tuple[bool, Any]:
    """(True, value) for a constant the statistics can judge, typed as polars reads it:
    ``1`` an int, ``1.5`` a ``Decimal`` (exactly), ``1e3`` a float, ``DATE '…'`` a date,
    ``TIMESTAMP '…'`` a naive datetime; (False, None) for NULL."""
    kind, value = _only(body)
    if kind == "Dyn":
        dyn_kind, number = _only(value)
        if dyn_kind == "Int" and type(number) is int:
            return True, number
        if dyn_kind == "Float" and isinstance(number, float):
            return True, number
        raise _Unsupported(dyn_kind)
    if kind != "Scalar":
        raise _Unsupported(kind)
    scalar_kind, scalar = _only(value)
    match scalar_kind, scalar:
        case "String", str():
            return True, scalar
        case "Boolean", bool():
            return True, scalar
        case "Null", _:
            return False, None
        case "Decimal", [int(digits), int(), int(scale)]:
            return True, decimal.Decimal(digits).scaleb(-scale)
        case "Date", int(days):
            return True, (_EPOCH + dt.timedelta(days=days)).date()
        case "Datetime", [int(count), str(unit), None] if unit in _MICROSECONDS:
            return True, _EPOCH + dt.timedelta(microseconds=count * _MICROSECONDS[unit])
    raise _Unsupported(scalar_kind)


def _only(node: Any) -> tuple[str, Any]:
    """The one key of a serialized node and its body."""
    if isinstance(node, str):
        return node, None
    if not isinstance(node, dict) or len(node) != 1:
        raise _Unsupported(type(node).__name__)
    [(kind, body)] = node.items()
    return kind, body
