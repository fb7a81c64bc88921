"""The split's parts below :func:`s3slice.query.split.split_query` (whose plans
``test_split.py`` checks): the tree helpers of ``split_sql``, the classification of
``split_shape``, and ``split_for``/``partial_step`` over an analysed query."""

from __future__ import annotations

import polars as pl
import pytest
import sqlglot

from s3slice.core.errors import QueryError
from s3slice.core.model import Query
from s3slice.query.analysis import collect
from s3slice.query.analyzer import analyze, split_for
from s3slice.query.split.plan import partial_step
from s3slice.query.split.shape import combines, known_aggregates, nesting
from s3slice.query.split.sql import limit_of, output_names, position, strip


@pytest.mark.parametrize(("sql", "limit"), [
    ("SELECT a FROM s3object LIMIT 5 OFFSET 2", (5, 2)),
    ("SELECT a FROM s3object OFFSET 3", (-1, 3)),  # no LIMIT: -1
    ("SELECT a FROM s3object LIMIT 4", (4, 0)),
    ("SELECT a FROM s3object", None),
])
def test_limit_of(sql: str, limit: tuple[int, int] | None) -> None:
    select = sqlglot.parse_one(sql)
    assert isinstance(select, sqlglot.exp.Select)
    assert limit_of(select) == limit


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT a FROM s3object LIMIT 1.5", "LIMIT 1.5 is not a whole number"),
    ("SELECT a FROM s3object FETCH FIRST 3 ROWS ONLY", "FETCH"),
])
def test_limit_of_refuses(sql: str, message: str) -> None:
    select = sqlglot.parse_one(sql)
    assert isinstance(select, sqlglot.exp.Select)
    with pytest.raises(QueryError, match=message):
        limit_of(select)


def test_strip_is_structural_equality_without_qualifiers() -> None:
    assert strip(sqlglot.parse_one("s.a + s3object.b")) == "a + b"
    assert strip(sqlglot.parse_one("s.a")) == strip(sqlglot.parse_one("a"))


def test_position() -> None:
    outputs = sqlglot.parse_one("SELECT a, b + 1 AS c FROM s3object").expressions
    found = position(sqlglot.exp.Literal.number(2), outputs, "ORDER BY")
    assert found is not None and found.sql() == "b + 1"
    assert position(sqlglot.parse_one("a"), outputs, "ORDER BY") is None
    with pytest.raises(QueryError, match="ORDER BY 3: the query has 2 output columns"):
        position(sqlglot.exp.Literal.number(3), outputs, "ORDER BY")


@pytest.mark.parametrize(("sql", "names"), [
    ("SELECT COUNT(*), SUM(x) AS t, MAX(x), MIN(a), 1 FROM s3object",
     ["len", "t", "x", "a", "literal"]),
    ("SELECT MAX(x), MIN(x) FROM s3object", ["x", "x:1"]),  # repeated names suffixed
])
def test_output_names_are_polars_own(sql: str, names: list[str]) -> None:
    assert output_names(sqlglot.parse_one(sql).expressions) == names
    # The oracle: polars itself.
    rows = pl.DataFrame({"a": [1], "x": [2]})
    answer = pl.SQLContext(frames={"s3object": rows}).execute(sql, eager=True)
    assert answer.columns == names


@pytest.mark.parametrize(("sql", "combining", "named"), [
    ("SELECT a FROM s3object UNION ALL SELECT b FROM s3object", False, "UNION"),
    ("SELECT a FROM s3object UNION SELECT b FROM s3object", True, "UNION"),
    ("SELECT * FROM (SELECT a FROM s3object) t", False, "the subquery (SELECT a FROM s3object)"),
    ("SELECT * FROM s3object WHERE a IN (SELECT a FROM s3object)", True,
     "the subquery (SELECT a FROM s3object)"),
    ("WITH t AS (SELECT a FROM s3object) SELECT * FROM t", False,
     "WITH (a common table expression)"),
    ("WITH t AS (SELECT a FROM s3object ORDER BY a) SELECT * FROM t", True,
     "WITH (a common table expression)"),
    ("SELECT * FROM s3object a JOIN s3object b ON a.x = b.x", True, "JOIN"),
])
def test_what_combines_rows(sql: str, combining: bool, named: str) -> None:
    tree = sqlglot.parse_one(sql)
    assert combines(tree) is combining
    assert nesting(tree) == named


def test_var_is_variance() -> None:
    assert known_aggregates(sqlglot.parse_one("VAR(x)")).sql() == "VARIANCE(x)"


def test_split_for_an_analysis() -> None:
    assert split_for(analyze(Query(columns=("a",), filter="a > 1"))) is None
    limited = split_for(analyze(Query(columns=("a",), limit=2)))
    assert limited is not None and limited.sql == "SELECT * FROM s3object LIMIT 2"
    grouped = split_for(analyze(Query(sql="SELECT g, SUM(v) AS v FROM s3object GROUP BY g")))
    assert grouped is not None and grouped.aggregate


def test_partial_step_adds_the_path_columns() -> None:
    """Batch by batch, then merged: the same answer as polars over all rows at once."""
    rows = pl.DataFrame({"g": ["a", "b", "a", "b", "a"],
                         "s": [{"v": 1}, {"v": 2}, {"v": 3}, {"v": None}, {"v": 5}]})
    analysis = analyze(Query(sql="SELECT g, SUM(s.v) AS total FROM s3object GROUP BY g "
                                 "ORDER BY g"))
    split = split_for(analysis)
    assert split is not None
    partials = [collect(partial_step(analysis, split, rows[i:i + 2].lazy()))
                for i in range(0, rows.height, 2)]
    answer = collect(split.final(partials))
    assert answer.to_dict(as_series=False) == {"g": ["a", "b"], "total": [9, 2]}
