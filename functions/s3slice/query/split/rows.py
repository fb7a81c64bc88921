"""The split of a query that combines rows without aggregating them (``DISTINCT``,
``ORDER BY``, ``LIMIT``): each batch's candidate rows, the final plan keeps the answer's.
"""

from __future__ import annotations

from sqlglot import exp

from s3slice.core.errors import QueryError
from s3slice.query.split.plan import PARTIALS_TABLE
from s3slice.query.split.sql import (
    PREFIX,
    col,
    integer,
    is_star,
    limit_of,
    position,
    select_sql,
    strip,
    unalias,
)


def rows_split(select: exp.Select) -> tuple[str, str]:
    """DISTINCT / ORDER BY / LIMIT without aggregates: each batch's candidate rows, their
    order keys carried as hidden columns; the final plan orders, limits and drops them.
    Returns the partial and the final plan's SQL."""
    outputs = list(select.expressions)
    star = any(is_star(e) for e in outputs)
    distinct = select.args.get("distinct") is not None
    aliases: dict[str, exp.Expr] = {e.alias: e.this for e in outputs if isinstance(e, exp.Alias)}
    selected = {strip(unalias(e)) for e in outputs}
    keys: list[exp.Ordered] = []
    hidden: list[exp.Expr] = []
    order = select.args.get("order")
    for i, ordered in enumerate(order.expressions if order is not None else []):
        assert isinstance(ordered, exp.Ordered)
        node = ordered.this
        if star and isinstance(node, exp.Literal) and not node.is_string:
            # A position in ``SELECT *``: the same column of the partial (hidden keys come
            # after the selected ones) and of the final plan's rows.
            keys.append(exp.Ordered(this=exp.Literal.number(integer(node, "ORDER BY")),
                                    desc=ordered.args.get("desc"),
                                    nulls_first=ordered.args.get("nulls_first")))
            continue
        expr = position(node, outputs, "ORDER BY") if not star else None
        if expr is None and isinstance(node, exp.Column) and not node.table and (
                node.name in aliases):
            expr = aliases[node.name].copy()
        if expr is None:
            expr = node.copy()
        if distinct and not star and strip(expr) not in selected:
            raise QueryError(f"the query cannot be split across batches: ORDER BY "
                             f"{node.sql()} with SELECT DISTINCT orders by a value that is "
                             f"not selected")
        name = f"{PREFIX}o{i}"
        hidden.append(exp.alias_(expr, exp.to_identifier(name, quoted=True)))
        keys.append(exp.Ordered(this=col(name), desc=ordered.args.get("desc"),
                                nulls_first=ordered.args.get("nulls_first")))
    limit = limit_of(select)

    partial = select.copy()
    partial.set("expressions", [e.copy() for e in outputs] + hidden)
    partial.set("offset", None)
    partial.set("limit", None)
    if not keys:
        partial.set("order", None)
    else:
        partial.set("order", exp.Order(expressions=[k.copy() for k in keys]))
    if limit is not None and limit[0] >= 0:
        partial.set("limit", exp.Limit(expression=exp.Literal.number(limit[0] + limit[1])))

    inner = exp.select(exp.Star()).from_(exp.to_table(PARTIALS_TABLE))
    if distinct:
        inner.set("distinct", exp.Distinct())
    if keys:
        inner.set("order", exp.Order(expressions=keys))
    if limit is not None:
        if limit[0] >= 0:
            inner.set("limit", exp.Limit(expression=exp.Literal.number(limit[0])))
        if limit[1]:
            inner.set("offset", exp.Offset(expression=exp.Literal.number(limit[1])))
    final: exp.Select = inner
    if hidden:
        final = exp.select(exp.Star(except_=[col(h.alias) for h in hidden])).from_(
            exp.Subquery(this=inner, alias=exp.TableAlias(
                this=exp.to_identifier(PARTIALS_TABLE))))
    return select_sql(partial), select_sql(final)
