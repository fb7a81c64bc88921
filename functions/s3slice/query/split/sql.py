"""The sqlglot tree helpers the split's plans are built with: the names they give hidden
columns, a query's LIMIT and OFFSET, structural keys of expressions, and the names polars
SQL gives unaliased outputs (which the final plan must reproduce).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from s3slice.core.errors import QueryError
from s3slice.query.sqlglot.dialect import S3SelectDialect


class PolarsOrder(S3SelectDialect):
    """The S3 Select dialect with polars' null ordering: nulls sort as the largest values
    (last ascending, first descending). sqlglot's default dialect takes them for the
    smallest, so a plain ``ORDER BY x DESC`` would be re-emitted meaning the other order
    once an ordering is rebuilt."""

    NULL_ORDERING = "nulls_are_large"


#: The prefix of the hidden columns the plans add (group keys, states, order keys).
PREFIX = "__s3slice_"


def agg_name(node: exp.Expr) -> str:
    """An aggregate's name as an error message gives it (``MEDIAN``, ``STDDEV_POP``)."""
    if isinstance(node, exp.Anonymous):
        return str(node.name).upper()
    return node.sql_name() if isinstance(node, exp.Func) else node.key.upper()


def aggregates(node: exp.Expr) -> list[exp.Expr]:
    """The outermost aggregate calls within ``node``."""
    found: list[exp.Expr] = []

    def walk(n: exp.Expr) -> None:
        if isinstance(n, exp.AggFunc):
            found.append(n)
            return
        for child in n.iter_expressions():
            walk(child)

    walk(node)
    return found


def limit_of(select: exp.Select) -> tuple[int, int] | None:
    """(limit, offset) of ``select``, None without LIMIT or OFFSET."""
    limit = select.args.get("limit")
    offset = select.args.get("offset")
    if limit is None and offset is None:
        return None
    if isinstance(limit, exp.Fetch):
        raise QueryError("the query cannot be split across batches: FETCH")
    n = integer(limit.expression, "LIMIT") if limit is not None else -1
    m = integer(offset.expression, "OFFSET") if offset is not None else 0
    return n, m


def integer(node: exp.Expr, what: str) -> int:
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return int(node.this)
        except ValueError:
            pass
    raise QueryError(f"the query cannot be split across batches: {what} {node.sql()} is "
                     f"not a whole number")


def strip(node: exp.Expr) -> str:
    """A key for structural equality: the SQL with table qualifiers dropped."""
    def unqualify(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Column) and n.table:
            return exp.column(n.this.copy())
        return n
    return node.copy().transform(unqualify).sql(comments=False)


def unalias(node: exp.Expr) -> exp.Expr:
    return node.this if isinstance(node, exp.Alias) else node


def position(node: exp.Expr, outputs: Sequence[exp.Expr], what: str) -> exp.Expr | None:
    """The output ``node`` names by position (``ORDER BY 2``), else None."""
    if isinstance(node, exp.Literal) and not node.is_string:
        i = integer(node, what)
        if not 1 <= i <= len(outputs):
            raise QueryError(f"{what} {i}: the query has {len(outputs)} output columns")
        return unalias(outputs[i - 1]).copy()
    return None


def is_star(e: exp.Expr) -> bool:
    return isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this,
                                                                                 exp.Star))


def col(name: str) -> exp.Column:
    return exp.column(exp.to_identifier(name, quoted=True))


def select_sql(select: exp.Select) -> str:
    return select.sql(dialect=PolarsOrder, comments=False)  # polars runs no comment


# -------------------------------------------------------------------------- polars naming

def polars_name(node: exp.Expr) -> str | None:
    """The name polars SQL gives an unaliased output expression: its leftmost column
    (``len`` for ``COUNT(*)``, ``literal`` for a constant, a CASE's first result); None
    when unknown (``Split.final(..., schema=)`` then names it by asking polars)."""
    if isinstance(node, exp.Alias):
        return node.alias
    if isinstance(node, exp.Column):
        return None if isinstance(node.this, exp.Star) else node.name
    if isinstance(node, exp.Count) and isinstance(node.this, exp.Star):
        return "len"
    if isinstance(node, exp.Literal | exp.Null | exp.Boolean | exp.Neg):  # -x is 0 - x
        return "literal"
    if isinstance(node, exp.Case):
        ifs = node.args.get("ifs") or []
        return polars_name(ifs[0].args["true"]) if ifs else None
    if isinstance(node, exp.Distinct):
        return polars_name(node.expressions[0]) if node.expressions else None
    if isinstance(node, exp.Binary):
        return polars_name(node.left)
    inner = node.args.get("this")
    if isinstance(inner, exp.Expr):
        return polars_name(inner)
    if node.expressions:
        return polars_name(node.expressions[0])
    return None


def output_names(outputs: Sequence[exp.Expr]) -> list[str]:
    """The names of an aggregate query's outputs, repeated names suffixed ``:1``, ``:2``,
    ... as polars does; an unknown name is positional (``_3``)."""
    names: list[str] = []
    seen: dict[str, int] = {}
    for i, e in enumerate(outputs):
        base = polars_name(e) or f"_{i + 1}"
        if base in seen:
            seen[base] += 1
            names.append(f"{base}:{seen[base]}")
        else:
            seen[base] = 0
            names.append(base)
    return names
