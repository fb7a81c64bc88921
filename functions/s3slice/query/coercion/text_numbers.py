"""A text column compared with a number compares numbers, for every operator and for IN.

``region = 5`` (``<>``, ``<``, ``<=``, ``>``, ``>=``, ``BETWEEN``, ``IN``): the text is
converted to a number (a whole number when every literal is one, else a double) and
compared as numbers, as S3 Select (MinIO) and DuckDB do; a value that is no number fails
the query with a :class:`QueryError` naming the column and the value (MinIO: "Could not
convert … to a number", DuckDB: "Could not convert string … to INT32"), never an answer
that silently matches nothing. polars alone compares ``=`` and ``IN`` as text and refuses
``>``. Statistics of a text column never prune such a comparison (text order is not
numeric order): see :func:`s3slice.query.pruning.bounds.compare_all`.

Run by :func:`s3slice.query.polars.sql.execute` once the columns' types are known.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from s3slice.query.sqlglot.dialect import S3SelectDialect

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ,
                exp.NullSafeNEQ)


def _number(node: exp.Expr) -> str | None:
    """The text of a number literal (``5``, ``-2.5``), else None."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Neg):
        inner = _number(node.this)
        return None if inner is None else f"-{inner}"
    if isinstance(node, exp.Literal) and not node.is_string:
        return str(node.this)
    return None


def _text_column(node: exp.Expr, texts: frozenset[str]) -> exp.Column | None:
    while isinstance(node, exp.Paren):
        node = node.this
    return node if isinstance(node, exp.Column) and node.name in texts else None


def as_numbers(sql: str, texts: frozenset[str]) -> str:
    """``sql`` with each text column compared with number literals cast to a number;
    unchanged when there is none."""
    tree = sqlglot.parse_one(sql, read=S3SelectDialect)
    changed = False

    def cast(column: exp.Column, literals: list[exp.Expr]) -> exp.Expr:
        nonlocal changed
        changed = True
        whole = all("." not in t and "e" not in t.lower()
                    for t in (_number(x) or "" for x in literals))
        return exp.cast(column.copy(), "BIGINT" if whole else "DOUBLE")

    for node in list(tree.find_all(*_COMPARISONS, exp.Between, exp.In)):
        if isinstance(node, exp.Between):
            column = _text_column(node.this, texts)
            bounds = [node.args["low"], node.args["high"]]
            if column is not None and all(_number(b) is not None for b in bounds):
                node.set("this", cast(column, bounds))
        elif isinstance(node, exp.In):
            column = _text_column(node.this, texts)
            items = node.expressions
            if (column is not None and not node.args.get("query") and items
                    and any(_number(i) is not None for i in items)):
                node.set("this", cast(column, [i for i in items if _number(i) is not None]))
        else:
            for side, other in (("this", node.expression), ("expression", node.this)):
                column = _text_column(node.args[side], texts)
                if column is not None and _number(other) is not None:
                    node.set(side, cast(column, [other]))
                    break
    if not changed:
        return sql
    return tree.sql(dialect=S3SelectDialect, comments=False)
