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
query that cannot be split exactly raises :class:`~s3slice._errors.QueryError` naming the
construct (a median, a percentile, a window function, a subquery, ...), before any batch
is read.

``Split.partial_sql`` runs over one batch's rows (table ``s3object``) and yields a frame
of partial states; ``Split.final_sql`` runs over the concatenation of the partial frames
(table ``partials``) and yields the original query's answer: the same rows, column names
and order. ``Split.final(..., schema=...)`` also casts each column to the type polars
gives the original query over rows of that schema (found by running the query over no
rows), and names it as polars does; without a schema the names are ``final_sql``'s own,
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
``SUM(x)``                        ``SUM(x) AS s``                  ``SUM(s)`` (null when every
                                                                   batch's is: all null)
``MIN(x)``, ``MAX(x)``            ``MIN(x)``, ``MAX(x)``           ``MIN``, ``MAX`` of those
``AVG(x)``                        ``SUM(x) AS s, COUNT(x) AS n``   ``SUM(s) / NULLIF(SUM(n), 0)``
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

Numerics. Counts, integer sums, MIN and MAX are exact. Floating-point sums are regrouped
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

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

import polars as pl
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from s3slice._errors import FilterSyntaxError, QueryError
from s3slice.query.analysis import Analysis
from s3slice.query.dialect import S3SelectDialect
from s3slice.query.paths import with_paths
from s3slice.query.sql import SOURCE_TABLE

#: The table the final plan reads: the partial frames, concatenated.
PARTIALS_TABLE = "partials"


class _PolarsOrder(S3SelectDialect):
    """The S3 Select dialect with polars' null ordering: nulls sort as the largest values
    (last ascending, first descending). sqlglot's default dialect takes them for the
    smallest, so a plain ``ORDER BY x DESC`` would be re-emitted meaning the other order
    once an ordering is rebuilt."""

    NULL_ORDERING = "nulls_are_large"

_PREFIX = "__s3slice_"

# The aggregates split exactly; every other aggregate is refused by name.
_SIMPLE = (exp.Count, exp.Sum, exp.Min, exp.Max, exp.Avg)
_VARIANCE = (exp.Stddev, exp.StddevSamp, exp.Variance)
# Aggregates polars SQL knows that sqlglot does not (parsed as anonymous functions).
_ANONYMOUS_AGGREGATES = frozenset({
    "quantile_cont", "quantile_disc", "percentile_cont", "percentile_disc", "median",
    "mode", "first", "last", "array_agg", "string_agg", "listagg", "corr", "covar",
    "covar_pop", "covar_samp", "any_value", "arbitrary", "bool_and", "bool_or", "every",
    "bit_and", "bit_or", "bit_xor", "count_if", "max_by", "min_by", "arg_max", "arg_min",
    "approx_count_distinct", "approx_distinct", "approx_quantile", "approx_percentile",
    "kurtosis", "skewness", "entropy", "product", "histogram", "stddev_pop", "var_pop",
    "variance_pop", "regr_slope", "regr_intercept",
})


@dataclasses.dataclass(frozen=True)
class Split:
    """A query as a partial plan over each batch and a final plan over the partials."""

    sql: str  #: the original query
    partial_sql: str  #: over one batch's rows, table ``s3object``
    final_sql: str  #: over the concatenated partial frames, table ``partials``
    #: True for an aggregate (or GROUP BY) query: the partials are merged states; False for
    #: DISTINCT / ORDER BY / LIMIT over rows: the partials are candidate rows.
    aggregate: bool

    def partial(self, batch: pl.LazyFrame | pl.DataFrame) -> pl.LazyFrame:
        """The partial frame of one batch (any number of rows, none included)."""
        return _execute(self.partial_sql, {SOURCE_TABLE: batch.lazy()})

    def final(self, partials: Iterable[pl.LazyFrame | pl.DataFrame], *,
              schema: Mapping[str, pl.DataType] | None = None) -> pl.LazyFrame:
        """The answer from the partial frames of every batch, in batch order (at least one
        frame: the partial of an empty batch when there are no rows at all). With
        ``schema``, the schema of the batches, the columns are named and typed exactly as
        polars answers the original query over rows of that schema."""
        frames = [p.lazy() for p in partials]
        if not frames:
            raise ValueError("final: no partial frames; pass the partial of an empty batch")
        merged = pl.concat(frames, how="vertical_relaxed")
        answer = _execute(self.final_sql, {PARTIALS_TABLE: merged})
        if schema is None:
            return answer
        want = self.output_schema(schema)
        have = answer.collect_schema().names()
        if len(have) != len(want):
            raise QueryError(f"the split answer has {len(have)} columns where the query has "
                             f"{len(want)}")
        return answer.select(pl.col(h).cast(t).alias(n)
                             for h, (n, t) in zip(have, want.items(), strict=True))

    def output_schema(self, schema: Mapping[str, pl.DataType]) -> pl.Schema:
        """The names and types polars gives the original query over rows of ``schema``."""
        empty = pl.DataFrame(schema=dict(schema)).lazy()
        return _execute(self.sql, {SOURCE_TABLE: empty}).collect_schema()

    def run(self, batches: Iterable[pl.LazyFrame | pl.DataFrame], *,
            schema: Mapping[str, pl.DataType] | None = None) -> pl.LazyFrame:
        """Both steps in one process: the single-invocation path over many objects."""
        frames = [self.partial(b).collect() for b in batches]
        if not frames:
            if schema is None:
                raise ValueError("run: no batches and no schema to make an empty one from")
            frames = [self.partial(pl.DataFrame(schema=dict(schema))).collect()]
        return self.final(frames, schema=schema)


def _execute(sql: str, frames: Mapping[str, pl.LazyFrame]) -> pl.LazyFrame:
    ctx = pl.SQLContext(frames=dict(frames))
    try:
        return ctx.execute(sql, eager=False)
    except (pl.exceptions.SQLSyntaxError, pl.exceptions.SQLInterfaceError) as e:
        raise FilterSyntaxError(f"sql: {' '.join(str(e).split())}") from e


# ------------------------------------------------------------------------------- analysis

def split_query(sql: str) -> Split | None:
    """The split of ``sql``; None when the query does not combine rows across batches.
    Raises :class:`QueryError` naming a construct that cannot be split exactly."""
    try:
        tree = sqlglot.parse_one(sql, read=_PolarsOrder)
    except (ParseError, TokenError) as e:
        raise FilterSyntaxError(f"sql: cannot parse {sql!r}: {e}") from e
    tree = tree.transform(_known_aggregates)
    _refuse_everywhere(tree)
    nested = [q for q in _queries(tree) if q is not tree]
    if not isinstance(tree, exp.Select) or nested or tree.args.get("with") or tree.args.get(
            "with_") or tree.find(exp.Join) is not None:
        if _combines(tree):
            raise QueryError(f"the query cannot be split across batches: {_nesting(tree)} "
                             f"(it combines the rows of every batch)")
        return None  # e.g. UNION ALL of row-by-row selects: each batch's answer stands
    distinct = tree.args.get("distinct")
    if isinstance(distinct, exp.Distinct) and distinct.args.get("on") is not None:
        raise QueryError("the query cannot be split across batches: DISTINCT ON")
    group = tree.args.get("group")
    if any(_aggregates(e) for e in _clauses(tree)) or group is not None or tree.args.get(
            "having") is not None:
        return _AggregateSplit(tree, sql).build()
    if distinct is not None or tree.args.get("order") is not None or _limit(tree) is not None:
        return _rows_split(tree, sql)
    return None


def _known_aggregates(node: exp.Expr) -> exp.Expr:
    """polars' ``VAR`` (sqlglot leaves it anonymous) is ``VARIANCE``."""
    if isinstance(node, exp.Anonymous) and str(node.name).lower() == "var" and len(
            node.expressions) == 1:
        return exp.Variance(this=node.expressions[0].copy())
    return node


def _clauses(select: exp.Select) -> list[exp.Expr]:
    out: list[exp.Expr] = list(select.expressions)
    out.extend(select.args[k] for k in ("having", "order") if select.args.get(k) is not None)
    return out


def _name(node: exp.Expr) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.name).upper()
    return node.sql_name() if isinstance(node, exp.Func) else node.key.upper()


def _refuse_everywhere(tree: exp.Expr) -> None:
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
                _ANONYMOUS_AGGREGATES):
            continue
        if isinstance(node, _SIMPLE + _VARIANCE):
            continue
        raise QueryError(f"the query cannot be split across batches: the aggregate "
                         f"{_name(node)} ({node.sql()}) has no exact partial form")


def _aggregates(node: exp.Expr) -> list[exp.Expr]:
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


def _combines(tree: exp.Expr) -> bool:
    """Whether anything in ``tree`` combines rows (so per-batch answers do not stand)."""
    if tree.find(exp.AggFunc, exp.Join) is not None:
        return True
    if any((isinstance(q, exp.Union) and q.args.get("distinct")) or isinstance(
            q, exp.Intersect | exp.Except) for q in tree.find_all(exp.SetOperation)):
        return True
    if any(q is not tree and not _derived(q) for q in _queries(tree)):
        return True  # a subquery in a condition or a select list reads every row
    return any(q.args.get(k) is not None for q in tree.find_all(exp.Select)
               for k in ("group", "having", "distinct", "order", "limit", "offset"))


def _queries(tree: exp.Expr) -> list[exp.Expr]:
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


def _nesting(tree: exp.Expr) -> str:
    """The construct that makes ``tree`` more than one SELECT, named."""
    if isinstance(tree, exp.SetOperation):
        return tree.key.upper()
    if tree.args.get("with") or tree.args.get("with_"):
        return "WITH (a common table expression)"
    if tree.find(exp.Join) is not None:
        return "JOIN"
    nested = next(q for q in _queries(tree) if q is not tree)
    return f"the subquery ({nested.sql()})"


def _limit(select: exp.Select) -> tuple[int, int] | None:
    """(limit, offset) of ``select``, None without LIMIT or OFFSET."""
    limit = select.args.get("limit")
    offset = select.args.get("offset")
    if limit is None and offset is None:
        return None
    if isinstance(limit, exp.Fetch):
        raise QueryError("the query cannot be split across batches: FETCH")
    n = _integer(limit.expression, "LIMIT") if limit is not None else -1
    m = _integer(offset.expression, "OFFSET") if offset is not None else 0
    return n, m


def _integer(node: exp.Expr, what: str) -> int:
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return int(node.this)
        except ValueError:
            pass
    raise QueryError(f"the query cannot be split across batches: {what} {node.sql()} is "
                     f"not a whole number")


def _strip(node: exp.Expr) -> str:
    """A key for structural equality: the SQL with table qualifiers dropped."""
    def unqualify(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Column) and n.table:
            return exp.column(n.this.copy())
        return n
    return node.copy().transform(unqualify).sql()


def _unalias(node: exp.Expr) -> exp.Expr:
    return node.this if isinstance(node, exp.Alias) else node


def _position(node: exp.Expr, outputs: Sequence[exp.Expr], what: str) -> exp.Expr | None:
    """The output ``node`` names by position (``ORDER BY 2``), else None."""
    if isinstance(node, exp.Literal) and not node.is_string:
        i = _integer(node, what)
        if not 1 <= i <= len(outputs):
            raise QueryError(f"{what} {i}: the query has {len(outputs)} output columns")
        return _unalias(outputs[i - 1]).copy()
    return None


def _is_star(e: exp.Expr) -> bool:
    return isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this,
                                                                                 exp.Star))


def _col(name: str) -> exp.Column:
    return exp.column(exp.to_identifier(name, quoted=True))


def _select_sql(select: exp.Select) -> str:
    return select.sql(dialect=_PolarsOrder)


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


def _output_names(outputs: Sequence[exp.Expr]) -> list[str]:
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


# ---------------------------------------------------------------------------- rows split

def _rows_split(select: exp.Select, sql: str) -> Split:
    """DISTINCT / ORDER BY / LIMIT without aggregates: each batch's candidate rows, their
    order keys carried as hidden columns; the final plan orders, limits and drops them."""
    outputs = list(select.expressions)
    star = any(_is_star(e) for e in outputs)
    distinct = select.args.get("distinct") is not None
    aliases: dict[str, exp.Expr] = {e.alias: e.this for e in outputs if isinstance(e, exp.Alias)}
    selected = {_strip(_unalias(e)) for e in outputs}
    keys: list[exp.Ordered] = []
    hidden: list[exp.Expr] = []
    order = select.args.get("order")
    for i, ordered in enumerate(order.expressions if order is not None else []):
        assert isinstance(ordered, exp.Ordered)
        node = ordered.this
        if star and isinstance(node, exp.Literal) and not node.is_string:
            # A position in ``SELECT *``: the same column of the partial (hidden keys come
            # after the selected ones) and of the final plan's rows.
            keys.append(exp.Ordered(this=exp.Literal.number(_integer(node, "ORDER BY")),
                                    desc=ordered.args.get("desc"),
                                    nulls_first=ordered.args.get("nulls_first")))
            continue
        expr = _position(node, outputs, "ORDER BY") if not star else None
        if expr is None and isinstance(node, exp.Column) and not node.table and (
                node.name in aliases):
            expr = aliases[node.name].copy()
        if expr is None:
            expr = node.copy()
        if distinct and not star and _strip(expr) not in selected:
            raise QueryError(f"the query cannot be split across batches: ORDER BY "
                             f"{node.sql()} with SELECT DISTINCT orders by a value that is "
                             f"not selected")
        name = f"{_PREFIX}o{i}"
        hidden.append(exp.alias_(expr, exp.to_identifier(name, quoted=True)))
        keys.append(exp.Ordered(this=_col(name), desc=ordered.args.get("desc"),
                                nulls_first=ordered.args.get("nulls_first")))
    limit = _limit(select)

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
        final = exp.select(exp.Star(except_=[_col(h.alias) for h in hidden])).from_(
            exp.Subquery(this=inner, alias=exp.TableAlias(
                this=exp.to_identifier(PARTIALS_TABLE))))
    return Split(sql=sql, partial_sql=_select_sql(partial), final_sql=_select_sql(final),
                 aggregate=False)


# ----------------------------------------------------------------------- aggregate split

@dataclasses.dataclass
class _State:
    """One partial column: its name and the aggregate computing it per batch group."""

    name: str
    expr: exp.Expr


class _AggregateSplit:
    """Aggregates with or without GROUP BY: partial states per batch group, merged."""

    def __init__(self, select: exp.Select, sql: str) -> None:
        self.select = select
        self.sql = sql
        self.outputs = list(select.expressions)
        for e in self.outputs:
            if _is_star(e):
                raise QueryError("the query cannot be split across batches: SELECT * with "
                                 "an aggregate or GROUP BY")
        self.aliases: dict[str, exp.Expr] = {e.alias: e.this for e in self.outputs
                                             if isinstance(e, exp.Alias)}
        self.states: list[_State] = []
        self.finals: dict[str, exp.Expr] = {}  # an aggregate's SQL -> its final form
        self.distinct: dict[str, str] = {}  # a DISTINCT argument's SQL -> its column
        self.distinct_exprs: list[exp.Expr] = []
        self.means: list[tuple[str, str, str]] = []  # (pooled mean, n, mean) columns
        self.keys: dict[str, str] = {}  # a group key's SQL -> its column
        self.key_exprs: list[exp.Expr] = []

    def build(self) -> Split:
        group = self.select.args.get("group")
        for node in group.expressions if group is not None else []:
            expr = _position(node, self.outputs, "GROUP BY")
            if expr is None and isinstance(node, exp.Column) and not node.table and (
                    node.name in self.aliases):
                expr = self.aliases[node.name].copy()
            expr = expr if expr is not None else node.copy()
            if _aggregates(expr):
                raise QueryError(f"GROUP BY {node.sql()}: a group key cannot be an aggregate")
            text = _strip(expr)
            if text not in self.keys:
                self.keys[text] = f"{_PREFIX}k{len(self.keys)}"
                self.key_exprs.append(expr)

        names = _output_names(self.outputs)
        final_outputs = [exp.alias_(self.rewrite(_unalias(e), "SELECT"),
                                    exp.to_identifier(n, quoted=True))
                         for e, n in zip(self.outputs, names, strict=True)]
        having = self.select.args.get("having")
        final_having = (self.rewrite(self.resolve(having.this), "HAVING")
                        if having is not None else None)
        order = self.select.args.get("order")
        final_order: list[exp.Expr] = []
        for ordered in order.expressions if order is not None else []:
            node = ordered.this
            expr = _position(node, self.outputs, "ORDER BY")
            expr = expr if expr is not None else self.resolve(node)
            final_order.append(exp.Ordered(this=self.rewrite(expr, "ORDER BY"),
                                           desc=ordered.args.get("desc"),
                                           nulls_first=ordered.args.get("nulls_first")))

        # The partial plan: group keys, DISTINCT arguments and states per batch group.
        partial = exp.select(
            *[exp.alias_(k.copy(), exp.to_identifier(self.keys[_strip(k)], quoted=True))
              for k in self.key_exprs],
            *[exp.alias_(d.copy(), exp.to_identifier(self.distinct[_strip(d)], quoted=True))
              for d in self.distinct_exprs],
            *[exp.alias_(s.expr, exp.to_identifier(s.name, quoted=True)) for s in self.states])
        if not partial.expressions:  # SELECT 1 ... GROUP BY nothing: the row count shapes it
            self.state(exp.Count(this=exp.Star()), "c")
            partial.set("expressions", [exp.alias_(self.states[-1].expr, exp.to_identifier(
                self.states[-1].name, quoted=True))])
        partial.set("from_", self.select.args.get("from_") or self.select.args.get("from"))
        if self.select.args.get("where") is not None:
            partial.set("where", self.select.args["where"].copy())
        grouping = [k.copy() for k in self.key_exprs] + [d.copy() for d in self.distinct_exprs]
        if grouping:
            partial.set("group", exp.Group(expressions=grouping))

        # The final plan over the partials.
        source: exp.Expr = exp.to_table(PARTIALS_TABLE)
        if self.means:
            by = [_col(c) for c in self.keys.values()]
            pooled = [exp.alias_(exp.Div(
                this=self.over(exp.Sum(this=exp.Mul(this=_col(n), expression=_col(m))), by),
                expression=exp.Nullif(this=self.over(exp.Sum(this=_col(n)), by),
                                      expression=exp.Literal.number(0))),
                exp.to_identifier(g, quoted=True)) for g, n, m in self.means]
            source = exp.Subquery(
                this=exp.select(exp.Star(), *pooled).from_(exp.to_table(PARTIALS_TABLE)),
                alias=exp.TableAlias(this=exp.to_identifier(PARTIALS_TABLE)))
        final = exp.select(*final_outputs).from_(source)
        if self.select.args.get("distinct") is not None:
            final.set("distinct", exp.Distinct())
        if self.keys:
            final.set("group", exp.Group(expressions=[_col(c) for c in self.keys.values()]))
        if final_having is not None:
            final.set("having", exp.Having(this=final_having))
        if final_order:
            final.set("order", exp.Order(expressions=final_order))
        limit = _limit(self.select)
        if limit is not None:
            if limit[0] >= 0:
                final.set("limit", exp.Limit(expression=exp.Literal.number(limit[0])))
            if limit[1]:
                final.set("offset", exp.Offset(expression=exp.Literal.number(limit[1])))
        return Split(sql=self.sql, partial_sql=_select_sql(partial),
                     final_sql=_select_sql(final), aggregate=True)

    @staticmethod
    def over(agg: exp.Expr, by: list[exp.Column]) -> exp.Window:
        return exp.Window(this=agg, partition_by=[c.copy() for c in by] or None)

    def resolve(self, node: exp.Expr) -> exp.Expr:
        """HAVING and ORDER BY may name an output by its alias (``HAVING n > 1``); a name
        that is a group key stays the key."""
        def visit(n: exp.Expr) -> exp.Expr:
            if (isinstance(n, exp.Column) and not n.table and n.name in self.aliases
                    and _strip(n) not in self.keys):
                return self.aliases[n.name].copy()
            return n
        return node.copy().transform(visit)

    def rewrite(self, node: exp.Expr, clause: str) -> exp.Expr:
        """``node`` over the partial columns: group keys become their columns, aggregates
        their merged forms; any other source column is an error (neither grouped nor
        aggregated)."""
        def visit(n: exp.Expr) -> exp.Expr:
            text = _strip(n) if not isinstance(n, exp.Literal) else None
            if text is not None and text in self.keys:
                return _col(self.keys[text])
            if isinstance(n, exp.AggFunc):
                return self.aggregate(n)
            if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star):
                raise QueryError(f"{clause}: the column {n.sql()} is neither grouped nor "
                                 f"inside an aggregate")
            return n
        return node.copy().transform(visit)

    def state(self, expr: exp.Expr, kind: str) -> str:
        """The partial column computing ``expr`` per batch group (one per distinct SQL)."""
        text = expr.sql()
        for s in self.states:
            if s.expr.sql() == text:
                return s.name
        name = f"{_PREFIX}{kind}{len(self.states)}"
        self.states.append(_State(name, expr))
        return name

    def distinct_column(self, arg: exp.Expr) -> str:
        text = _strip(arg)
        if text not in self.distinct:
            self.distinct[text] = f"{_PREFIX}d{len(self.distinct)}"
            self.distinct_exprs.append(arg.copy())
        return self.distinct[text]

    def aggregate(self, node: exp.AggFunc) -> exp.Expr:
        """The final form of one aggregate call, registering its partial states."""
        text = node.sql()
        if text in self.finals:
            return self.finals[text].copy()
        if _aggregates(node.this) if isinstance(node.this, exp.Expr) else False:
            raise QueryError(f"{node.sql()}: an aggregate cannot contain an aggregate")
        final = self._aggregate(node)
        self.finals[text] = final
        return final.copy()

    def _aggregate(self, node: exp.AggFunc) -> exp.Expr:
        arg = node.this
        zero = exp.Literal.number(0)
        if isinstance(arg, exp.Distinct):
            if len(arg.expressions) != 1:
                raise QueryError(f"the query cannot be split across batches: {node.sql()} "
                                 f"(DISTINCT over several values)")
            value = arg.expressions[0]
            if isinstance(node, exp.Min | exp.Max):  # DISTINCT changes nothing
                return self._aggregate(type(node)(this=value.copy()))
            if not isinstance(node, exp.Count | exp.Sum | exp.Avg):
                raise QueryError(f"the query cannot be split across batches: "
                                 f"{_name(node)}(DISTINCT ...) ({node.sql()})")
            d = self.distinct_column(value)
            merged = type(node)(this=exp.Distinct(expressions=[_col(d)]))
            return exp.Coalesce(this=merged, expressions=[zero]) if isinstance(
                node, exp.Count) else merged
        if isinstance(node, exp.Count):
            c = self.state(exp.Count(this=arg.copy() if arg is not None else exp.Star()), "c")
            return exp.Coalesce(this=exp.Sum(this=_col(c)), expressions=[zero])
        if isinstance(node, exp.Sum):
            return exp.Sum(this=_col(self.state(exp.Sum(this=arg.copy()), "s")))
        if isinstance(node, exp.Min | exp.Max):
            kind = "min" if isinstance(node, exp.Min) else "max"
            return type(node)(this=_col(self.state(type(node)(this=arg.copy()), kind)))
        if isinstance(node, exp.Avg):
            s = self.state(exp.Sum(this=arg.copy()), "s")
            n = self.state(exp.Count(this=arg.copy()), "c")
            return exp.Div(this=exp.Sum(this=_col(s)), expression=exp.Nullif(
                this=exp.Sum(this=_col(n)), expression=zero))
        if isinstance(node, _VARIANCE):
            return self._variance(node, arg)
        raise QueryError(f"the query cannot be split across batches: the aggregate "
                         f"{_name(node)} ({node.sql()}) has no exact partial form")

    def _variance(self, node: exp.AggFunc, arg: exp.Expr) -> exp.Expr:
        """Sample variance (polars SQL's STDDEV, STDDEV_SAMP, VARIANCE, VAR, VAR_SAMP) by
        Chan's parallel merge of (n, mean, M2) per batch group."""
        one = exp.Literal.number(1)
        n = self.state(exp.Count(this=arg.copy()), "c")
        m = self.state(exp.Avg(this=arg.copy()), "m")
        m2 = self.state(exp.Coalesce(this=exp.Mul(
            this=exp.Variance(this=arg.copy()),
            expression=exp.Paren(this=exp.Sub(this=exp.Count(this=arg.copy()), expression=one))),
            expressions=[exp.Literal.number(0)]), "q")
        pooled = next((g for g, nn, mm in self.means if (nn, mm) == (n, m)), None)
        if pooled is None:
            pooled = f"{_PREFIX}g{len(self.means)}"
            self.means.append((pooled, n, m))
        dev = exp.Paren(this=exp.Sub(this=_col(m), expression=_col(pooled)))
        total = exp.Add(this=exp.Sum(this=_col(m2)), expression=exp.Sum(this=exp.Mul(
            this=_col(n), expression=exp.Mul(this=dev, expression=dev.copy()))))
        count = exp.Sum(this=_col(n))
        var = exp.Case(ifs=[exp.If(this=exp.GT(this=count, expression=one.copy()),
                                   true=exp.Div(this=exp.Paren(this=total), expression=exp.Paren(
                                       this=exp.Sub(this=count.copy(), expression=one.copy()))))])
        if isinstance(node, exp.Stddev | exp.StddevSamp):
            return exp.Sqrt(this=var)
        return var


def split_for(analysis: Analysis) -> Split | None:
    """The split of an analysed query: its SQL's, or for ``columns``/``filter`` with a
    ``limit`` the limit's over the rows each piece already filtered and projected; None
    when the query does not combine objects."""
    if analysis.sql is not None:
        return split_query(analysis.sql)
    if analysis.query.limit is not None:
        return split_query(f"SELECT * FROM {SOURCE_TABLE} LIMIT {analysis.query.limit}")
    return None


def partial_step(analysis: Analysis, split: Split, rows: pl.LazyFrame) -> pl.LazyFrame:
    """The partial plan over one batch of ``rows`` (the analysis's path columns added, as
    :meth:`Analysis.finish` adds them)."""
    if analysis.paths:
        names = set(rows.collect_schema().names())
        rows = with_paths(rows, [p for p in analysis.paths if p.root in names])
    return split.partial(rows)
