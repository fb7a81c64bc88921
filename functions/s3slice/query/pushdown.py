"""Predicate pushdown: the part of a WHERE condition that row-group statistics, page
indexes, Bloom filters and partition values can judge, as a :mod:`.predicate` tree.
"""

from __future__ import annotations

from sqlglot import exp

from s3slice.query import predicate as P
from s3slice.query.dialect import literal
from s3slice.query.paths import PATH_PREFIX

_CMP: dict[type[exp.Expr], P.CmpOp] = {
    exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=",
}


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
            ok, value = literal(right)
            if ok:
                return P.Cmp(left.name, op, value)
        if _is_source_column(right):
            ok, value = literal(left)
            if ok:
                return P.Cmp(right.name, P.FLIP[op], value)
        return P.TRUE
    if isinstance(node, exp.Between) and _is_source_column(node.this):
        ok_lo, lo = literal(node.args["low"])
        ok_hi, hi = literal(node.args["high"])
        if ok_lo and ok_hi:
            return P.Between(node.this.name, lo, hi)
        return P.TRUE
    if isinstance(node, exp.In) and _is_source_column(node.this) and not node.args.get(
            "query"):
        values = [literal(v) for v in node.expressions]
        if values and all(ok for ok, _ in values):
            return P.In(node.this.name, tuple(v for _, v in values))
        return P.TRUE
    if isinstance(node, exp.Is) and _is_source_column(node.this) and isinstance(
            node.expression, exp.Null):
        return P.IsNull(node.this.name)
    return P.TRUE
