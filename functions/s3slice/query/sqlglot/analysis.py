"""Query analysis by sqlglot's parse in the S3 Select dialect: every SQL query, and the
filters polars' own parse does not cover (:mod:`~s3slice.query.polars.plain_filter`): paths,
qualified names, S3 Select's functions, any call. sqlglot is imported only when such a query comes.

SQL and filters are parsed and sandboxed by :mod:`.sql`; path expressions become columns of
their own (:mod:`.path_rewrite`); the pushable part of WHERE becomes the pruning predicate
(:mod:`.pushdown`).
"""

from __future__ import annotations

from sqlglot import exp

from s3slice.core.model import Query
from s3slice.query.analysis import SOURCE_TABLE, Analysis, check_filter
from s3slice.query.paths import Path
from s3slice.query.polars.sql import check_text
from s3slice.query.pruning import predicate as P
from s3slice.query.sqlglot.path_rewrite import PathRewriter, column_names, qualifiers_of
from s3slice.query.sqlglot.pushdown import to_predicate
from s3slice.query.sqlglot.sql import (
    distinct_names,
    generated,
    parse_filter,
    parse_sql,
    unqualified,
)


def analyze_filter(query: Query) -> Analysis:
    where: str | None = None
    predicate: P.Pred = P.TRUE
    referenced: set[str] = set(query.columns or ())
    whole = set(referenced)
    paths: tuple[Path, ...] = ()
    if query.filter is not None:
        tree = parse_filter(query.filter)
        tree, paths = PathRewriter({SOURCE_TABLE}).rewrite(tree)
        tree = unqualified(tree)  # s3object.id is id
        whole |= column_names(tree)
        referenced |= whole | {p.root for p in paths}
        predicate = to_predicate(tree)
        # polars runs the text generated from the tree the sandbox checked, never the
        # request's own (one parse decides: sqlglot's).
        where = generated(tree)
        check_filter(where)  # a filter polars cannot run fails now, before any byte is read
    return Analysis(query=query, columns=query.columns, referenced=frozenset(referenced),
                    predicate=predicate, where=where, sql=None, table_names=(),
                    paths=paths, where_paths=paths, whole=frozenset(whole))


def analyze_sql(query: Query) -> Analysis:
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
    # A subquery anywhere reads the source whole: the top-level WHERE must not filter
    # (nor prune) what it reads, so it is applied by the final SQL alone.
    subqueries = len(list(tree.find_all(exp.Table))) > 1
    if (top is not None and not top.args.get("joins") and not top.args.get("with")
            and not subqueries
            and isinstance(top.args.get("from_") or top.args.get("from"), exp.From)):
        source = (top.args.get("from_") or top.args["from"]).this
        condition = top.args.get("where")
        if isinstance(source, exp.Table) and condition is not None:
            bare = unqualified(condition.this)
            predicate = to_predicate(bare)
            where = generated(bare)
            used = {c.name for c in bare.find_all(exp.Column)}
            where_paths = tuple(p for p in paths if p.name in used)
            # WHERE sees the source's columns, never the select list's aliases.
            in_where = column_names(bare) | {p.root for p in where_paths}
            referenced |= in_where
            optional -= in_where
    # The text polars runs: generated from the tree the sandbox checked (S3 Select
    # functions and paths translated), never the request's own.
    sql = generated(distinct_names(tree))
    check_text(sql, field="sql")
    return Analysis(query=query, columns=None if star else tuple(sorted(referenced | optional)),
                    referenced=frozenset(referenced), optional=frozenset(optional),
                    predicate=predicate, where=where, sql=sql,
                    table_names=tuple(sorted(table_names)), paths=paths,
                    where_paths=where_paths, whole=frozenset(column_names(tree)))
