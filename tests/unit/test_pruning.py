"""Pruning never loses a row: property tests against polars as the oracle."""

from __future__ import annotations

import datetime as dt
import io

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3slice import Query
from s3slice.parquet.footer import parse_footer
from s3slice.parquet.plan import prune
from s3slice.query import predicate as P
from s3slice.query.analyzer import analyze

ROWS = 60


def frame_st() -> st.SearchStrategy[pl.DataFrame]:
    def build(ints: list[int | None], floats: list[float | None], strs: list[str | None],
              days: list[int | None]) -> pl.DataFrame:
        return pl.DataFrame({
            "i": pl.Series(ints, dtype=pl.Int64),
            "f": pl.Series(floats, dtype=pl.Float64),
            "s": pl.Series(strs, dtype=pl.String),
            "d": pl.Series([None if x is None else dt.date(2024, 1, 1) + dt.timedelta(days=x)
                            for x in days], dtype=pl.Date),
        })
    ints = st.lists(st.none() | st.integers(-50, 50), min_size=ROWS, max_size=ROWS)
    floats = st.lists(st.none() | st.floats(-50, 50, allow_nan=False) | st.just(float("nan")),
                      min_size=ROWS, max_size=ROWS)
    strs = st.lists(st.none() | st.sampled_from(["a", "b", "ba", "c", "zz", ""]),
                    min_size=ROWS, max_size=ROWS)
    days = st.lists(st.none() | st.integers(0, 60), min_size=ROWS, max_size=ROWS)
    return st.builds(build, ints, floats, strs, days)


def literal(column: str) -> st.SearchStrategy[str]:
    if column == "i":
        return st.integers(-60, 60).map(str)
    if column == "f":
        return st.floats(-60, 60, allow_nan=False).map(lambda x: f"{x:.3f}")
    if column == "s":
        return st.sampled_from(["a", "b", "bb", "c", "z", ""]).map(lambda v: f"'{v}'")
    return st.integers(-5, 65).map(
        lambda x: f"DATE '{(dt.date(2024, 1, 1) + dt.timedelta(days=x)).isoformat()}'")


def atom() -> st.SearchStrategy[str]:
    column = st.sampled_from(["i", "f", "s", "d"])

    def for_column(c: str) -> st.SearchStrategy[str]:
        op = st.sampled_from(["=", "!=", "<", "<=", ">", ">="])
        return st.one_of(
            st.tuples(op, literal(c)).map(lambda t: f"{c} {t[0]} {t[1]}"),
            st.tuples(op, literal(c)).map(lambda t: f"{t[1]} {t[0]} {c}"),
            st.tuples(literal(c), literal(c)).map(lambda t: f"{c} BETWEEN {t[0]} AND {t[1]}"),
            st.lists(literal(c), min_size=1, max_size=3).map(
                lambda v: f"{c} IN ({', '.join(v)})"),
            st.just(f"{c} IS NULL"),
            st.just(f"{c} IS NOT NULL"),
        )
    return column.flatmap(for_column)


def conditions(atoms: st.SearchStrategy[str], *, max_leaves: int,
               or_format: str = "({}) OR ({})") -> st.SearchStrategy[str]:
    """``atoms`` combined with AND, OR (spelled by ``or_format``) and NOT."""
    return st.recursive(
        atoms,
        lambda inner: st.one_of(
            st.tuples(inner, inner).map(lambda t: f"({t[0]}) AND ({t[1]})"),
            st.tuples(inner, inner).map(lambda t: or_format.format(*t)),
            inner.map(lambda t: f"NOT ({t})"),
        ),
        max_leaves=max_leaves,
    )


def predicate_st() -> st.SearchStrategy[str]:
    return conditions(atom(), max_leaves=5)


@settings(max_examples=150)
@given(frame_st(), predicate_st(), st.sampled_from([5, 10, 20]))
def test_a_group_holding_a_match_is_never_pruned(frame: pl.DataFrame, where: str,
                                                 group_rows: int) -> None:
    buf = io.BytesIO()
    frame.write_parquet(buf, row_group_size=group_rows, statistics=True)
    data = buf.getvalue()
    footer = parse_footer(data, size=len(data), uri="u")
    analysis = analyze(Query(filter=where))
    kept = set(prune(footer.metadata, analysis.predicate))
    expr = pl.sql_expr(where)
    offset = 0
    for g in range(footer.metadata.num_row_groups):
        n = footer.metadata.row_group(g).num_rows
        part = frame.slice(offset, n)
        offset += n
        if part.filter(expr).height > 0:
            assert g in kept, f"row group {g} holds a match for {where!r} but was pruned"


def test_pruning_does_prune() -> None:
    frame = pl.DataFrame({"i": range(100)})
    buf = io.BytesIO()
    frame.write_parquet(buf, row_group_size=10)
    data = buf.getvalue()
    md = parse_footer(data, size=len(data), uri="u").metadata
    cases = {
        "i < 10": [0], "i >= 95": [9], "i BETWEEN 25 AND 34": [2, 3], "i IN (5, 77)": [0, 7],
        "i = 50 OR i = 51": [5], "NOT (i >= 10)": [0], "i IS NULL": [],
        "i < 10 AND i > 80": [], "i * 2 < 10": list(range(10)),
        "i <= 10 AND length(cast(i AS varchar)) > 0": [0, 1],
    }
    for where, expected in cases.items():
        assert prune(md, analyze(Query(filter=where)).predicate) == expected, where


@pytest.mark.parametrize(("stats", "pred", "possible"), [
    (P.ColumnStats(num_rows=3, null_count=3), P.Cmp("x", "=", 1), False),
    (P.ColumnStats(num_rows=3, null_count=3), P.IsNull("x"), True),
    (P.ColumnStats(num_rows=3, min=1, max=3, null_count=0), P.IsNull("x"), False),
    (P.ColumnStats(num_rows=3, min=1, max=3, null_count=0), P.Not(P.IsNull("x")), True),
    (P.ColumnStats(num_rows=3), P.Cmp("x", "=", 1), True),
    (P.ColumnStats(num_rows=3, min=1.0, max=2.0, null_count=0),
     P.Cmp("x", ">", 5.0), True),  # NaN rows are not in the statistics
    (P.ColumnStats(num_rows=3, min=1.0, max=2.0, null_count=0),
     P.Cmp("x", "<", 0.5), False),
    (P.ColumnStats(num_rows=3, min="b", max="d", null_count=0), P.Cmp("x", "<", "b"), False),
    (P.ColumnStats(num_rows=3, min=5, max=5, null_count=0), P.Not(P.Cmp("x", "=", 5)), False),
    (P.ColumnStats(num_rows=3, min=dt.date(2024, 1, 1), max=dt.date(2024, 2, 1), null_count=0),
     P.Cmp("x", ">", "2024-03-01"), False),
    (P.ColumnStats(num_rows=3, min=1, max=9, null_count=0), P.Cmp("x", "=", "text"), True),
])
def test_truth_table(stats: P.ColumnStats, pred: P.Pred, possible: bool) -> None:
    assert P.may_match(pred, {"x": stats}) is possible
