"""A plain filter analysed from polars' parse equals sqlglot's analysis of the same text
(the reference); anything else is left to sqlglot."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3slice.core.errors import FilterSyntaxError, QueryError
from s3slice.core.model import Query
from s3slice.query.analyzer import analyze
from s3slice.query.polars.plain_filter import analyze_plain_filter
from s3slice.query.pruning import predicate as P
from s3slice.query.sqlglot.analysis import analyze_filter
from tests.unit.test_pruning import conditions

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"

COLUMNS = ["a", "b", "ts", '"two words"', '"MixedCase"', "d"]
LITERALS = ["0", "7", "-3", "9223372036854775807", "1.5", "-0.25", "2.50", "1e3", "'x'",
            "'it''s'", "''", "TRUE", "FALSE", "NULL", "DATE '2020-01-02'",
            "TIMESTAMP '2020-01-02 03:04:05'", "TIMESTAMP '2021-06-30 23:59:59.123456'"]
IN_LISTS = ["(1, 2, 3)", "(-1)", "('x', 'y')", "(TRUE)", "(DATE '2020-01-02', DATE '2021-01-01')"]
OPS = ["=", "<>", "!=", "<", "<=", ">", ">="]


def atom() -> st.SearchStrategy[str]:
    column, literal = st.sampled_from(COLUMNS), st.sampled_from(LITERALS)
    bound = st.sampled_from([v for v in LITERALS if v != "NULL"])
    return st.one_of(
        st.tuples(column, st.sampled_from(OPS), literal).map(" ".join),
        st.tuples(literal, st.sampled_from(OPS), column).map(" ".join),
        st.tuples(column, st.sampled_from(OPS), column).map(" ".join),
        column.map(lambda c: f"{c} IS NULL"),
        column.map(lambda c: f"{c} IS NOT NULL"),
        st.tuples(column, st.sampled_from(["IN", "NOT IN"]), st.sampled_from(IN_LISTS)).map(
            " ".join),
        # Not NULL as a bound: sqlglot's analysis then judges nothing of the BETWEEN, where
        # polars' ``x >= l AND x <= NULL`` keeps the half it can (the pruning tests hold
        # both sound).
        st.tuples(column, st.sampled_from(["BETWEEN", "NOT BETWEEN"]), bound, bound).map(
            lambda t: f"{t[0]} {t[1]} {t[2]} AND {t[3]}"),
    )


def filter_st() -> st.SearchStrategy[str]:
    # OR unparenthesised: the parsers' precedence of AND over OR is compared too.
    return conditions(atom(), max_leaves=6, or_format="{} OR {}")


NEGATED: dict[str, P.CmpOp] = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=",
                              ">=": "<"}


def canonical(pred: P.Pred, negate: bool = False) -> P.Pred:
    """The predicate with every NOT pushed down to the comparisons (De Morgan's laws and
    ``NOT a < v`` as ``a >= v`` hold in SQL's three-valued logic) and BETWEEN written as
    SQL defines it, ``x >= l AND x <= h``: polars spells ``a <> 1``, ``NOT BETWEEN`` and
    ``NOT (x AND y)`` otherwise than sqlglot, with the same meaning."""
    match pred:
        case P.Between(column=c, low=lo, high=hi):
            return canonical(P.And((P.Cmp(c, ">=", lo), P.Cmp(c, "<=", hi))), negate)
        case P.And(items=items):
            parts = tuple(canonical(p, negate) for p in items)
            return P.Or(parts) if negate else P.And(parts)
        case P.Or(items=items):
            parts = tuple(canonical(p, negate) for p in items)
            return P.And(parts) if negate else P.Or(parts)
        case P.Not(item=item):
            return canonical(item, not negate)
        case P.Cmp(column=c, op=op, value=v) if negate:
            return P.Cmp(c, NEGATED[op], v)
        case P.In() | P.IsNull() if negate:
            return P.Not(pred)
    return pred


def assert_same_as_sqlglot(query: Query) -> None:
    plain = analyze_plain_filter(query)
    assert plain is not None, f"{query.filter!r} was left to sqlglot"
    try:
        reference = analyze_filter(query)
    except QueryError:  # sqlglot refuses it: the plain path must not accept it
        raise AssertionError(f"{query.filter!r}: accepted by polars, refused by sqlglot") from None
    assert canonical(plain.predicate) == canonical(reference.predicate)
    # Each path runs the text of its own parse: the plain path the filter polars read, the
    # sqlglot path the text generated from sqlglot's tree (issue 28: one parse decides).
    assert plain.where == query.filter
    assert dataclasses.replace(plain, predicate=P.TRUE, where=None) == dataclasses.replace(
        reference, predicate=P.TRUE, where=None)


@settings(max_examples=400, deadline=None)
@given(text=filter_st(), columns=st.none() | st.just(("b", "a")))
def test_a_plain_filter_is_analysed_as_sqlglot_analyses_it(text: str,
                                                           columns: tuple[str, ...] | None) -> None:
    assert_same_as_sqlglot(Query(columns=columns, filter=text))


@pytest.mark.parametrize("text", [
    "col_1 <= 1000", "a > 1.5 AND (b = 'x' OR ts IS NULL)", "a IN (1, 2, 3)",
    "a NOT IN ('x', 'y')", "a BETWEEN 1 AND 3", "NOT (a <> 2)", "-5 < a", "a = NULL",
    "d >= DATE '2020-01-02'", "ts < TIMESTAMP '2020-01-02 03:04:05'", "a = b", "1 = 1",
])
def test_the_usual_filters_take_the_plain_path(text: str) -> None:
    assert_same_as_sqlglot(Query(filter=text))


def test_a_query_without_filter_needs_no_parse() -> None:
    query = Query(columns=("a", "b"))
    plain = analyze_plain_filter(query)
    assert plain is not None
    assert plain == analyze_filter(query)


@pytest.mark.parametrize("text", [
    "s.b.c = 1",  # a path
    "s3object.a = 1",  # a qualified name
    "a < TO_TIMESTAMP('2020-01-01T')",  # S3 Select's functions are translated
    "lower(b) = 'x'",  # any call
    "b LIKE 'x%'",
    "CAST(a AS INT) = 1",
    "a + 1 > 2",  # arithmetic
    "a IN (1, NULL)",  # a null in a list
    "a IN (1.5, 2)",  # a decimal list
    "flag",  # a bare column
    "NOT flag",
    "a IS NOT DISTINCT FROM b",
    "a = 1 AND",  # polars cannot parse it
    "a IN (SELECT 1)",
    "read_csv('/etc/passwd') IS NOT NULL",
])
def test_anything_else_is_left_to_sqlglot(text: str) -> None:
    assert analyze_plain_filter(Query(filter=text)) is None


@pytest.mark.parametrize(("text", "error"), [
    ("a = 1 AND", FilterSyntaxError),
    ("read_csv('/etc/passwd') IS NOT NULL", QueryError),
    ("a IN (SELECT 1)", QueryError),
])
def test_what_sqlglot_refuses_is_still_refused(text: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        analyze(Query(filter=text))


def test_sql_is_never_the_plain_path() -> None:
    assert analyze_plain_filter(Query(sql="SELECT a FROM s3object WHERE a > 1")) is None


def test_a_plain_read_never_imports_sqlglot_or_the_iceberg_modules() -> None:
    """The cold start of a projection and a filter: the handler's import, the analysis and
    a read and write of a local Parquet object, in a fresh interpreter. Neither sqlglot nor
    the Iceberg modules (fastavro, pyarrow.compute: some 0.1 CPU s and 10 MB) load."""
    script = """
import io, json, sys, tempfile, pathlib
import polars as pl
root = pathlib.Path(tempfile.mkdtemp())
(root / "bucket").mkdir()
pl.DataFrame({"a": list(range(100)), "b": ["x"] * 100}).write_parquet(root / "bucket" / "o.parquet",
                                                                     row_group_size=10)
import s3slice.handler
from s3slice import read
from s3slice.fetch.local import LocalFetcher
result = read({"source": "s3://bucket/o.parquet", "columns": ["b"], "filter": "a < 25"},
              fetcher=LocalFetcher(root))
print(json.dumps({"rows": result.frame.height, "groups": result.stats.row_groups_read,
                  "loaded": sorted(m for m in sys.modules
                                   if m.split(".")[0] in ("sqlglot", "fastavro")
                                   or m.startswith("s3slice.iceberg"))}))
"""
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                         text=True, env={"PYTHONPATH": str(FUNCTIONS), "PATH": "/usr/bin:/bin"})
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found == {"rows": 25, "groups": 3, "loaded": []}


@pytest.mark.parametrize(("text", "value", "sql"), [
    ("d = 1234567890123.4567", decimal.Decimal("1234567890123.4567"), "1234567890123.4567"),
    # polars reads an integer past Int64 as a decimal of scale 0
    ("d = 18446744073709551615", decimal.Decimal(18446744073709551615), "18446744073709551615"),
    ("d = 1e3", 1000.0, "1.00000000000000000e+03"),
    ("d = DATE '2024-01-02'", dt.date(2024, 1, 2), "DATE '2024-01-02'"),
    ("d = 'it''s'", "it's", "'it''s'"),
])
def test_a_plain_constant_is_exact_and_read_back_by_polars(text: str, value: object,
                                                           sql: str) -> None:
    """A decimal constant stays a decimal (it was a float: 1234567890123.4567 became
    …4568), and the text the statistics are judged with parses back to the same constant."""
    found = analyze_plain_filter(Query(filter=text))
    assert found is not None and isinstance(found.predicate, P.Cmp)
    assert found.predicate.value == value and type(found.predicate.value) is type(value)
    assert found.predicate.sql == sql
