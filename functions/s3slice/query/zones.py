"""A zone-less timestamp literal against a time-zone-aware column means UTC.

``TO_TIMESTAMP('2024-06-01T00:00:00Z')``, ``UTCNOW()``, ``CAST('…' AS TIMESTAMP)`` and
``TIMESTAMP '…'`` are polars timestamps without a zone (an offset, when the text has one,
is applied first: the literal is the UTC wall time). polars refuses to compare one with a
column of ``Datetime(unit, zone)``; S3 Select and DuckDB (with its default ``TimeZone``
``UTC``, as on Lambda) read it as UTC. So where such a literal meets a zoned column
(``=``, ``<>``, ``<``, ``<=``, ``>``, ``>=``, ``IS [NOT] DISTINCT FROM``, ``BETWEEN``,
``IN``), it is written as the text ``'… +00:00'``, which polars reads in the column's own
type: the same instant, at the column's unit (ns exact), in its zone. A naive column
compares wall times, as before.

Run by :func:`s3slice.query.polars_sql.execute` once the frames (and so the columns'
types) are known: the filter, the query and the statistics' comparisons (pruning) are
rewritten by this one rule, so pruning stays exact.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from s3slice.query.dialect import S3SelectDialect

_TIMESTAMP_TYPES = (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.DATETIME)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ,
                exp.NullSafeNEQ)


def with_utc_literals(sql: str, zoned: frozenset[str]) -> str:
    """``sql`` with each zone-less timestamp literal compared with a zoned column (or a
    ``DATE_ADD`` of one) written as UTC text; unchanged when there is none."""
    tree = sqlglot.parse_one(sql, read=S3SelectDialect)
    changed = False

    def utc(node: exp.Expr) -> exp.Expr:
        nonlocal changed
        text = _naive_literal(node)
        if text is None:
            return node
        changed = True
        return exp.Literal.string(f"{text}+00:00")

    for node in list(tree.find_all(*_COMPARISONS, exp.Between, exp.In)):
        if isinstance(node, exp.Between):
            if _is_zoned(node.this, zoned):
                for key in ("low", "high"):
                    node.set(key, utc(node.args[key]))
        elif isinstance(node, exp.In):
            if _is_zoned(node.this, zoned) and not node.args.get("query"):
                node.set("expressions", [utc(e) for e in node.expressions])
        elif _is_zoned(node.this, zoned):
            node.set("expression", utc(node.expression))
        elif _is_zoned(node.expression, zoned):
            node.set("this", utc(node.this))
    if not changed:
        return sql
    return tree.sql(dialect=S3SelectDialect, comments=False)


def _naive_literal(node: exp.Expr) -> str | None:
    """The text of a zone-less timestamp literal (``CAST('…' AS TIMESTAMP)``), else None."""
    while isinstance(node, exp.Paren):
        node = node.this
    if not (isinstance(node, exp.Cast) and node.to.this in _TIMESTAMP_TYPES
            and isinstance(node.this, exp.Literal) and node.this.is_string):
        return None
    text = str(node.this.this).strip()
    clock = text.partition(" ")[2] or text.partition("T")[2]
    if text.endswith(("Z", "z")) or "+" in clock or "-" in clock:
        return None  # it has an offset: polars reads it as it is
    return text


def _is_zoned(node: exp.Expr, zoned: frozenset[str]) -> bool:
    """Whether ``node`` is a zoned column, or one moved by an interval (DATE_ADD)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column):
        return node.name in zoned
    if isinstance(node, exp.Add | exp.Sub):
        return _is_zoned(node.this, zoned) and _has_interval(node.expression)
    return False


def _has_interval(node: exp.Expr) -> bool:
    return node.find(exp.Interval) is not None
