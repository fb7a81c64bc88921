"""SQL text in: parsing in the S3 Select dialect, and the sandbox (a filter is a condition
on columns; a query is one SELECT that reads only ``s3object`` and calls no function that
reads files). Also what the text alone tells: the names S3 Select gives a SELECT list.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from s3slice.core.errors import FilterSyntaxError, ForbiddenQueryError, QueryError, plain
from s3slice.core.model import MAX_ROWS
from s3slice.query.depth import check_depth, too_deep
from s3slice.query.source import FILE_FUNCTION_PREFIXES, SOURCE_TABLE
from s3slice.query.split.sql import polars_name
from s3slice.query.sqlglot.dialect import S3SelectDialect
from s3slice.query.sqlglot.sql_errors import describe, describe_token_error

# polars SQL's table functions (read_csv, read_parquet, read_json, read_ndjson, read_ipc)
# and anything named like one: no query may call them anywhere.
_FILE_FUNCTIONS = FILE_FUNCTION_PREFIXES


def parse_error(e: ParseError | TokenError, text: str = "") -> str:
    """What sqlglot found wrong, and where, as plain text in S3 Select's terms."""
    if isinstance(e, TokenError):
        return describe_token_error(text)
    errors = getattr(e, "errors", None) or []
    if errors and isinstance(errors[0], dict) and errors[0].get("description"):
        return plain(describe(errors[0]))
    return plain(str(e))


def parse(text: str, field: str) -> exp.Expr:
    """The one statement of ``text``, in the S3 Select dialect (refused, typed, when it nests
    deeper than :data:`~s3slice.query.depth.MAX_DEPTH`)."""
    check_depth(text, field)
    try:
        parsed = sqlglot.parse(text, read=S3SelectDialect)
    except (ParseError, TokenError) as e:
        raise FilterSyntaxError(f"{field}: cannot parse {text!r}: {parse_error(e, text)}"
                                ) from e
    except RecursionError as e:
        raise too_deep(field) from e
    statements = [s for s in parsed if s is not None]
    if len(statements) != 1:
        raise FilterSyntaxError(f"{field}: expected one expression, found {len(statements)}")
    return statements[0]


def check_functions(tree: exp.Expr, field: str) -> None:
    """Refuse any function that reads files (polars SQL's ``read_csv`` and kin)."""
    for node in tree.find_all(exp.Func):
        name = (node.sql_name() if not isinstance(node, exp.Anonymous) else node.name).lower()
        if name.startswith(_FILE_FUNCTIONS):
            raise ForbiddenQueryError(f"{field}: the function {name} is not allowed; a query "
                                      "reads only its own sources")


def parse_filter(text: str) -> exp.Expr:
    """A filter's tree, after checking that it is a condition on columns, not a query, and
    calls no function that reads files."""
    tree = parse(text, "filter")
    if tree.find(exp.Query, exp.Table, exp.Subquery, exp.Values) is not None or isinstance(
            tree, exp.Command | exp.Create | exp.Drop | exp.Insert | exp.Update):
        raise ForbiddenQueryError("filter: must be a condition on columns, not a query")
    check_functions(tree, "filter")
    return tree


def parse_sql(text: str) -> tuple[exp.Query, set[str]]:
    """A query's tree and the names it reads ``s3object`` by, after checking that it is one
    SELECT that reads nothing but ``s3object`` (and its own named subqueries)."""
    tree = parse(text, "sql")
    if not isinstance(tree, exp.Query):
        raise ForbiddenQueryError(f"sql: only SELECT queries run here, got {tree.key.upper()}")
    # sqlglot accepts a SELECT list or a GROUP BY with nothing in it; S3 Select does not.
    for node in tree.find_all(exp.Select, exp.Group):
        if not node.expressions and not (isinstance(node, exp.Group) and node.args.get("all")):
            clause = "the SELECT list" if isinstance(node, exp.Select) else "GROUP BY"
            raise FilterSyntaxError(f"sql: cannot parse {text!r}: ParseExpectedExpression: "
                                    f"{clause} needs an expression")
    check_functions(tree, "sql")
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    table_names: set[str] = set()
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            raise ForbiddenQueryError(f"sql: {table.sql()!r} is not allowed; a query reads only "
                                      f"FROM {SOURCE_TABLE}")
        name = table.name
        if table.args.get("db") or table.args.get("catalog"):
            raise ForbiddenQueryError(f"sql: table {table.sql()!r} is not allowed; a query reads "
                                      f"only FROM {SOURCE_TABLE}")
        if name.lower() in ctes:
            continue
        if name.lower() != SOURCE_TABLE:
            raise ForbiddenQueryError(f"sql: table {name!r} is not allowed; a query reads only "
                                      f"FROM {SOURCE_TABLE}")
        table_names.add(name)
    if not table_names:
        raise ForbiddenQueryError(f"sql: the query must read FROM {SOURCE_TABLE}")
    _clamp_limits(tree)
    return tree, table_names


def _clamp_limits(tree: exp.Expr) -> None:
    """A ``LIMIT`` of 2**32 rows or more is :data:`MAX_ROWS`, as the request's ``limit``
    is: no answer holds more rows (polars counts them in 32 bits and refuses a larger
    LIMIT)."""
    for node in tree.find_all(exp.Limit):
        count = node.expression
        if (isinstance(count, exp.Literal) and not count.is_string and count.this.isdigit()
                and int(count.this) > MAX_ROWS):
            node.set("expression", exp.Literal.number(MAX_ROWS))


def generated(tree: exp.Expr) -> str:
    """The SQL text polars runs for a checked tree: generated from it in the S3 Select
    dialect, without comments (a comment's text is the request's own)."""
    return tree.sql(dialect=S3SelectDialect, comments=False)


def distinct_names(tree: exp.Expr) -> exp.Expr:
    """The query with the repeated output names of its SELECT list made distinct, as S3
    Select names them: the second ``a`` is ``a:1``, the third ``a:2`` (polars refuses two
    outputs of one name, and given ``SELECT s.a, s.b AS a`` renames the first). Each
    output is named as polars names it (:func:`polars_name`); one whose name polars gives
    otherwise is left as it is."""
    if not isinstance(tree, exp.Select) or any(_is_star(e) for e in tree.expressions):
        return tree
    names = [polars_name(e) for e in tree.expressions]
    given = [n for n in names if n is not None]
    if len(set(given)) == len(given):
        return tree
    distinct = iter(_suffixed(given))
    out = tree.copy()
    for e, name in zip(out.expressions, names, strict=True):
        if name is None:
            continue
        new = next(distinct)
        if new != name:
            bare = e.this if isinstance(e, exp.Alias) else e
            e.replace(exp.alias_(bare.copy(), new, quoted=True))
    return out


def _is_star(e: exp.Expr) -> bool:
    return isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this,
                                                                               exp.Star))


def unqualified(tree: exp.Expr) -> exp.Expr:
    """A copy with table qualifiers dropped from column references (``s.a`` → ``a``)."""
    def strip(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and node.table:
            return exp.column(node.this.copy())
        return node
    return tree.copy().transform(strip)


def s3select_names(sql: str) -> list[str] | None:
    """The names S3 Select gives the columns of ``sql``'s SELECT list, in order: an alias,
    a column's (or a path's last attribute's) name, else the position, ``_1``, ``_2``, …
    None when the list has a ``*`` (its width is the data's) or the SQL is not one
    SELECT."""
    try:
        tree = parse(sql, "sql")
    except QueryError:
        return None
    if not isinstance(tree, exp.Select):
        return None
    names: list[str] = []
    for i, e in enumerate(tree.expressions):
        if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this,
                                                                                exp.Star)):
            return None
        if isinstance(e, exp.Alias):
            names.append(e.alias)
        elif isinstance(e, exp.Column):
            names.append(e.name)
        elif isinstance(e, exp.Dot) and isinstance(e.expression, exp.Identifier):
            names.append(e.expression.name)
        elif (isinstance(e, exp.Bracket) and len(e.expressions) == 1
              and isinstance(e.expressions[0], exp.Literal) and e.expressions[0].is_string):
            names.append(e.expressions[0].this)
        else:
            names.append(f"_{i + 1}")
    return _suffixed(names)


def _suffixed(names: list[str]) -> list[str]:
    """Repeated names made distinct as S3 Select's records hold them: the second ``a`` is
    ``a:1``, the third ``a:2`` (a name the list already has is skipped)."""
    used = set(names)
    seen: set[str] = set()
    out: list[str] = []
    for name in names:
        if name not in seen:
            seen.add(name)
            out.append(name)
            continue
        k = 1
        while f"{name}:{k}" in used:
            k += 1
        used.add(f"{name}:{k}")
        out.append(f"{name}:{k}")
    return out
