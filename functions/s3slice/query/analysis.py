"""Query analysis: what a query reads, what it may prune by, and how polars runs it.

SQL and filters are parsed and sandboxed by :mod:`.sql`; path expressions become columns of
their own (:mod:`.paths`); the pushable part of WHERE becomes the pruning predicate
(:mod:`.pushdown`). Execution is polars' own: polars SQL for the filter of each piece and
``pl.SQLContext`` for the query over all of them.

An analysis depends only on its query (``UTCNOW()`` aside), so :func:`analyze` keeps the
last ones it made: the cold start's check and every read of the same query share one.
"""

from __future__ import annotations

import dataclasses
import functools
import types
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl
from sqlglot import exp

from s3slice._errors import FilterSyntaxError, QueryError, UnknownColumnError
from s3slice._model import Query
from s3slice.query import predicate as P
from s3slice.query.dialect import S3SelectDialect, reads_the_clock, uses_s3select_functions
from s3slice.query.paths import Path, PathRewriter, column_names, qualifiers_of, with_paths
from s3slice.query.pushdown import to_predicate
from s3slice.query.sql import SOURCE_TABLE, parse_filter, parse_sql, plain, unqualified

#: How many analyses :func:`analyze` keeps (a function serves one query, or a few).
CACHE_SIZE = 64


@dataclasses.dataclass(frozen=True, kw_only=True)
class Analysis:
    """A query, understood: its columns, its pruning predicate and how to run it."""

    query: Query
    columns: tuple[str, ...] | None  # None: every column
    referenced: frozenset[str]  # every name the query uses as a source column
    #: Names that are a source column or one of the query's own aliases (``SUM(v) AS v``
    #: orders by ``v``): fetched when the data has them, never an unknown column.
    optional: frozenset[str] = frozenset()
    #: Path expressions (``s.b.c``, ``s.tags[0]``), each computed as a column of its own;
    #: ``where_paths`` are those the row filter uses.
    paths: tuple[Path, ...] = ()
    where_paths: tuple[Path, ...] = ()
    #: Source columns the query names whole (not only through a path).
    whole: frozenset[str] = frozenset()
    predicate: P.Pred
    where: str | None  # the row filter polars applies to each piece as it is read
    sql: str | None  # the SQL run over the concatenated pieces (sources renamed)
    table_names: tuple[str, ...]
    #: One object's hive partition values and their types (see :mod:`s3slice.engine.sources`).
    #: Read-only when empty: an analysis is shared by every read of its query.
    partitions: Mapping[str, Any] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({}))
    partition_types: Mapping[str, pl.DataType] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({}))
    #: The partition values rule every row out: read the schema, no rows.
    pruned: bool = False

    def for_object(self, values: Mapping[str, Any], types: Mapping[str, pl.DataType], *,
                   pruned: bool = False) -> Analysis:
        if not values and not pruned:
            return self
        return dataclasses.replace(self, partitions=values, partition_types=types,
                                   pruned=pruned)

    def fields(self) -> dict[str, frozenset[str]]:
        """Columns the query reads only through attribute paths (``s.b.c``, ``s.b.d[0]``),
        each with the dotted fields it needs (``b.c``, ``b.d``): their other fields need
        not be read. A column also named whole, or indexed at its root, is not here."""
        if self.columns is None:  # SELECT *: every column whole
            return {}
        whole = set(self.whole)
        out: dict[str, set[str]] = {}
        for path in self.paths:
            attributes: list[str] = []
            for step in path.steps:
                if not isinstance(step, str):
                    break
                attributes.append(step)
            if not attributes:
                whole.add(path.root)
            else:
                out.setdefault(path.root, set()).add(".".join([path.root, *attributes]))
        return {c: frozenset(f) for c, f in out.items() if c not in whole}

    @property
    def per_object(self) -> bool:
        """True when each object's result stands alone (no aggregate, order or limit)."""
        return self.sql is None and self.query.limit is None

    @property
    def early_limit(self) -> int | None:
        """Rows after which reading may stop: a limit with nothing else needing all rows."""
        return self.query.limit if self.sql is None else None

    def needed_columns(self, schema: Sequence[str], *, source: str) -> list[str]:
        """Columns to fetch, in schema order, after checking that every name exists."""
        names = set(schema) | set(self.partitions)
        missing = sorted(c for c in self.referenced if c not in names)
        if missing:
            raise UnknownColumnError(missing, source=source,
                                     available=[*schema, *self.partitions])
        # A partition column is a constant of the object, never fetched.
        stored = [c for c in schema if c not in self.partitions]
        if self.columns is None:
            return stored
        wanted = self.referenced | self.optional | set(self.columns)
        return [c for c in stored if c in wanted]

    def prefilter(self, lf: pl.LazyFrame) -> pl.LazyFrame:
        """The per-piece step: the row filter, and the limit when nothing else needs rows."""
        if self.partitions:
            lf = lf.with_columns(pl.lit(v, dtype=self.partition_types[k]).alias(k)
                                 for k, v in self.partitions.items())
        if self.where is not None:
            if self.where_paths:
                lf = with_paths(lf, self.where_paths)
            lf = _sql_filter(lf, self.where)
            if self.where_paths:
                lf = lf.drop([p.name for p in self.where_paths])
        return self._projected(lf) if self.sql is None else lf

    def _projected(self, lf: pl.LazyFrame) -> pl.LazyFrame:
        """A ``columns``/``filter`` query's projection and limit."""
        if self.columns is not None:
            lf = lf.select(list(self.columns))
        if self.query.limit is not None:
            lf = lf.limit(self.query.limit)
        return lf

    def finish(self, lf: pl.LazyFrame) -> pl.LazyFrame:
        """The final step over all pieces: projection and limit, or the whole SQL."""
        if self.sql is None:
            return self._projected(lf)
        if self.paths:
            names = set(lf.collect_schema().names())
            lf = with_paths(lf, [p for p in self.paths if p.root in names])
        ctx = pl.SQLContext(frames=dict.fromkeys(self.table_names, lf))
        try:
            return ctx.execute(self.sql, eager=False)
        except (pl.exceptions.SQLSyntaxError, pl.exceptions.SQLInterfaceError) as e:
            raise FilterSyntaxError(f"sql: {plain(str(e))}") from e


def collect(lf: pl.LazyFrame) -> pl.DataFrame:
    """Run a lazy query; what polars rejects at run time becomes a :class:`QueryError`."""
    try:
        return lf.collect()
    except (pl.exceptions.ColumnNotFoundError, pl.exceptions.SchemaFieldNotFoundError) as e:
        raise QueryError(f"the query names a column the data does not have: "
                         f"{_first_line(e)}") from e
    except (pl.exceptions.InvalidOperationError, pl.exceptions.SchemaError,
            pl.exceptions.ComputeError, pl.exceptions.SQLSyntaxError,
            pl.exceptions.SQLInterfaceError) as e:
        raise QueryError(f"the query cannot run on this data: {_first_line(e)}") from e


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


_PIECE = "__s3slice_piece"


def _sql_filter(lf: pl.LazyFrame, where: str) -> pl.LazyFrame:
    """``lf``'s rows for which ``where`` holds, by polars' SQL engine (as the final SQL
    runs it: ``pl.sql_expr`` alone casts a string to a timestamp strictly, which polars
    no longer allows, where SQL parses it)."""
    ctx = pl.SQLContext(frames={_PIECE: lf})
    try:
        return ctx.execute(f'SELECT * FROM "{_PIECE}" WHERE {where}', eager=False)
    except (pl.exceptions.SQLSyntaxError, pl.exceptions.SQLInterfaceError,
            pl.exceptions.InvalidOperationError) as e:
        raise FilterSyntaxError(f"filter {where!r}: {plain(str(e))}") from e


def _sql_expr(text: str) -> pl.Expr:
    try:
        return pl.sql_expr(text)
    except (pl.exceptions.SQLSyntaxError, pl.exceptions.SQLInterfaceError,
            pl.exceptions.InvalidOperationError) as e:
        raise FilterSyntaxError(f"filter {text!r}: {plain(str(e))}") from e


def _analyze_filter(query: Query) -> Analysis:
    where: str | None = None
    predicate: P.Pred = P.TRUE
    referenced: set[str] = set(query.columns or ())
    whole = set(referenced)
    paths: tuple[Path, ...] = ()
    if query.filter is not None:
        tree = parse_filter(query.filter)
        tree, paths = PathRewriter({SOURCE_TABLE}).rewrite(tree)
        qualified = any(c.table for c in tree.find_all(exp.Column))
        tree = unqualified(tree)  # s3object.id is id
        whole |= column_names(tree)
        referenced |= whole | {p.root for p in paths}
        predicate = to_predicate(tree)
        translated = paths or qualified or uses_s3select_functions(query.filter)
        where = tree.sql(dialect=S3SelectDialect) if translated else query.filter
        _sql_expr(where)  # a filter polars cannot run fails now, before any byte is read
    return Analysis(query=query, columns=query.columns, referenced=frozenset(referenced),
                    predicate=predicate, where=where, sql=None, table_names=(),
                    paths=paths, where_paths=paths, whole=frozenset(whole))


def _analyze_sql(query: Query) -> Analysis:
    assert query.sql is not None
    parsed, table_names = parse_sql(query.sql)
    rewriter = PathRewriter(qualifiers_of(parsed))
    tree, paths = rewriter.rewrite(parsed)
    if paths:
        rewriter.label(tree)
    # A name that is also one of the query's aliases may mean either (``SUM(v) AS v``
    # reads the column v; ``ORDER BY w`` may mean the alias w): it is fetched when the
    # data has it. Every other name must be a column of the data.
    aliases = {a.alias for a in tree.find_all(exp.Alias)}
    names = column_names(tree) | {p.root for p in paths}
    referenced = {n for n in names if n not in aliases}
    optional = {n for n in names if n in aliases}
    star = any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this,
               exp.Star)) for sel in tree.find_all(exp.Select) for e in sel.expressions)

    where: str | None = None
    where_paths: tuple[Path, ...] = ()
    predicate: P.Pred = P.TRUE
    top = tree if isinstance(tree, exp.Select) else None
    if (top is not None and not top.args.get("joins") and not top.args.get("with")
            and isinstance(top.args.get("from_") or top.args.get("from"), exp.From)):
        source = (top.args.get("from_") or top.args["from"]).this
        condition = top.args.get("where")
        if isinstance(source, exp.Table) and condition is not None:
            bare = unqualified(condition.this)
            predicate = to_predicate(bare)
            where = bare.sql()
            used = {c.name for c in bare.find_all(exp.Column)}
            where_paths = tuple(p for p in paths if p.name in used)
            # WHERE sees the source's columns, never the select list's aliases.
            in_where = column_names(bare) | {p.root for p in where_paths}
            referenced |= in_where
            optional -= in_where
    # The text polars runs: the user's own, unless S3 Select functions or paths were
    # translated.
    translated = paths or uses_s3select_functions(query.sql)
    sql = tree.sql(dialect=S3SelectDialect) if translated else query.sql
    return Analysis(query=query, columns=None if star else tuple(sorted(referenced | optional)),
                    referenced=frozenset(referenced), optional=frozenset(optional),
                    predicate=predicate, where=where, sql=sql,
                    table_names=tuple(sorted(table_names)), paths=paths,
                    where_paths=where_paths, whole=frozenset(column_names(tree)))


def analyze(query: Query) -> Analysis:
    """Parse and check a query. Raises a :class:`QueryError` naming what is wrong.

    An equal query's analysis is reused (the same object; it is immutable), unless the
    query calls ``UTCNOW()``, whose value is fixed at analysis."""
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
        return _analyze_sql(query) if query.sql is not None else _analyze_filter(query)
    except QueryError:
        raise
    except (ValueError, TypeError, KeyError) as e:  # sqlglot internals on odd input
        raise FilterSyntaxError(f"cannot analyse the query: {plain(str(e))}") from e
