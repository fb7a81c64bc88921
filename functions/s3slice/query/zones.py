"""A zone-less timestamp literal against a time-zone-aware column means UTC.

``TO_TIMESTAMP('2024-06-01T00:00:00Z')``, ``UTCNOW()``, ``CAST('…' AS TIMESTAMP)`` and
``TIMESTAMP '…'`` are polars timestamps without a zone (an offset, when the text has one,
is applied first: the literal is the UTC wall time). polars refuses to compare one with a
column of ``Datetime(unit, zone)``; S3 Select and DuckDB (with its default ``TimeZone``
``UTC``, as on Lambda) read it as UTC. So where such a literal meets a zoned column
(``=``, ``<>``, ``<``, ``<=``, ``>``, ``>=``, ``IS [NOT] DISTINCT FROM``, ``BETWEEN``,
``IN``), it is written as the text ``'… +00:00'``, which polars reads in the column's own
type: the same instant, at the column's unit (ns exact), in its zone; see
:func:`with_utc_literals`. A naive column compares wall times.

Run by :func:`s3slice.query.polars_sql.execute` once the frames (and so the columns'
types) are known: the filter, the query and the statistics' comparisons (pruning) are
rewritten by this one rule, so pruning stays exact.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl
import sqlglot
from sqlglot import exp

from s3slice.query.dialect import S3SelectDialect

_TIMESTAMP_TYPES = (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.DATETIME)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ,
                exp.NullSafeNEQ)


def with_utc_literals(sql: str, columns: Mapping[str, pl.Datetime]) -> str:
    """``sql`` with each zone-less timestamp literal compared with one of the timestamp
    ``columns`` (or a ``DATE_ADD`` of one) read exactly as UTC: a zoned column at
    milliseconds or microseconds is compared as ``CAST(ts AS TIMESTAMP)`` (its UTC wall
    time, at microseconds: exact); one at nanoseconds meets the literal as UTC text
    (``'…+00:00'``), which polars reads in the column's own type; a naive nanosecond column
    meets it as text too (polars would compare it at microseconds). Unchanged when there
    is none."""
    tree = sqlglot.parse_one(sql, read=S3SelectDialect)
    changed = False

    def fix(column: exp.Expr, dtype: pl.Datetime | None,
            literals: list[exp.Expr]) -> tuple[exp.Expr, list[exp.Expr]]:
        nonlocal changed
        texts = [_naive_literal(e) for e in literals]
        if dtype is None or all(t is None for t in texts):
            return column, literals
        changed = True
        if dtype.time_zone is not None and dtype.time_unit != "ns":
            return exp.cast(column.copy(), exp.DataType.Type.TIMESTAMP), literals
        suffix = "" if dtype.time_zone is None else "+00:00"
        return column, [e if t is None else exp.Literal.string(t + suffix)
                        for e, t in zip(literals, texts, strict=True)]

    for node in list(tree.find_all(*_COMPARISONS, exp.Between, exp.In)):
        if isinstance(node, exp.Between):
            this, (low, high) = fix(node.this, _type_of(node.this, columns),
                                    [node.args["low"], node.args["high"]])
            node.set("this", this)
            node.set("low", low)
            node.set("high", high)
        elif isinstance(node, exp.In):
            if not node.args.get("query"):
                this, items = fix(node.this, _type_of(node.this, columns), node.expressions)
                node.set("this", this)
                node.set("expressions", items)
        else:
            for side, other in (("this", "expression"), ("expression", "this")):
                dtype = _type_of(node.args[side], columns)
                if dtype is not None:
                    this, (that,) = fix(node.args[side], dtype, [node.args[other]])
                    node.set(side, this)
                    node.set(other, that)
                    break
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


def _type_of(node: exp.Expr, columns: Mapping[str, pl.Datetime]) -> pl.Datetime | None:
    """The type of ``node`` when it is one of ``columns``, or one moved by an interval
    (DATE_ADD); else None."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column):
        return columns.get(node.name)
    if isinstance(node, exp.Add | exp.Sub) and _has_interval(node.expression):
        return _type_of(node.this, columns)
    return None


def _has_interval(node: exp.Expr) -> bool:
    return node.find(exp.Interval) is not None
