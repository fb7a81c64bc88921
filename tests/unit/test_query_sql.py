"""``s3slice.query.sqlglot.sql``: parsing, the sandbox (a query reads only ``s3object``, calls no
function that reads files, and is one SELECT; a filter is a condition) and the names S3
Select gives a SELECT list."""

from __future__ import annotations

import pytest
import sqlglot

from s3slice.core.errors import FilterSyntaxError, ForbiddenQueryError, plain
from s3slice.core.model import Query
from s3slice.query.analysis import SOURCE_TABLE
from s3slice.query.analyzer import analyze
from s3slice.query.sqlglot.sql import (
    parse,
    parse_filter,
    parse_sql,
    s3select_names,
    unqualified,
)


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT * FROM other", "sql: table 'other' is not allowed; a query reads only FROM "
                            "s3object"),
    ("SELECT * FROM db.s3object", "sql: table 'db.s3object' is not allowed"),
    ("SELECT * FROM 's3://other/x.parquet'", "sql: table 's3://other/x.parquet' is not "
                                             "allowed"),
    ('SELECT * FROM "/etc/passwd"', "sql: table '/etc/passwd' is not allowed"),
    ("SELECT * FROM s3object JOIN other ON TRUE", "sql: table 'other' is not allowed"),
    ("SELECT (SELECT MAX(a) FROM secret) FROM s3object", "sql: table 'secret' is not allowed"),
    ("SELECT * FROM read_parquet('/etc/x')", "sql: the function read_parquet is not allowed"),
    ("SELECT read_csv('x') FROM s3object", "sql: the function read_csv is not allowed"),
    ("SELECT scan_parquet('x') FROM s3object", "sql: the function scan_parquet is not allowed"),
    ("DROP TABLE s3object", "sql: only SELECT queries run here, got DROP"),
    ("INSERT INTO s3object VALUES (1)", "sql: only SELECT queries run here, got INSERT"),
    ("SELECT 1", "sql: the query must read FROM s3object"),
])
def test_the_sandbox_refuses(sql: str, message: str) -> None:
    with pytest.raises(ForbiddenQueryError) as caught:
        parse_sql(sql)
    assert str(caught.value).startswith(message)
    with pytest.raises(ForbiddenQueryError):  # and so does the analysis, before any read
        analyze(Query(sql=sql))


@pytest.mark.parametrize(("text", "message"), [
    ("a IN (SELECT a FROM s3object)", "filter: must be a condition on columns, not a query"),
    ("read_csv('x') IS NULL", "filter: the function read_csv is not allowed"),
    ("read_json('x') IS NULL", "filter: the function read_json is not allowed"),
])
def test_a_filter_is_only_a_condition(text: str, message: str) -> None:
    with pytest.raises(ForbiddenQueryError) as caught:
        parse_filter(text)
    assert str(caught.value).startswith(message)


def test_several_statements_are_refused() -> None:
    with pytest.raises(FilterSyntaxError, match="expected one expression, found 2"):
        parse_sql("SELECT * FROM s3object; SELECT 1")
    with pytest.raises(FilterSyntaxError, match="expected one expression, found 2"):
        parse_filter("a = 1; DROP TABLE x")


def test_a_parse_error_says_where() -> None:
    with pytest.raises(FilterSyntaxError) as caught:
        parse_filter("a > ")
    message = str(caught.value)
    assert message.startswith("filter: cannot parse 'a > ': ")
    assert "line 1, column 3" in message
    assert "\x1b" not in message  # no terminal escapes


@pytest.mark.parametrize(("text", "told"), [
    ("SELECT a FROM s3object WHERE a >",
     "ParseExpectedExpression: the operator '>' needs an expression at line 1, column 32"),
    ("SELECT a FROM s3object WHERE", "ParseExpectedExpression: WHERE needs an expression"),
    ("SELECT FROM s3object", "ParseExpectedExpression: the SELECT list needs an expression"),
    ("SELECT a FROM s3object GROUP BY", "ParseExpectedExpression: GROUP BY needs an expression"),
    ("SELECT a FROM s3object ORDER BY", "ParseExpectedExpression: ORDER BY needs an expression"),
    ("SELEC a FROM s3object", "ParseUnexpectedToken: unexpected 'FROM' at line 1, column 12"),
    ("SELECT CAST(a AS) FROM s3object", "ParseExpectedTypeName: expected a type name after CAST"),
    ("SELECT a FROM s3object WHERE (a > 1", "ParseExpectedRightParen: expected ')'"),
    ("SELECT a FROM s3object WHERE a = 'x", "LexerInvalidLiteral: a string opened with ' is "
                                            "never closed"),
    ('SELECT "a FROM s3object', "LexerInvalidLiteral: a quoted name opened with \" is never "
                                "closed"),
])
def test_a_parse_error_is_told_in_s3_selects_terms(text: str, told: str) -> None:
    with pytest.raises(FilterSyntaxError) as caught:
        parse_sql(text)
    message = str(caught.value)
    assert told in message, message
    for internal in ("<class", "sqlglot", "Required keyword", "'expression'", "'this'"):
        assert internal not in message, message


def test_the_sources_a_query_reads() -> None:
    tree, tables = parse_sql("SELECT a FROM S3Object WHERE b > 1")
    assert tables == {"S3Object"}  # as written: polars registers the name the query uses
    assert tree.sql() == "SELECT a FROM S3Object WHERE b > 1"
    # A query's own named subqueries are not sources.
    _, tables = parse_sql("WITH t AS (SELECT * FROM s3object) SELECT * FROM t")
    assert tables == {SOURCE_TABLE}


def test_allowed_queries_parse_to_themselves() -> None:
    assert parse_filter("a = 1 AND b IS NULL").sql() == "a = 1 AND b IS NULL"
    assert parse("SELECT COUNT(*) FROM s3object", "sql").sql() == "SELECT COUNT(*) FROM s3object"


def test_plain() -> None:
    assert plain("\x1b[4mbad\x1b[0m  token\n here") == "bad token here"


def test_unqualified() -> None:
    tree = sqlglot.parse_one("s.a + s3object.b > c")
    assert unqualified(tree).sql() == "a + b > c"
    assert tree.sql() == "s.a + s3object.b > c"  # a copy: the original is unchanged


@pytest.mark.parametrize(("sql", "names"), [
    ("SELECT a, b AS x, s.c.d, s.e['f'], a + 1, s.g[0] FROM s3object s",
     ["a", "x", "d", "f", "_5", "_6"]),
    ("SELECT COUNT(*), MAX(a) AS m FROM s3object", ["_1", "m"]),
    ("SELECT * FROM s3object", None),
    ("SELECT s3object.* FROM s3object", None),
    ("SELECT a FROM s3object UNION ALL SELECT a FROM s3object", None),
    ("nonsense ((", None),
])
def test_s3select_names(sql: str, names: list[str] | None) -> None:
    assert s3select_names(sql) == names
