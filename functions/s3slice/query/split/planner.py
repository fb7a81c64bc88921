"""The query split: one query as a partial plan per batch and a final plan over the partials.

A query that combines rows across objects (an aggregate, ``GROUP BY``, ``DISTINCT``,
``ORDER BY``, ``LIMIT``) is answered exactly from many batches of rows in two steps::

    split = split_query(sql)                  # None: the query does not combine objects
    partials = [split.partial(batch) for batch in batches]     # the map, one per batch
    answer = split.final(partials, schema=batch_schema)        # the reduce
    answer = split.run(batches, schema=batch_schema)           # both, in one process

The final step needs at least one partial frame, in batch order (``LIMIT`` without
``ORDER BY`` keeps the first rows); with no batches at all, the partial of an empty batch
of the schema (``run`` makes it). Partial frames are plain frames of ordinary types
(Parquet round-trips them), concatenated with ``how="vertical_relaxed"``.

``split_query(sql)`` takes the SQL polars runs over the table ``s3object`` (the analysed
query's ``Analysis.sql``: path expressions already rewritten into the
``__s3slice_path_N`` columns, which each batch must carry, as ``Analysis.finish`` adds
them). It returns a :class:`Split`, or None when each batch's own answer stands and the
answers are simply concatenated (no aggregate, grouping, DISTINCT, order or limit). A
query that cannot be split exactly raises :class:`~s3slice.core.errors.QueryError` naming the
construct (a median, a percentile, a window function, a subquery, ...), before any batch
is read.

``Split.partial_sql`` runs over one batch's rows (table ``s3object``) and yields a frame
of partial states; ``Split.final_sql`` runs over the concatenation of the partial frames
(table ``partials``) and yields the original query's answer: the same rows, column names
and order. ``Split.final(..., schema=...)`` also casts each column to the type polars
gives the original query over rows of that schema (found by running the query over no
rows; an exact integer sum wider than polars' type keeps its own), and names it as polars
does; without a schema the names are ``final_sql``'s own,
which follow polars' naming for the usual shapes. Both plans are built as sqlglot trees,
read and written in the S3 Select dialect with polars' null ordering (nulls largest).

A name in GROUP BY that is both an output alias and a source column is taken as the alias
(the text alone cannot tell; polars takes the column and then refuses the query): with a
schema, ``Split.output_schema`` runs the original query over no rows, so calling it on
the first batch's schema surfaces every error polars would raise, before the map.

What each construct becomes (partial per batch -> final over the partials):

================================  ===============================  ==========================
construct                         partial (per group of a batch)   final (per group)
================================  ===============================  ==========================
``GROUP BY k``                    ``k AS __s3slice_k0``, grouped   grouped by ``__s3slice_k0``
``COUNT(*)``, ``COUNT(x)``        ``COUNT(...) AS c``              ``COALESCE(SUM(c), 0)``
``SUM(x)``                        ``SUM(x * CAST(1 AS INT128))``   ``SUM(s)``, cast to the answer
                                  ``AS s`` (exact), ``MIN(x)`` (a  type by w's (null when every
                                  witness w of x's type)           batch's is: all null)
``MIN(x)``, ``MAX(x)``            ``MIN(x)``, ``MAX(x)``           ``MIN``, ``MAX`` of those
``AVG(x)``                        exact ``s`` as for SUM,          ``CAST(SUM(s) AS DOUBLE) /
                                  ``COUNT(x) AS n``, witness w     NULLIF(SUM(n), 0)`` (REAL
                                                                   for a Float32 x)
``STDDEV``/``VARIANCE`` (sample:  ``COUNT(x) AS n, AVG(x) AS m,``  Chan's merge: with ``M`` the
polars' ``STDDEV``,               ``COALESCE(VARIANCE(x) * (n-1),  pooled mean (a window over
``STDDEV_SAMP``, ``VAR``,         0) AS q`` (q: the sum of         the partials), ``Q = SUM(q)
``VARIANCE``, ``VAR_SAMP``)       squared deviations, M2)          + SUM(n * (m - M)^2)``,
                                                                   ``Q / (SUM(n) - 1)`` when
                                                                   ``SUM(n) > 1``; STDDEV its
                                                                   ``SQRT``
``AGG(DISTINCT x)`` (COUNT, SUM,  ``x AS __s3slice_d0`` joins the  ``AGG(DISTINCT d0)``; the
AVG; MIN/MAX ignore DISTINCT)     partial's grouping               other aggregates merge over
                                                                   the finer groups as above
``HAVING``, expressions over      nothing                          applied to the merged
aggregates, DISTINCT of an                                         aggregates
aggregate query, ORDER BY/LIMIT
``ORDER BY o LIMIT k OFFSET j``   the rows, their order keys as    ``ORDER BY`` the keys,
(no aggregate)                    hidden columns, top ``k + j``    ``LIMIT k OFFSET j``, the
                                  by the same order                hidden keys dropped
``LIMIT k`` without order         the first ``k + j`` rows         the first ``k`` (after
                                                                   ``j``) of those, in batch
                                                                   order
``SELECT DISTINCT``               ``SELECT DISTINCT`` (with its    ``SELECT DISTINCT *`` of
                                  order and limit, as above)       the partials
================================  ===============================  ==========================

Numerics. Counts, integer and decimal sums, MIN and MAX are exact for any batching and
any values the types allow: :mod:`.types` sums each partial in Int128 (kept as
Decimal(38, 0) in the partial frame, which Parquet holds) and types the merged sum by a
witness of the argument's own type (``final_sql`` is a template :meth:`Split.final_plan`
resolves for the partials' schema). SUM of Int32/UInt32 answers an exact Int64 where
polars keeps the type and wraps; an Int64/UInt64 sum beyond 64 bits answers an exact
Decimal(38, 0) (as DuckDB's HUGEINT), never a wrapped value; an integer AVG is the
exact sum over the count, rounded once to Float64. STDDEV/VARIANCE take
``x * CAST(1 AS DOUBLE)`` (a Float32 is
merged in Float64 and rounded to Float32 at the end, as polars types it), and for an
integer, decimal or boolean argument the partial and pooled means of the merge come from
the exact sums relative to the group's least value, so the merge adds no rounding of its
own to polars' batch variances, however far from zero the values are. Floating-point
sums are regrouped
(batch by batch), so they equal the one-pass sum within rounding: a relative error of a
few ulps times the number of terms (the tests allow ``1e-9`` relative on data without
cancellation). AVG divides the merged sum by the merged count. Variance does not use
sum-of-squares (which cancels catastrophically when the mean is large against the spread):
each batch gives count, mean and M2 (polars' own variance over the batch, times n - 1),
and the final plan merges them with Chan et al.'s parallel formula, pooled mean first,
then ``M2 = sum(M2_i) + sum(n_i * (mean_i - mean)^2)``; the result agrees with a one-pass
variance within ``1e-9`` relative (the tests' tolerance) unless the variance itself is
below about ``1e-12`` of the squared mean.

Ties. ``ORDER BY ... LIMIT k`` keeps, from each batch, k rows by the same order; among
rows with equal keys which ones reach the answer is arbitrary, as it is for the one-pass
query, so the answer has the oracle's sequence of order keys, and the rows of a tie at the
boundary may be others of the same keys.
"""

from __future__ import annotations

import functools

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from s3slice.core.errors import FilterSyntaxError, QueryError
from s3slice.query.split.aggregate import AggregateSplit
from s3slice.query.split.plan import Split
from s3slice.query.split.rows import rows_split
from s3slice.query.split.shape import (
    clauses,
    combines,
    known_aggregates,
    nesting,
    queries,
    refuse_everywhere,
)
from s3slice.query.split.sql import PolarsOrder, aggregates, limit_of


@functools.lru_cache(maxsize=64)
def split_query(sql: str) -> Split | None:
    """The split of ``sql``; None when the query does not combine rows across batches.
    Raises :class:`QueryError` naming a construct that cannot be split exactly.

    The split of an equal text is reused (it is immutable): a warm function splits each
    query once, whatever the number of batches it answers."""
    try:
        tree = sqlglot.parse_one(sql, read=PolarsOrder)
    except (ParseError, TokenError) as e:
        raise FilterSyntaxError(f"sql: cannot parse {sql!r}: {e}") from e
    tree = tree.transform(known_aggregates)
    refuse_everywhere(tree)
    nested = [q for q in queries(tree) if q is not tree]
    if not isinstance(tree, exp.Select) or nested or tree.args.get("with") or tree.args.get(
            "with_") or tree.find(exp.Join) is not None:
        if combines(tree):
            raise QueryError(f"the query cannot be split across batches: {nesting(tree)} "
                             f"(it combines the rows of every batch)")
        return None  # e.g. UNION ALL of row-by-row selects: each batch's answer stands
    distinct = tree.args.get("distinct")
    if isinstance(distinct, exp.Distinct) and distinct.args.get("on") is not None:
        raise QueryError("the query cannot be split across batches: DISTINCT ON")
    group = tree.args.get("group")
    if any(aggregates(e) for e in clauses(tree)) or group is not None or tree.args.get(
            "having") is not None:
        planner = AggregateSplit(tree)
        partial_sql, final_sql = planner.build()
        return Split(sql=sql, partial_sql=partial_sql, final_sql=final_sql, aggregate=True,
                     wide=planner.wide())
    if distinct is not None or tree.args.get("order") is not None or limit_of(tree) is not None:
        partial_sql, final_sql = rows_split(tree)
        return Split(sql=sql, partial_sql=partial_sql, final_sql=final_sql, aggregate=False)
    return None
