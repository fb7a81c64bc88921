"""Making an :class:`~s3slice.query.analysis.Analysis`: a plain filter by polars' own parse
(:mod:`.polars.plain_filter`), anything else by sqlglot's (:mod:`.sqlglot.analysis`, imported
only then); and its :class:`~s3slice.query.split.plan.Split`, planned by sqlglot
(:mod:`.split.planner`) only for a query that may combine rows.

An analysis depends only on its query (``UTCNOW()`` aside), so :func:`analyze` keeps the
last ones it made: the cold start's check and every read of the same query share one.
"""

from __future__ import annotations

import functools

from s3slice.core.errors import FilterSyntaxError, QueryError, plain
from s3slice.core.model import Query
from s3slice.query.analysis import SOURCE_TABLE, Analysis, reads_the_clock
from s3slice.query.depth import check_depth, too_deep
from s3slice.query.polars.plain_filter import analyze_plain_filter
from s3slice.query.polars.sql import check_text
from s3slice.query.split.plan import Split, combines_rows

#: How many analyses :func:`analyze` keeps (a function serves one query, or a few).
CACHE_SIZE = 64


def analyze(query: Query) -> Analysis:
    """Parse and check a query. Raises a :class:`QueryError` naming what is wrong.

    An equal query's analysis is reused (the same object; it is immutable), unless the
    query calls ``UTCNOW()``, whose value is fixed at analysis. A text nested deeper
    than :data:`~s3slice.query.depth.MAX_DEPTH` is refused before any parser sees it."""
    for field, text in (("sql", query.sql), ("filter", query.filter)):
        if text is not None:
            check_depth(text, field)
    if any(reads_the_clock(text) for text in (query.sql, query.filter) if text is not None):
        return _analyze(query)
    try:
        hash(query)
    except TypeError:  # a query built by hand with a list of columns
        return _analyze(query)
    return _cached(query)


@functools.lru_cache(maxsize=CACHE_SIZE)
def _cached(query: Query) -> Analysis:
    return _analyze(query)


def _analyze(query: Query) -> Analysis:
    try:
        return _parsed(query)
    except RecursionError as e:  # a construct the depth check does not count
        raise too_deep("sql" if query.sql is not None else "filter") from e


def _parsed(query: Query) -> Analysis:
    found = analyze_plain_filter(query)
    if found is not None:
        return found
    from s3slice.query.sqlglot import analysis as sqlglot_analysis  # only when needed
    try:
        if query.sql is not None:
            return sqlglot_analysis.analyze_sql(query)
        return sqlglot_analysis.analyze_filter(query)
    except QueryError:
        raise
    except (ValueError, TypeError, KeyError) as e:  # sqlglot internals on odd input
        raise FilterSyntaxError(f"cannot analyse the query: {plain(str(e))}") from e


def split_for(analysis: Analysis) -> Split | None:
    """The split of an analysed query: its SQL's, or for ``columns``/``filter`` with a
    ``limit`` the limit's over the rows each piece already filtered and projected; None
    when the query does not combine objects. Raises :class:`QueryError` naming what
    cannot be split exactly."""
    if not combines_rows(analysis):
        return None
    from s3slice.query.split.planner import split_query  # only when needed
    try:
        if analysis.sql is not None:
            split = split_query(analysis.sql)
        else:
            split = split_query(f"SELECT * FROM {SOURCE_TABLE} LIMIT {analysis.query.limit}")
    except RecursionError as e:
        raise too_deep("sql") from e
    if split is not None:  # refused now, before any byte is read, not when the plans run
        for text in (split.partial_sql, split.final_sql):
            check_text(text, field="sql")
    return split
