"""``s3slice.query.analysis``: what a query reads, its per-piece and final steps, and the
cache that lets the cold start's check and every read share one analysis."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from s3slice.core.errors import FilterSyntaxError, QueryError, UnknownColumnError
from s3slice.core.model import Query
from s3slice.query import analyzer as A
from s3slice.query.analysis import collect
from s3slice.query.analyzer import analyze
from s3slice.query.pruning import predicate as P

ROWS = pl.DataFrame({"a": [1, 2, 3, 4], "b": ["w", "x", "y", "z"], "c": [10, 20, 30, 40],
                     "d": [0.5, None, 1.5, 2.5]})


# ------------------------------------------------------------------------- what is read

def test_filter_query_reads_its_columns_and_the_filter_columns() -> None:
    a = analyze(Query(columns=("a", "b"), filter="c > 1 AND s3object.d = 'x'"))
    assert a.columns == ("a", "b")
    assert a.referenced == {"a", "b", "c", "d"}
    assert a.predicate == P.And((P.Cmp("c", ">", 1), P.Cmp("d", "=", "x")))
    assert a.where == "c > 1 AND d = 'x'"  # the qualifier dropped
    assert a.sql is None and a.table_names == ()
    assert a.per_object and a.early_limit is None


def test_sql_names_that_are_also_aliases_are_optional() -> None:
    a = analyze(Query(sql="SELECT SUM(v) AS v, g FROM s3object WHERE x BETWEEN 1 AND 3 "
                          "GROUP BY g ORDER BY v"))
    assert a.columns == ("g", "v", "x")
    assert a.referenced == {"g", "x"}
    assert a.optional == {"v"}
    assert a.predicate == P.Between("x", 1, 3)
    assert a.where == "x BETWEEN 1 AND 3"
    assert a.table_names == ("s3object",)
    assert not a.per_object and a.early_limit is None


def test_a_where_column_is_never_merely_optional() -> None:
    # v is an alias, but WHERE sees only the source's columns: v must exist.
    a = analyze(Query(sql="SELECT a AS v FROM s3object WHERE v > 1"))
    assert a.referenced == {"a", "v"}
    assert a.optional == frozenset()


def test_select_star_reads_every_column() -> None:
    a = analyze(Query(sql="SELECT * FROM s3object LIMIT 5"))
    assert a.columns is None
    assert a.needed_columns(["c", "a", "b"], source="s3://b/k") == ["c", "a", "b"]


def test_limit_without_sql_may_stop_reading_early() -> None:
    a = analyze(Query(filter="a = 1", limit=3))
    assert a.early_limit == 3
    assert not a.per_object


def test_needed_columns_in_schema_order() -> None:
    a = analyze(Query(columns=("c", "a"), filter="b = 'x'"))
    assert a.needed_columns(["a", "b", "c", "d"], source="s3://b/k") == ["a", "b", "c"]


def test_needed_columns_names_every_missing_column() -> None:
    a = analyze(Query(columns=("a", "nope"), filter="gone = 1"))
    with pytest.raises(UnknownColumnError) as caught:
        a.needed_columns(["a", "b"], source="s3://b/k")
    assert caught.value.columns == ["gone", "nope"]
    assert caught.value.source == "s3://b/k"


def test_optional_names_are_fetched_only_when_present() -> None:
    a = analyze(Query(sql="SELECT SUM(v) AS v FROM s3object"))
    assert a.needed_columns(["v", "w"], source="k") == ["v"]
    assert a.needed_columns(["w"], source="k") == []  # not an unknown column


def test_partition_columns_are_constants_never_fetched() -> None:
    a = analyze(Query(columns=("a", "year"))).for_object({"year": 2024}, {"year": pl.Int64})
    assert a.needed_columns(["a", "b"], source="k") == ["a"]
    out = collect(a.prefilter(ROWS.lazy()))
    assert out.to_dict(as_series=False) == {"a": [1, 2, 3, 4], "year": [2024] * 4}


def test_for_object_without_partitions_is_the_same_analysis() -> None:
    a = analyze(Query(columns=("a",)))
    assert a.for_object({}, {}) is a
    pruned = a.for_object({}, {}, pruned=True)
    assert pruned is not a and pruned.pruned and not a.pruned


def test_fields_of_attribute_paths() -> None:
    a = analyze(Query(sql="SELECT s.b.c, s.tags[0] FROM s3object s WHERE s.b.d = 1"))
    # tags is indexed at its root (read whole); b only through attributes.
    assert a.fields() == {"b": frozenset({"b.c", "b.d"})}
    assert [p.root for p in a.where_paths] == ["b"]
    whole = analyze(Query(sql="SELECT s.b.c, b FROM s3object s"))
    assert whole.fields() == {}  # b is also named whole


# ----------------------------------------------------------------- the per-piece step

def test_prefilter_filters_projects_and_limits() -> None:
    a = analyze(Query(columns=("b",), filter="a >= 2 AND d IS NOT NULL", limit=1))
    assert collect(a.prefilter(ROWS.lazy())).to_dict(as_series=False) == {"b": ["y"]}


def test_prefilter_of_sql_only_filters() -> None:
    a = analyze(Query(sql="SELECT COUNT(*) AS n FROM s3object WHERE c > 15"))
    out = collect(a.prefilter(ROWS.lazy()))
    assert_frame_equal(out, ROWS.filter(pl.col("c") > 15))


def test_prefilter_matches_polars_on_the_same_condition() -> None:
    a = analyze(Query(filter="(a < 2 OR b IN ('y', 'z')) AND NOT c = 40"))
    want = ROWS.filter(((pl.col("a") < 2) | pl.col("b").is_in(["y", "z"])) & (pl.col("c") != 40))
    assert_frame_equal(collect(a.prefilter(ROWS.lazy())), want)


def test_prefilter_computes_and_drops_where_paths() -> None:
    rows = pl.DataFrame({"id": [1, 2, 3], "s": [{"k": 1}, {"k": 5}, {"k": 9}]})
    a = analyze(Query(filter="s3object.s.k > 2"))
    out = collect(a.prefilter(rows.lazy()))
    assert out.to_dict(as_series=False) == {"id": [2, 3], "s": [{"k": 5}, {"k": 9}]}


def test_finish_runs_the_sql_over_all_pieces() -> None:
    a = analyze(Query(sql="SELECT b, c * 2 AS twice FROM s3object WHERE a > 1 "
                          "ORDER BY c DESC LIMIT 2"))
    pieces = pl.concat([collect(a.prefilter(ROWS[:2].lazy())),
                        collect(a.prefilter(ROWS[2:].lazy()))])
    out = collect(a.finish(pieces.lazy()))
    assert out.to_dict(as_series=False) == {"b": ["z", "y"], "twice": [80, 60]}


def test_finish_without_sql_projects_and_limits() -> None:
    a = analyze(Query(columns=("c",), limit=3))
    assert collect(a.finish(ROWS.lazy())).to_dict(as_series=False) == {"c": [10, 20, 30]}


def test_a_filter_that_does_not_parse_fails_at_analysis() -> None:
    with pytest.raises(FilterSyntaxError):
        analyze(Query(filter="a = = 1"))


def test_collect_names_a_missing_column() -> None:
    with pytest.raises(QueryError, match="does not have"):
        collect(ROWS.lazy().select(pl.col("nope")))


# --------------------------------------------------------------------------- the cache

def test_an_equal_query_is_analysed_once(sql_parsed: Callable[[str], list[str]]) -> None:
    calls = sql_parsed("parse")
    # A text no other test analyses, so that the first call is a miss.
    sql = f"SELECT a, SUM(c) AS total FROM s3object WHERE b <> '{uuid.uuid4().hex}' GROUP BY a"
    first = analyze(Query(sql=sql))
    assert calls == [sql]
    second = analyze(Query(sql=sql))  # an equal query, another object
    assert second is first
    assert calls == [sql]  # no parsing the second time
    assert analyze(Query(sql=sql, limit=1)) is not first  # another query, analysed anew
    assert len(calls) == 2


def test_filter_queries_are_cached_too() -> None:
    q = Query(columns=("a",), filter=f"b = '{uuid.uuid4().hex}'")
    assert analyze(q) is analyze(Query(columns=("a",), filter=q.filter))


def test_utcnow_is_never_cached() -> None:
    q = Query(sql="SELECT a FROM s3object WHERE t < UTCNOW()")
    first, second = analyze(q), analyze(q)
    assert first is not second
    assert first.predicate != P.TRUE  # a constant timestamp, per analysis


def test_an_unhashable_hand_built_query_is_still_analysed() -> None:
    q = Query(columns=["a", "b"])  # type: ignore[arg-type]
    assert analyze(q).referenced == {"a", "b"}


def test_errors_are_raised_every_time() -> None:
    q = Query(sql="DROP TABLE s3object")
    for _ in range(2):
        with pytest.raises(QueryError):
            analyze(q)


def test_the_cache_is_bounded() -> None:
    info = A._cached.cache_info()
    assert info.maxsize == A.CACHE_SIZE == 64


def test_a_cached_analysis_cannot_be_changed() -> None:
    a = analyze(Query(columns=("a",)))
    with pytest.raises(AttributeError):
        a.where = "a > 1"  # type: ignore[misc]
    with pytest.raises(TypeError):
        a.partitions["year"] = 2024  # type: ignore[index]
    assert isinstance(a.paths, tuple) and isinstance(a.referenced, frozenset)

