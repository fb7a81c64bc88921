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

from s3slice.query.coercion.comparisons import rewrite_comparisons
from s3slice.query.sqlglot.dialect import S3SelectDialect


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

    def cast(operand: exp.Expr, literals: list[exp.Expr],
             node: exp.Expr) -> tuple[exp.Expr, list[exp.Expr]] | None:
        column = _text_column(operand, texts)
        numbers = [t for t in (_number(x) for x in literals) if t is not None]
        # IN: any of its values a number; a comparison or BETWEEN: every literal
        enough = numbers if isinstance(node, exp.In) else len(numbers) == len(literals)
        if column is None or not enough:
            return None
        whole = all("." not in t and "e" not in t.lower() for t in numbers)
        return exp.cast(column.copy(), "BIGINT" if whole else "DOUBLE"), literals

    if not rewrite_comparisons(tree, cast):
        return sql
    return tree.sql(dialect=S3SelectDialect, comments=False)
