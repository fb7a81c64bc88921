"""The query split's shapes: which queries split, into what, and which are refused.

The answers themselves are checked against polars over all rows in
``tests/functional/test_split_oracle.py``; here each plan is parsed back and run once.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl
import pytest
import sqlglot
from sqlglot import exp

from s3slice.core.errors import QueryError
from s3slice.query.split import split_query
from s3slice.query.split.plan import PARTIALS_TABLE, Split
from s3slice.query.split.sql import polars_name

DATA = pl.DataFrame({"g": ["a", "a", "b", None, None, "c"], "x": [1, 2, None, 4, None, 6],
                     "f": [1.5, None, 2.5, 3.0, None, -1.0],
                     "s": ["p", "q", None, "q", "p", "r"]})


def must_split(sql: str) -> Split:
    s = split_query(sql)
    assert s is not None, sql
    # Both plans parse and run in polars: the partial over a batch, the final over it.
    partial = s.partial(DATA).collect()
    pl.SQLContext(frames={PARTIALS_TABLE: partial}).execute(s.final_plan(partial.schema),
                                                            eager=True)
    return s


def tree(sql: str) -> exp.Select:
    parsed = sqlglot.parse_one(sql)
    assert isinstance(parsed, exp.Select)
    return parsed


def functions(sql: str) -> set[str]:
    return {type(f).__name__ for f in tree(sql).find_all(exp.AggFunc)}


# ----------------------------------------------------------------- queries that stand alone

@pytest.mark.parametrize("sql", [
    "SELECT * FROM s3object",
    "SELECT g, x FROM s3object WHERE x > 1",
    "SELECT UPPER(g) AS u, x * 2 FROM s3object WHERE s IS NOT NULL",
    "SELECT a FROM s3object UNION ALL SELECT b FROM s3object",
    "SELECT * FROM (SELECT a FROM s3object) AS t WHERE a > 1",
    "WITH t AS (SELECT a FROM s3object) SELECT a FROM t",
])
def test_row_by_row_queries_do_not_split(sql: str) -> None:
    assert split_query(sql) is None


# ------------------------------------------------------------------------------ the shapes

def test_count_becomes_a_sum_of_counts_that_is_zero_over_no_rows() -> None:
    s = must_split("SELECT COUNT(*), COUNT(x) FROM s3object")
    assert s.aggregate
    assert functions(s.partial_sql) == {"Count"}
    assert functions(s.final_sql) == {"Sum"}
    assert tree(s.final_sql).find(exp.Coalesce) is not None
    assert tree(s.final_sql).args.get("group") is None


def test_avg_is_an_exact_sum_and_a_count_typed_by_a_witness() -> None:
    s = must_split("SELECT AVG(x) FROM s3object")
    # the sum in Int128 (a Decimal(38, 0) partial), the count, and MIN(x): x's own type;
    # for an integer x, the parts a decimal's sum is cut into are nulls
    assert functions(s.partial_sql) == {"Sum", "Count", "Min"}
    plan = tree(s.partial_plan(DATA.schema))
    assert [t.this for t in plan.find_all(exp.DataType)] == [exp.DataType.Type.INT128] * 3
    assert len(list(plan.find_all(exp.Null))) == 2
    assert s.wide == ("__s3slice_s0", "__s3slice_s1", "__s3slice_s2")
    final = tree(s.final_plan(s.partial(DATA).collect_schema()))
    assert final.find(exp.Div) is not None and final.find(exp.Nullif) is not None
    # divided once, in Float64
    assert [c.to.this for c in final.find_all(exp.Cast)] == [exp.DataType.Type.DOUBLE]


def test_shared_states_are_computed_once() -> None:
    s = must_split("SELECT SUM(x), AVG(x), COUNT(x), MIN(x) FROM s3object")
    # SUM(x) in its three parts (split_types.sum_parts), COUNT(x), MIN(x)
    assert len(tree(s.partial_sql).expressions) == 5


def test_min_max_merge_as_themselves() -> None:
    s = must_split("SELECT MIN(x), MAX(s) FROM s3object")
    assert functions(s.partial_sql) == functions(s.final_sql) == {"Min", "Max"}


def test_variance_carries_count_mean_and_m2_and_merges_over_a_pooled_mean() -> None:
    s = must_split("SELECT g, STDDEV(f), VARIANCE(f) FROM s3object GROUP BY g")
    assert functions(s.partial_sql) == {"Count", "Avg", "Variance", "Min", "Sum"}
    final = tree(s.final_sql)
    assert final.find(exp.Window) is not None  # the pooled mean per group
    assert final.find(exp.Sqrt) is not None
    # key, n, mean, M2, exact sum, witness (shared by both aggregates)
    assert len(tree(s.partial_sql).expressions) == 6


def test_count_distinct_groups_the_partial_by_its_argument() -> None:
    s = must_split("SELECT g, COUNT(DISTINCT s), SUM(x) FROM s3object GROUP BY g")
    group = tree(s.partial_sql).args["group"]
    assert [e.sql() for e in group.expressions] == ["g", "s"]
    distinct = tree(s.final_sql).find(exp.Distinct)
    assert distinct is not None


def test_group_keys_having_and_expressions_over_aggregates_are_final_only() -> None:
    s = must_split("SELECT UPPER(g) AS u, SUM(x) / COUNT(*) AS r FROM s3object "
                   "GROUP BY UPPER(g) HAVING COUNT(*) > 1 ORDER BY r DESC LIMIT 2")
    partial, final = tree(s.partial_sql), tree(s.final_sql)
    assert partial.args.get("having") is None and partial.args.get("order") is None
    assert partial.args.get("limit") is None
    assert [e.sql() for e in partial.args["group"].expressions] == ["UPPER(g)"]
    assert final.args.get("having") is not None and final.args.get("limit") is not None
    assert final.find(exp.Upper) is None  # the key is computed once, per batch
    assert [e.alias for e in final.expressions] == ["u", "r"]


def test_group_by_position_and_alias() -> None:
    by_position = must_split("SELECT g, COUNT(*) FROM s3object GROUP BY 1")
    by_alias = must_split("SELECT UPPER(g) AS u, COUNT(*) FROM s3object GROUP BY u")
    assert "GROUP BY g" in by_position.partial_sql
    assert "GROUP BY UPPER(g)" in by_alias.partial_sql


def test_where_runs_in_the_partial_only() -> None:
    s = must_split("SELECT COUNT(*) FROM s3object WHERE x > 1")
    assert tree(s.partial_sql).args.get("where") is not None
    assert tree(s.final_sql).args.get("where") is None


def test_order_limit_keeps_the_top_k_plus_offset_per_batch() -> None:
    s = must_split("SELECT g, x FROM s3object ORDER BY x DESC NULLS LAST LIMIT 3 OFFSET 2")
    assert not s.aggregate
    partial = tree(s.partial_sql)
    assert partial.args["limit"].expression.sql() == "5"
    assert partial.args.get("offset") is None
    assert "NULLS LAST" in s.partial_sql and "NULLS LAST" in s.final_sql
    assert "LIMIT 3 OFFSET 2" in s.final_sql
    assert s.partial(DATA).collect().height == 5
    # The hidden order key leaves the answer.
    assert s.run([DATA]).collect().columns == ["g", "x"]


def test_order_by_position_in_select_star_orders_by_that_column() -> None:
    s = must_split("SELECT * FROM s3object ORDER BY 2 DESC, s LIMIT 3")
    assert "ORDER BY 2 DESC" in s.partial_sql and "ORDER BY 2 DESC" in s.final_sql
    assert s.run([DATA[:2], DATA[2:]]).collect()["x"].to_list() == [None, None, 6]


def test_an_alias_in_order_by_means_the_output() -> None:
    s = must_split("SELECT -x AS x FROM s3object ORDER BY x LIMIT 2")
    assert s.run([DATA[:3], DATA[3:]]).collect()["x"].to_list() == [-6, -4]


def test_plain_order_keeps_polars_null_order() -> None:
    """``ORDER BY x DESC`` puts nulls first in polars; rebuilt, it must still."""
    s = must_split("SELECT x FROM s3object ORDER BY x DESC LIMIT 2")
    assert s.run([DATA[:3], DATA[3:]]).collect()["x"].to_list() == [None, None]


def test_limit_without_order_takes_the_first_rows_of_each_batch() -> None:
    s = must_split("SELECT x FROM s3object LIMIT 4")
    assert tree(s.partial_sql).args.get("order") is None
    assert s.run([DATA[:2], DATA[2:]]).collect()["x"].to_list() == [1, 2, None, 4]


def test_select_distinct_is_distinct_twice() -> None:
    s = must_split("SELECT DISTINCT g FROM s3object")
    assert tree(s.partial_sql).args.get("distinct") is not None
    assert tree(s.final_sql).args.get("distinct") is not None
    got = s.run([DATA, DATA]).collect()["g"].to_list()
    assert len(got) == 4 and set(got) == {"a", "b", "c", None}


def test_empty_batches_have_the_partial_schema() -> None:
    s = must_split("SELECT g, COUNT(*) AS n, SUM(x), STDDEV(f) FROM s3object GROUP BY g")
    empty = s.partial(DATA.clear()).collect()
    full = s.partial(DATA).collect()
    assert empty.height == 0 and empty.schema == full.schema


def test_global_aggregate_over_nothing_is_one_row_of_zero_and_nulls() -> None:
    s = must_split("SELECT COUNT(*) AS n, SUM(x) AS sx, COUNT(DISTINCT s) AS d, "
                   "AVG(f) AS m FROM s3object")
    got = s.run([DATA.clear()]).collect()
    assert got.rows() == [(0, None, 0, None)]
    assert s.run([], schema=DATA.schema).collect().rows() == [(0, None, 0, None)]


def test_final_needs_a_partial() -> None:
    s = must_split("SELECT COUNT(*) FROM s3object")
    with pytest.raises(ValueError, match="no partial frames"):
        s.final([])


def test_output_schema_is_polars_own() -> None:
    s = must_split("SELECT COUNT(*), SUM(x), MIN(x) FROM s3object")
    assert s.output_schema(DATA.schema) == pl.Schema(
        {"len": pl.Int64, "x": pl.Int64, "x:1": pl.Int64})


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*), COUNT(x), SUM(x), MIN(x), AVG(f), MAX(s) FROM s3object",
    "SELECT COUNT(*) + 1, 1 + COUNT(*), SUM(x) * 2, -MIN(x) FROM s3object",
    "SELECT g, COUNT(DISTINCT s), CASE WHEN SUM(x) > 1 THEN MIN(f) ELSE 0 END "
    "FROM s3object GROUP BY g",
    "SELECT CAST(SUM(x) AS DOUBLE), COALESCE(MAX(f), 0), ABS(MIN(x)) FROM s3object",
])
def test_final_names_follow_polars(sql: str) -> None:
    s = must_split(sql)
    want = pl.SQLContext(frames={"s3object": DATA}).execute(sql, eager=True).columns
    assert s.run([DATA]).collect().columns == want


def test_polars_name_of_single_expressions() -> None:
    def name(text: str) -> str | None:
        return polars_name(sqlglot.parse_one(text))
    assert name("COUNT(*)") == "len"
    assert name("SUM(x) / COUNT(*)") == "x"
    assert name("1 + SUM(y)") == "literal"
    assert name("COUNT(DISTINCT z)") == "z"
    assert name("x AS w") == "w"


# -------------------------------------------------------------------------------- refusals

@pytest.mark.parametrize(("sql", "named"), [
    ("SELECT MEDIAN(x) FROM s3object", "MEDIAN"),
    ("SELECT g, MEDIAN(x) FROM s3object GROUP BY g", "MEDIAN"),
    ("SELECT QUANTILE_CONT(x, 0.5) FROM s3object", "QUANTILE_CONT"),
    ("SELECT QUANTILE_DISC(x, 0.9) FROM s3object", "QUANTILE_DISC"),
    ("SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY x) FROM s3object",
     "PERCENTILE_CONT"),
    ("SELECT FIRST(x) FROM s3object", "FIRST"),
    ("SELECT LAST(x) FROM s3object", "LAST"),
    ("SELECT ARRAY_AGG(x) FROM s3object", "ARRAY_AGG"),
    ("SELECT STRING_AGG(s, ',') FROM s3object", "GROUP_CONCAT"),  # sqlglot's name for it
    ("SELECT CORR(x, f) FROM s3object", "CORR"),
    ("SELECT COVAR_SAMP(x, f) FROM s3object", "COVAR_SAMP"),
    ("SELECT STDDEV_POP(x) FROM s3object", "STDDEV_POP"),
    ("SELECT VAR_POP(x) FROM s3object", "VARIANCE_POP"),
    ("SELECT MODE(x) FROM s3object", "MODE"),
    ("SELECT x, SUM(x) OVER () FROM s3object", "window function"),
    ("SELECT x, ROW_NUMBER() OVER (ORDER BY x) AS r FROM s3object", "window function"),
    ("SELECT g, RANK() OVER (PARTITION BY g ORDER BY x) FROM s3object", "window function"),
    ("SELECT COUNT(x) FILTER (WHERE x > 1) FROM s3object", "FILTER"),
    ("SELECT STDDEV(DISTINCT x) FROM s3object", "DISTINCT"),
    ("SELECT COUNT(DISTINCT x, s) FROM s3object", "DISTINCT over several"),
    ("SELECT g, COUNT(*) FROM s3object GROUP BY ROLLUP (g)", "ROLLUP"),
    ("SELECT DISTINCT ON (g) g, x FROM s3object", "DISTINCT ON"),
    ("SELECT COUNT(*) FROM (SELECT x FROM s3object) AS t", "subquery"),
    ("SELECT x FROM s3object WHERE x > (SELECT AVG(x) FROM s3object)", "subquery"),
    ("SELECT x FROM s3object WHERE x IN (SELECT x FROM s3object)", "subquery"),
    ("WITH t AS (SELECT x FROM s3object) SELECT SUM(x) FROM t", "WITH"),
    ("SELECT a.x FROM s3object AS a JOIN s3object AS b ON a.x = b.x", "JOIN"),
    ("SELECT x FROM s3object UNION SELECT x FROM s3object", "UNION"),
    ("SELECT x FROM s3object INTERSECT SELECT x FROM s3object", "INTERSECT"),
    ("SELECT * FROM s3object GROUP BY g", "SELECT *"),
    ("SELECT g, x FROM s3object GROUP BY g", "neither grouped nor"),
    ("SELECT g, COUNT(*) FROM s3object GROUP BY g ORDER BY x", "neither grouped nor"),
    ("SELECT DISTINCT g FROM s3object ORDER BY x", "not selected"),
    ("SELECT x FROM s3object LIMIT x", "LIMIT"),
])
def test_what_cannot_be_split_exactly_is_refused_by_name(sql: str, named: str) -> None:
    with pytest.raises(QueryError, match=named):
        split_query(sql)


def test_refusal_is_a_query_error_before_any_data() -> None:
    """The map never starts: the split is decided from the text alone."""
    with pytest.raises(QueryError, match="cannot be split across batches"):
        split_query("SELECT g, MEDIAN(x) AS m FROM s3object GROUP BY g HAVING COUNT(*) > 1")


def test_an_equal_query_is_split_once(sql_parsed: Callable[[str], list[str]]) -> None:
    sql = "SELECT region, SUM(x) AS total_once FROM s3object GROUP BY region"
    first = split_query(sql)
    parses = sql_parsed("parse_one")
    assert split_query(sql) is first
    assert parses == []


@pytest.mark.parametrize("sql", [
    "SELECT g, SUM(x) AS s FROM s3object GROUP BY g -- per group",
    "SELECT g /* the key */, SUM(x) AS s FROM s3object GROUP BY g ORDER BY g",
])
def test_comments_do_not_change_what_a_group_key_is(sql: str) -> None:
    s = must_split(sql)
    got = s.final([s.partial(DATA).collect()]).collect()
    want = pl.SQLContext(s3object=DATA).execute(sql, eager=True)
    assert got.sort("g", nulls_last=True).equals(want.sort("g", nulls_last=True))
