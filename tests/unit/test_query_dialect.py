"""``s3slice.query.sqlglot.dialect``: S3 Select's date functions, translated into SQL polars runs
(checked against Python's own date arithmetic), and the constants literals stand for."""

from __future__ import annotations

import calendar
import datetime as dt
from typing import Any

import duckdb
import polars as pl
import pytest
import sqlglot

from s3slice.core.errors import FilterSyntaxError
from s3slice.core.model import Query
from s3slice.query.analysis import collect, reads_the_clock, uses_s3select_functions
from s3slice.query.analyzer import analyze
from s3slice.query.sqlglot.dialect import (
    S3SelectDialect,
    literal,
)
from s3slice.query.sqlglot.sql import generated


def parse(text: str) -> sqlglot.exp.Expr:
    return sqlglot.parse_one(text, read=S3SelectDialect)


@pytest.mark.parametrize(("text", "value"), [
    ("1", 1), ("-2", -2), ("2.5", 2.5), ("1e3", 1000.0), ("(7)", 7), ("'x'", "x"),
    ("TRUE", True),
    ("CAST('2024-01-02' AS DATE)", dt.date(2024, 1, 2)),
    ("CAST('2024-01-02 03:04:05' AS TIMESTAMP)", dt.datetime(2024, 1, 2, 3, 4, 5)),
    # A constant TO_TIMESTAMP is parsed at analysis (so that it prunes), in UTC.
    ("TO_TIMESTAMP('2024-05-01T10:30Z')", dt.datetime(2024, 5, 1, 10, 30)),
    ("TO_TIMESTAMP('2024-05-01T12:30+02:00')", dt.datetime(2024, 5, 1, 10, 30)),
    ("TO_TIMESTAMP('2024-05-01T')", dt.datetime(2024, 5, 1)),
])
def test_literal(text: str, value: Any) -> None:
    assert literal(parse(text)) == (True, value)


@pytest.mark.parametrize("text", ["a", "CAST('nope' AS DATE)", "a + 1", "-a"])
def test_not_a_literal(text: str) -> None:
    assert literal(parse(text)) == (False, None)


@pytest.mark.parametrize(("text", "message"), [
    ("DATE_ADD(week, 1, t)", "DATE_ADD: the date part must be one of year, month, day, hour, "
                             "minute, second, got 'week'"),
    ("DATE_ADD(month, 1.5, t)", "DATE_ADD(month, ...): the quantity must be a whole number "
                                "literal, got '1.5'"),
    ("DATE_ADD(day, t)", "DATE_ADD takes 3 argument(s), got 2"),
    ("DATE_DIFF(day, a)", "DATE_DIFF takes 3 argument(s), got 2"),
    ("TO_TIMESTAMP('yesterday')", "TO_TIMESTAMP: 'yesterday' is not an ISO 8601 timestamp"),
    ("UTCNOW(1)", "UTCNOW takes 0 argument(s), got 1"),
])
def test_misused_functions_are_named(text: str, message: str) -> None:
    with pytest.raises(FilterSyntaxError) as caught:
        parse(text)
    assert str(caught.value) == message


def add_months(t: dt.datetime, months: int) -> dt.datetime:
    """The oracle: calendar months, the day clamped to the month's length."""
    index = t.year * 12 + t.month - 1 + months
    year, month = divmod(index, 12)
    day = min(t.day, calendar.monthrange(year, month + 1)[1])
    return t.replace(year=year, month=month + 1, day=day)


def elapsed(a: dt.datetime, b: dt.datetime, seconds: int) -> int:
    """The oracle: whole units of b - a, truncated toward zero."""
    return int((b - a).total_seconds() / seconds)


def whole_years(a: dt.datetime, b: dt.datetime) -> int:
    """The oracle of DATE_DIFF(year, a, b), as S3 Select (MinIO) counts: years whose
    anniversary (month and day) b has reached, negative when b is before a."""
    if b < a:
        return -whole_years(b, a)
    return b.year - a.year - ((b.month, b.day) < (a.month, a.day))


A = [dt.datetime(2023, 11, 30, 22, 0), dt.datetime(2024, 1, 31, 0, 0),
     dt.datetime(2020, 2, 29, 12, 0), dt.datetime(2024, 12, 31, 23, 59, 59)]
B = [dt.datetime(2024, 3, 1, 1, 30), dt.datetime(2024, 1, 30, 12, 0),
     dt.datetime(2021, 2, 28, 12, 0), dt.datetime(2022, 1, 1, 0, 0)]


def test_date_functions_against_python() -> None:
    rows = pl.DataFrame({"a": A, "b": B})
    query = Query(sql="SELECT DATE_ADD(month, 1, a) AS m1, DATE_ADD(month, -14, a) AS m14, "
                      "DATE_ADD(years, 1, a) AS y1, DATE_ADD(hour, 3, a) AS h3, "
                      "DATE_ADD(second, -61, a) AS s61, DATE_ADD(day, 2, a) AS d2, "
                      "DATE_DIFF(year, a, b) AS dy, DATE_DIFF(month, a, b) AS dm, "
                      "DATE_DIFF(day, a, b) AS dd, DATE_DIFF(hour, a, b) AS dh, "
                      "DATE_DIFF(minute, a, b) AS dmin FROM s3object")
    got = collect(analyze(query).finish(rows.lazy())).to_dict(as_series=False)
    assert got == {
        "m1": [add_months(a, 1) for a in A],
        "m14": [add_months(a, -14) for a in A],
        "y1": [add_months(a, 12) for a in A],
        "h3": [a + dt.timedelta(hours=3) for a in A],
        "s61": [a - dt.timedelta(seconds=61) for a in A],
        "d2": [a + dt.timedelta(days=2) for a in A],
        "dy": [whole_years(a, b) for a, b in zip(A, B, strict=True)],
        "dm": [(b.year - a.year) * 12 + b.month - a.month for a, b in zip(A, B, strict=True)],
        "dd": [elapsed(a, b, 86400) for a, b in zip(A, B, strict=True)],
        "dh": [elapsed(a, b, 3600) for a, b in zip(A, B, strict=True)],
        "dmin": [elapsed(a, b, 60) for a, b in zip(A, B, strict=True)],
    }
    # A sanity check of the oracle itself on the clamped day and the truncation.
    assert got["m1"][1] == dt.datetime(2024, 2, 29)
    assert got["dd"][0] == 91 and got["dh"][1] == -12


def test_to_timestamp_of_a_column() -> None:
    rows = pl.DataFrame({"s": ["2024-05-01T10:30:00Z", "2024-05-01T", "2024-05-01T10:30:15.5"]})
    got = collect(analyze(Query(sql="SELECT TO_TIMESTAMP(s) AS t FROM s3object"))
                  .finish(rows.lazy()))
    assert got["t"].to_list() == [dt.datetime(2024, 5, 1, 10, 30),
                                  dt.datetime(2024, 5, 1),
                                  dt.datetime(2024, 5, 1, 10, 30, 15, 500000)]


def test_utcnow_is_the_time_of_analysis() -> None:
    before = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    ok, value = literal(parse("UTCNOW()"))
    after = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    assert ok and before <= value <= after


def test_which_text_needs_translating() -> None:
    assert uses_s3select_functions("select date_add(day, 1, t) from s3object")
    assert not uses_s3select_functions("SELECT a FROM s3object")
    assert reads_the_clock("x < utcnow()")
    assert not reads_the_clock("x < TO_TIMESTAMP('2024-01-01T')")


@pytest.mark.parametrize(("order", "nulls_first"), [
    ("a", False), ("a DESC", False), ("a ASC NULLS FIRST", True), ("a DESC NULLS FIRST", True),
    ("a NULLS LAST", False), ("a DESC NULLS LAST", False)])
def test_null_ordering_is_duckdbs(order: str, nulls_first: bool) -> None:
    """Nulls sort last, ascending and descending, unless the query says NULLS FIRST (as in
    Athena/Trino and DuckDB); the text polars runs spells the order out, so polars' own
    default (nulls first on DESC) never decides."""
    sql = f"SELECT a FROM s3object ORDER BY {order}"
    ordered = parse(sql).args["order"].expressions[0]
    assert ordered.args.get("nulls_first") is nulls_first
    text = generated(parse(sql))
    assert ("NULLS FIRST" if nulls_first else "NULLS LAST") in text
    rows = pl.DataFrame({"a": [1, None, 3]})
    got = pl.SQLContext(frames={"s3object": rows}).execute(text, eager=True)["a"].to_list()
    want = duckdb.sql(f"SELECT a FROM (VALUES (1), (NULL), (3)) s3object(a) "
                      f"ORDER BY {order}").fetchall()
    assert got == [r[0] for r in want]  # the oracle: DuckDB
