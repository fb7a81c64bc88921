"""``s3slice.query.sqlglot.pushdown``: the part of a condition that statistics can judge."""

from __future__ import annotations

import datetime as dt
import decimal

import polars as pl
import pytest
import sqlglot

from s3slice.query.pruning import predicate as P
from s3slice.query.sqlglot.dialect import S3SelectDialect
from s3slice.query.sqlglot.pushdown import to_predicate


def pred(text: str) -> P.Pred:
    return to_predicate(sqlglot.parse_one(text, read=S3SelectDialect))


@pytest.mark.parametrize(("text", "want"), [
    ("a = 1", P.Cmp("a", "=", 1)),
    ("1 < a", P.Cmp("a", ">", 1)),  # the literal on the left: the operator flipped
    ("a <> 'x'", P.Cmp("a", "!=", "x")),
    ("a = TRUE", P.Cmp("a", "=", True)),
    ("NOT (a >= 2.5)", P.Not(P.Cmp("a", ">=", 2.5))),
    ("a BETWEEN -1 AND 1", P.Between("a", -1, 1)),
    ("a IN (1, 2, 3)", P.In("a", (1, 2, 3))),
    ("a IS NULL", P.IsNull("a")),
    ("a IS NOT NULL", P.Not(P.IsNull("a"))),
    ("a = 1 OR (b < 2 AND c > 3)",
     P.Or((P.Cmp("a", "=", 1), P.And((P.Cmp("b", "<", 2), P.Cmp("c", ">", 3)))))),
    ("a > CAST('2024-01-01' AS DATE)", P.Cmp("a", ">", dt.date(2024, 1, 1))),
    ("d >= TO_TIMESTAMP('2024-05-01T10:30Z')", P.Cmp("d", ">=", dt.datetime(2024, 5, 1, 10, 30))),
])
def test_judgeable_conditions(text: str, want: P.Pred) -> None:
    assert pred(text) == want


@pytest.mark.parametrize("text", [
    "a = b", "a + 1 = 2", "UPPER(a) = 'X'", "a LIKE 'x%'", "a BETWEEN 1 AND b",
    "a IN (1, b)",
    "__s3slice_path_0 = 1",  # a path's column: no statistics describe it
])
def test_what_statistics_cannot_judge_is_opaque(text: str) -> None:
    assert pred(text) == P.TRUE


def test_an_opaque_part_keeps_the_rest() -> None:
    assert pred("a = 1 AND UPPER(b) = 'X'") == P.And((P.Cmp("a", "=", 1), P.TRUE))


ROWS = pl.DataFrame({"a": [1, 5, None, 9], "b": [2.0, None, 3.5, 8.0]})


@pytest.mark.parametrize(("text", "may"), [
    ("a = 5", True), ("a > 9", False), ("a < 0", False), ("a BETWEEN 2 AND 4", True),
    ("a IN (10, 11)", False), ("a IS NULL", True), ("NOT a IS NULL AND b > 7", True),
    ("a = 1 OR b = 3.5", True), ("NOT (a < 100)", False), ("b <= 2", True), ("b < 2", False),
    # NaN is not in a float column's statistics and polars orders it above every number.
    ("b > 8", True),
])
def test_the_predicate_never_rules_out_a_matching_row(text: str, may: bool) -> None:
    """The oracle: polars' answer over the rows. Judged by the rows' own min, max and null
    count, the predicate may say "maybe" when no row matches, never "no" when one does."""
    matching = ROWS.sql(f"SELECT * FROM self WHERE {text}").height

    def stats(column: str) -> P.ColumnStats:
        s = ROWS[column]
        return P.ColumnStats(num_rows=len(s), min=s.min(), max=s.max(),
                             null_count=s.null_count(), dtype=s.dtype)

    judged = P.may_match(pred(text), {c: stats(c) for c in ROWS.columns})
    assert judged or matching == 0
    assert judged is may


@pytest.mark.parametrize(("text", "value", "sql"), [
    ("d = 1234567890123.4567", decimal.Decimal("1234567890123.4567"), "1234567890123.4567"),
    ("d = -1.50", decimal.Decimal("-1.50"), "-1.50"),
    ("d = 1e3", 1000.0, "1e3"),
    ("d = 18446744073709551615", 18446744073709551615, "18446744073709551615"),
    ("d = 'it''s'", "it's", "'it''s'"),
])
def test_a_constant_keeps_the_value_and_text_polars_reads(text: str, value: object,
                                                          sql: str) -> None:
    """sqlglot's float for ``1234567890123.4567`` is not polars' decimal: the value is
    typed as polars reads the text, and the text is what the statistics are judged with."""
    got = pred(text)
    assert isinstance(got, P.Cmp)
    assert got.value == value and type(got.value) is type(value)
    assert got.text == sql


def test_polars_judges_a_decimal_constant_exactly() -> None:
    exact = decimal.Decimal("1234567890123.4567")
    stats = P.ColumnStats(num_rows=1, min=exact, max=exact, null_count=0,
                          dtype=pl.Decimal(18, 4))
    assert P.may_match(pred("d = 1234567890123.4567"), {"d": stats})
    assert not P.may_match(pred("d = 1234567890123.4568"), {"d": stats})
    assert not P.may_match(pred("d > 1234567890123.4567"), {"d": stats})
