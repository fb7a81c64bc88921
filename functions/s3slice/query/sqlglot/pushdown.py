"""Predicate pushdown: the part of a WHERE condition that row-group statistics, page
indexes, Bloom filters and partition values can judge, as a
:mod:`~s3slice.query.pruning.predicate` tree.
"""

from __future__ import annotations

import decimal
import re
from typing import Any

from sqlglot import exp

from s3slice.query.paths import PATH_PREFIX
from s3slice.query.pruning import predicate as P
from s3slice.query.sqlglot.dialect import literal

_CMP: dict[type[exp.Expr], P.CmpOp] = {
    exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=",
}


#: A number polars reads as a decimal (no exponent, a point): its value exactly.
_DECIMAL = re.compile(r"-?(\d+\.\d*|\.\d+)")


def _constant(node: exp.Expr) -> tuple[bool, Any, str | None]:
    """(True, value, SQL text) when ``node`` is a constant the statistics can be compared
    with: the value typed as polars reads the text (``1.5`` a ``Decimal``, exactly), and
    the text polars judges the statistics with."""
    ok, value = literal(node)
    if not ok:
        return False, None, None
    text = node.sql()
    if isinstance(value, float) and _DECIMAL.fullmatch(text.replace(" ", "").strip("()")):
        value = decimal.Decimal(text.replace(" ", "").strip("()"))
    return True, value, text


def _one_kind(values: list[Any]) -> bool:
    """Whether no float shares an IN list with constants of another kind: polars compares
    a column with the list's common type, so a list that mixes a float with other
    constants compares every value as a float (``c IN (1234567890123.4567, 1.5e0)``
    holds for ``1234567890123.4568``), not each as itself, as the statistics would judge
    it. Other mixes (text beside a ``DATE``) are each read in the column's own type."""
    kinds = {"number" if type(v) in (int, decimal.Decimal) else type(v) for v in values}
    return float not in kinds or len(kinds) == 1


def _is_source_column(node: exp.Expr) -> bool:
    """A plain column reference, which row-group statistics describe (a path is not)."""
    return isinstance(node, exp.Column) and not node.name.startswith(PATH_PREFIX)


def to_predicate(node: exp.Expr) -> P.Pred:
    """The part of a condition the statistics can judge; the rest becomes ``Opaque``."""
    if isinstance(node, exp.Paren):
        return to_predicate(node.this)
    if isinstance(node, exp.And):
        return P.And((to_predicate(node.left), to_predicate(node.right)))
    if isinstance(node, exp.Or):
        return P.Or((to_predicate(node.left), to_predicate(node.right)))
    if isinstance(node, exp.Not):
        return P.Not(to_predicate(node.this))
    op = _CMP.get(type(node))
    if op is not None:
        left, right = node.args["this"], node.args["expression"]
        if _is_source_column(left):
            ok, value, text = _constant(right)
            if ok:
                return P.Cmp(left.name, op, value, text)
        if _is_source_column(right):
            ok, value, text = _constant(left)
            if ok:
                return P.Cmp(right.name, P.FLIP[op], value, text)
        return P.TRUE
    if isinstance(node, exp.Between) and _is_source_column(node.this):
        ok_lo, lo, lo_text = _constant(node.args["low"])
        ok_hi, hi, hi_text = _constant(node.args["high"])
        if ok_lo and ok_hi:
            return P.Between(node.this.name, lo, hi, (lo_text, hi_text))
        return P.TRUE
    if isinstance(node, exp.In) and _is_source_column(node.this) and not node.args.get(
            "query"):
        values = [_constant(v) for v in node.expressions]
        if values and all(ok for ok, _, _ in values) and _one_kind([v for _, v, _ in values]):
            return P.In(node.this.name, tuple(v for _, v, _ in values),
                        tuple(t for _, _, t in values))
        return P.TRUE
    if isinstance(node, exp.Is) and _is_source_column(node.this) and isinstance(
            node.expression, exp.Null):
        return P.IsNull(node.this.name)
    return P.TRUE
