"""What of a row filter a scanning reader may be handed.

polars' Parquet reader skips row groups by their statistics with whatever filter its scan
is given, and judges an expression of a column by the statistics of the column: for
``c0 - 2 < 3571596662`` on a ``uint32`` column of ``[0, 5, 10]`` it computes the bounds
``0 - 2`` and ``10 - 2``, which wrap, and skips a group whose rows ``5`` and ``10`` the
same filter keeps in memory. Arithmetic (``+ - *``, negation) wraps at every integer
width this way, and any other transformation of a column may bound it wrongly too.

So a scan is handed only comparisons of a bare column with a constant (``=``, ``<>``,
``<``, ``<=``, ``>``, ``>=``, ``BETWEEN``, ``IN``, ``IS [NOT] NULL``), combined by
``AND``, ``OR`` and ``NOT``: the leaves of the pruning predicate
(:mod:`.predicate`), which the analysis reads off the very text polars runs, and which
polars' statistics judge exactly as its filter judges the rows (every integer width, both
signs, floats with NaN and infinities, dates, timestamps, strings, decimals, at the
types' edges: ``tests/functional/test_reader_predicates.py``). The rest of the filter runs
on the decoded frame.
"""

from __future__ import annotations

from s3slice.query.pruning import predicate as P


def exact(pred: P.Pred) -> bool:
    """Whether ``pred`` restates its part of the filter exactly (no opaque part), every
    constant with the SQL text polars reads it by."""
    match pred:
        case P.Cmp():
            return pred.text is not None
        case P.Between(low=lo, high=hi, sqls=(lo_sql, hi_sql)):
            return None not in (lo_sql or P.literal_sql(lo), hi_sql or P.literal_sql(hi))
        case P.In(values=values, sqls=sqls):
            texts = sqls if sqls is not None else tuple(P.literal_sql(v) for v in values)
            return bool(values) and None not in texts
        case P.IsNull():
            return True
        case P.And(items=items) | P.Or(items=items):
            return bool(items) and all(exact(p) for p in items)
        case P.Not(item=item):
            return exact(item)
    return False


def _conjuncts(pred: P.Pred) -> list[P.Pred]:
    if isinstance(pred, P.And):
        return [c for item in pred.items for c in _conjuncts(item)]
    return [pred]


def _name(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


def _text(pred: P.Pred) -> str:
    """The SQL text of an :func:`exact` predicate."""
    match pred:
        case P.Cmp(column=c, op=op):
            return f"{_name(c)} {op} {pred.text}"
        case P.Between(column=c, low=lo, high=hi, sqls=(lo_sql, hi_sql)):
            return (f"{_name(c)} BETWEEN {lo_sql or P.literal_sql(lo)} "
                    f"AND {hi_sql or P.literal_sql(hi)}")
        case P.In(column=c, values=values, sqls=sqls):
            texts = sqls if sqls is not None else tuple(P.literal_sql(v) for v in values)
            return f"{_name(c)} IN ({', '.join(str(t) for t in texts)})"
        case P.IsNull(column=c):
            return f"{_name(c)} IS NULL"
        case P.And(items=items):
            return " AND ".join(f"({_text(p)})" for p in items)
        case P.Or(items=items):
            return " OR ".join(f"({_text(p)})" for p in items)
        case P.Not(item=item):
            return f"NOT ({_text(item)})"
    raise AssertionError(f"not an exact predicate: {pred!r}")


def scan_where(predicate: P.Pred, where: str) -> tuple[str | None, bool]:
    """(the filter to hand a scanning reader, or None for none; whether it is the whole
    of ``where``, whose pruning predicate is ``predicate``). A filter that is all
    comparisons of bare columns with constants goes whole, as its own text (the plain
    read's fast path); otherwise the conjuncts that are, restated, and the caller
    filters the decoded frame by all of ``where``."""
    if exact(predicate):
        return where, True
    safe = [p for p in _conjuncts(predicate) if exact(p)]
    if not safe:
        return None, False
    return " AND ".join(f"({_text(p)})" for p in safe), False
