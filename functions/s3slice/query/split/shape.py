"""What a query is to the split: which aggregates have an exact partial form, which
constructs no split can make exact, and whether a query combines rows across batches at
all (so that each batch's own answer does not stand).
"""

from __future__ import annotations

from sqlglot import exp

from s3slice.core.errors import QueryError
from s3slice.query.split.sql import agg_name

# The aggregates split exactly; every other aggregate is refused by name.
SIMPLE = (exp.Count, exp.Sum, exp.Min, exp.Max, exp.Avg)
VARIANCE = (exp.Stddev, exp.StddevSamp, exp.Variance)
# Aggregates polars SQL knows that sqlglot does not (parsed as anonymous functions).
ANONYMOUS_AGGREGATES = frozenset({
    "quantile_cont", "quantile_disc", "percentile_cont", "percentile_disc", "median",
    "mode", "first", "last", "array_agg", "string_agg", "listagg", "corr", "covar",
    "covar_pop", "covar_samp", "any_value", "arbitrary", "bool_and", "bool_or", "every",
    "bit_and", "bit_or", "bit_xor", "count_if", "max_by", "min_by", "arg_max", "arg_min",
    "approx_count_distinct", "approx_distinct", "approx_quantile", "approx_percentile",
    "kurtosis", "skewness", "entropy", "product", "histogram", "stddev_pop", "var_pop",
    "variance_pop", "regr_slope", "regr_intercept",
})


def known_aggregates(node: exp.Expr) -> exp.Expr:
    """polars' ``VAR`` (sqlglot leaves it anonymous) is ``VARIANCE``."""
    if isinstance(node, exp.Anonymous) and str(node.name).lower() == "var" and len(
            node.expressions) == 1:
        return exp.Variance(this=node.expressions[0].copy())
    return node


def clauses(select: exp.Select) -> list[exp.Expr]:
    """The clauses of ``select`` an aggregate may appear in: its outputs, HAVING, ORDER BY."""
    out: list[exp.Expr] = list(select.expressions)
    out.extend(select.args[k] for k in ("having", "order") if select.args.get(k) is not None)
    return out


def refuse_everywhere(tree: exp.Expr) -> None:
    """Constructs no split can make exact, wherever they are."""
    for window in tree.find_all(exp.Window):
        raise QueryError(f"the query cannot be split across batches: the window function "
                         f"{window.sql()}")
    for within in tree.find_all(exp.WithinGroup):
        raise QueryError(f"the query cannot be split across batches: {within.sql()}")
    for filtered in tree.find_all(exp.Filter):
        raise QueryError(f"the query cannot be split across batches: the aggregate filter "
                         f"{filtered.sql()}")
    for grouping in tree.find_all(exp.Rollup, exp.Cube, exp.GroupingSets):
        raise QueryError(f"the query cannot be split across batches: GROUP BY "
                         f"{grouping.sql()}")
    for group in tree.find_all(exp.Group):
        for key in ("rollup", "cube", "grouping_sets"):
            if group.args.get(key):
                raise QueryError(f"the query cannot be split across batches: GROUP BY "
                                 f"{key.upper().replace('_', ' ')}")
    for node in tree.find_all(exp.AggFunc, exp.Anonymous):
        if isinstance(node, exp.Anonymous) and str(node.name).lower() not in (
                ANONYMOUS_AGGREGATES):
            continue
        if isinstance(node, SIMPLE + VARIANCE):
            continue
        raise QueryError(f"the query cannot be split across batches: the aggregate "
                         f"{agg_name(node)} ({node.sql()}) has no exact partial form")


def combines(tree: exp.Expr) -> bool:
    """Whether anything in ``tree`` combines rows (so per-batch answers do not stand)."""
    if tree.find(exp.AggFunc, exp.Join) is not None:
        return True
    if any((isinstance(q, exp.Union) and q.args.get("distinct")) or isinstance(
            q, exp.Intersect | exp.Except) for q in tree.find_all(exp.SetOperation)):
        return True
    if any(q is not tree and not _derived(q) for q in queries(tree)):
        return True  # a subquery in a condition or a select list reads every row
    return any(q.args.get(k) is not None for q in tree.find_all(exp.Select)
               for k in ("group", "having", "distinct", "order", "limit", "offset"))


def queries(tree: exp.Expr) -> list[exp.Expr]:
    """The SELECTs and set operations of ``tree``, itself included."""
    return list(tree.find_all(exp.Select, exp.SetOperation))


def _derived(query: exp.Expr) -> bool:
    """Whether a nested query is a row source: a table in FROM, a CTE's body, a branch of
    a set operation that is one."""
    parent = query.parent
    if isinstance(parent, exp.CTE):
        return True
    if isinstance(parent, exp.SetOperation):
        return parent.parent is None or _derived(parent)
    if isinstance(parent, exp.Subquery):
        return isinstance(parent.parent, exp.From)
    return False


def nesting(tree: exp.Expr) -> str:
    """The construct that makes ``tree`` more than one SELECT, named."""
    if isinstance(tree, exp.SetOperation):
        return tree.key.upper()
    if tree.args.get("with") or tree.args.get("with_"):
        return "WITH (a common table expression)"
    if tree.find(exp.Join) is not None:
        return "JOIN"
    nested = next(q for q in queries(tree) if q is not tree)
    return f"the subquery ({nested.sql()})"
