"""Pruning never loses a row: property tests against polars as the oracle."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import math
import re
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3slice import Query, QueryError
from s3slice.parquet.footer import parse_footer
from s3slice.parquet.plan import prune, stats_types
from s3slice.query.analyzer import analyze
from s3slice.query.pruning import predicate as P
from s3slice.query.pruning.bounds import compare_all, is_constant

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


# ------------------------------------------------- typed columns, constants of other types

D = decimal.Decimal
NY = "America/New_York"
_BIG = [0, 1, -1, 5, 127, -128, 255, 2**31 - 1, 2**53, 2**53 + 1, 2**63 - 1, -2**63, 2**64 - 1]
_FLOATS = [0.0, -0.0, 1.5, 5.0, 0.1, 2.0**53, 2.0**53 + 2, 1e300, math.inf, -math.inf, math.nan]
_TIMES = [dt.datetime(2024, 1, 1, h) for h in (0, 9, 10, 15)] + [dt.datetime(2024, 1, 2),
                                                                dt.datetime(1970, 1, 1)]
_INTS = {pa.int8(): (-2**7, 2**7), pa.int16(): (-2**15, 2**15), pa.int32(): (-2**31, 2**31),
         pa.int64(): (-2**63, 2**63), pa.uint8(): (0, 2**8), pa.uint16(): (0, 2**16),
         pa.uint32(): (0, 2**32), pa.uint64(): (0, 2**64)}
#: Each column type with the values its rows take (None is null).
TYPED: dict[str, tuple[pa.DataType, list[Any]]] = {
    **{f"i_{t}": (t, [v for v in _BIG if lo <= v < hi]) for t, (lo, hi) in _INTS.items()},
    "f64": (pa.float64(), _FLOATS),
    "f32": (pa.float32(), [0.0, -0.0, 1.5, 0.1, 2.0**24, 2.0**24 + 2, math.inf, -math.inf,
                           math.nan]),
    "dec": (pa.decimal128(18, 4), [D("1234567890123.4567"), D("1234567890123.4568"),
                                   D("1.5"), D(0), D("-1.5"), D(5)]),
    "str": (pa.string(), ["a", "b", "5", "10", "2024-01-01", "", "é"]),
    "date": (pa.date32(), [dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(1970, 1, 1),
                           dt.date(2023, 12, 31)]),
    "ts": (pa.timestamp("us"), _TIMES),
    "ts_ns": (pa.timestamp("ns"), _TIMES),
    "ts_ny": (pa.timestamp("us", tz=NY), [t.replace(tzinfo=dt.UTC) for t in _TIMES]),
    "ts_utc": (pa.timestamp("ms", tz="UTC"), [t.replace(tzinfo=dt.UTC) for t in _TIMES]),
    "bool": (pa.bool_(), [True, False]),
}
#: Constants of every kind, whatever the column's type.
CONSTANTS = [
    "0", "1", "-1", "5", "127", "255", "9007199254740992", "9007199254740993",
    "9223372036854775807", "18446744073709551615", "16777217", "1.5", "-1.5", "5.0",
    "1234567890123.4567", "1234567890123.45675", "1.5e0", "9.007199254740993e15", "1e300",
    "0.1", "'a'", "'5'", "'10'", "'2024-01-01'", "'2024-01-01 10:00:00'",
    "'2024-01-01 10:00:00+01:00'", "'2024-01-01 15:00:00Z'", "DATE '2024-01-01'",
    "TIMESTAMP '2024-01-01 10:00:00'", "TRUE",
]


def typed_table_st(kind: str) -> st.SearchStrategy[pa.Table]:
    typ, pool = TYPED[kind]
    cells = st.lists(st.none() | st.sampled_from(pool), min_size=1, max_size=24)
    return cells.map(lambda values: pa.table({
        "id": pa.array(range(len(values)), pa.int64()), "c": pa.array(values, typ)}))


def typed_where_st() -> st.SearchStrategy[str]:
    constant = st.sampled_from(CONSTANTS)
    op = st.sampled_from(["=", "!=", "<", "<=", ">", ">="])
    atom = st.one_of(
        st.tuples(op, constant).map(lambda t: f"c {t[0]} {t[1]}"),
        st.tuples(op, constant).map(lambda t: f"{t[1]} {t[0]} c"),
        st.tuples(constant, constant).map(lambda t: f"c BETWEEN {t[0]} AND {t[1]}"),
        st.lists(constant, min_size=1, max_size=3).map(lambda v: f"c IN ({', '.join(v)})"),
        st.just("c IS NULL"),
    )
    return conditions(atom, max_leaves=3)


def polars_answer(data: bytes, where: str) -> pl.DataFrame | None:
    """polars reading every row, then the same SQL, its constants first written as
    docs/sql.md reads them against ``c`` (:func:`documented`); None when polars refuses
    it."""
    frame = pl.read_parquet(data)
    where = documented(where, frame.schema["c"])
    try:
        return pl.SQLContext(frames={"s3object": frame}).execute(
            f"SELECT * FROM s3object WHERE {where}", eager=True)
    except Exception:  # noqa: BLE001 - whatever polars refuses, the service must refuse
        return None


_NUM = r"-?\d+(?:\.\d+)?(?:e-?\d+)?"
_NUM_G = f"({_NUM})"
_OP = r"(?:=|!=|<>|<=|>=|<|>)"
_STAMP = re.compile(r"(?:TIMESTAMP |DATE )?'(\d{4}-\d\d-\d\d[^']*)'")


def _kind(*numbers: str) -> str:
    return "BIGINT" if all("." not in n and "e" not in n for n in numbers) else "DOUBLE"


def documented(where: str, dtype: pl.DataType) -> str:
    """``where`` as docs/sql.md reads it against the column ``c``, in text polars alone
    reads so: against a timestamp column, timestamp text, ``TIMESTAMP '…'`` and ``DATE '…'`` are UTC
    when they have no offset (polars: the column's zone; an offset dropped against a naive
    column), written as UTC text; against a text column, a number compares numbers
    (polars: ``=`` and ``IN`` as text), written ``CAST(c AS BIGINT|DOUBLE)``."""
    if isinstance(dtype, pl.Datetime):
        def stamp(m: re.Match[str]) -> str:
            value = dt.datetime.fromisoformat(m.group(1))
            if value.tzinfo is not None:
                value = value.astimezone(dt.UTC).replace(tzinfo=None)
            return f"'{value.isoformat(' ')}{'+00:00' if dtype.time_zone else ''}'"
        return _STAMP.sub(stamp, where)
    if dtype != pl.String:
        return where
    where = re.sub(rf"\bc ({_OP}) ({_NUM})(?![\w.'])",
                   lambda m: f"CAST(c AS {_kind(m.group(2))}) {m.group(1)} {m.group(2)}", where)
    where = re.sub(rf"(?<![\w.']){_NUM_G} ({_OP}) c\b",
                   lambda m: f"{m.group(1)} {m.group(2)} CAST(c AS {_kind(m.group(1))})",
                   where)
    where = re.sub(rf"\bc BETWEEN ({_NUM}) AND ({_NUM})(?![\w.'])",
                   lambda m: f"CAST(c AS {_kind(m.group(1), m.group(2))}) BETWEEN "
                   f"{m.group(1)} AND {m.group(2)}", where)

    def among(m: re.Match[str]) -> str:
        items = [i.strip() for i in m.group(1).split(",")]
        numbers = [i for i in items if re.fullmatch(_NUM, i)]
        if not numbers:
            return m.group(0)
        return f"CAST(c AS {_kind(*numbers)}) IN ({m.group(1)})"
    return re.sub(r"\bc IN \(([^)]*)\)", among, where)


def written(table: pa.Table, group_rows: int) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=group_rows, write_page_index=True,
                   data_page_size=32, write_batch_size=2)
    return buf.getvalue()


@settings(max_examples=250, deadline=None)
@given(kind=st.sampled_from(sorted(TYPED)), data=st.data(), where=typed_where_st(),
       group_rows=st.sampled_from([1, 3, 8]), sql=st.booleans())
def test_a_group_holding_a_match_is_never_pruned_whatever_the_types(
        kind: str, data: st.DataObject, where: str, group_rows: int, sql: bool) -> None:
    """Every column type against constants of every kind, by both analyses (polars' plain
    filter and sqlglot's WHERE): a row group holding a row polars' own filter keeps is kept."""
    table = data.draw(typed_table_st(kind))
    raw = written(table, group_rows)
    want = polars_answer(raw, where)
    query = Query(sql=f"SELECT * FROM s3object WHERE {where}") if sql else Query(filter=where)
    try:
        analysis = analyze(query)
    except QueryError:
        assert want is None or not sql, where  # refused before any byte, as polars would
        return
    footer = parse_footer(raw, size=len(raw), uri="u")
    kept = set(prune(footer.metadata, analysis.predicate, stats_types(footer)))
    if want is None:
        return  # polars refuses: the filter raises on whatever is read (engine property)
    offset, matching = 0, set(want["id"].to_list())
    for g in range(footer.metadata.num_row_groups):
        n = footer.metadata.row_group(g).num_rows
        if matching & set(range(offset, offset + n)):
            assert g in kept, f"row group {g} of {kind} holds a match for {where!r}"
        offset += n


@pytest.mark.parametrize(("text", "constant"), [
    ("5", True), ("-1.5", True), ("'it''s'", True), ("CAST('2024-01-01' AS DATE)", True),
    ("TIMESTAMP '2024-01-01 10:00:00'", True), ("(SELECT 1)", False), ("x", False),
    ("read_parquet('s3://b/private.parquet')", False), ("1 + 1", False),
])
def test_only_a_constant_reaches_the_statistics_sql(text: str, constant: bool) -> None:
    """The statistics are compared by running ``v op text``: a text that is anything but a
    constant is never run, and judges nothing."""
    assert is_constant(text) is constant
    stats = {"x": P.ColumnStats(num_rows=3, min=10, max=30, null_count=0)}
    if not constant:  # judged as "5" would be, it would prune
        assert P.may_match(P.Cmp("x", "=", 5, text), stats)
        assert not P.may_match(P.Cmp("x", "=", 5, "5"), stats)


def test_a_dictionary_of_strings_prunes_as_strings() -> None:
    """A dictionary of strings is read as strings (never a categorical, whose order is not
    the strings'), so its statistics judge a string constant as a string column's do."""
    table = pa.table({"i": pa.array(range(20), pa.int64()),
                      "c": pa.array([str(i // 5) for i in range(20)]).dictionary_encode()})
    raw = written(table, 5)
    footer = parse_footer(raw, size=len(raw), uri="u")
    assert stats_types(footer)["c"] == pl.String
    assert prune(footer.metadata, analyze(Query(filter="i >= 15")).predicate,
                 stats_types(footer)) == [3]
    assert prune(footer.metadata, analyze(Query(filter="c = 'zz'")).predicate,
                 stats_types(footer)) == []
    assert prune(footer.metadata, analyze(Query(filter="c >= '2'")).predicate,
                 stats_types(footer)) == [2, 3]


@pytest.mark.parametrize("values", [[19737, 19738], [dt.date(2024, 1, 15), dt.date(2024, 1, 16)]],
                         ids=["day counts", "dates"])
@pytest.mark.parametrize("text", ["DATE '2024-01-15'", "'2024-01-15'"])
def test_date_statistics_judge_a_date_whether_held_as_dates_or_day_counts(
        values: list[Any], text: str) -> None:
    """A Date column's statistics may come as day counts (Iceberg's bounds) or as dates
    (pyarrow's): both give polars' answers, never a comparison of an int with a date."""
    answers = compare_all(values, pl.Date(), [(text, dt.date(2024, 1, 15))])
    assert answers is not None
    lt, le, eq, ge, gt, ne = zip(*answers[0][text], strict=True)
    assert eq == (True, False) and gt == (False, True) and lt == (False, False)
    assert le == (True, False) and ge == (True, True) and ne == (False, True)


def test_statistics_python_cannot_hold_in_the_column_zone_judge_nothing() -> None:
    """A zoned timestamp at 9999-12-31 23:59:59 UTC is in year 10000 in Asia/Tokyo, which
    Python's datetime cannot hold: the statistics then judge nothing (no OverflowError
    escapes the planner; the differential fuzzer found it)."""
    from s3slice.query.pruning.bounds import compare_all

    last = int(dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.UTC).timestamp()) * 10**6
    got = compare_all([0, last], pl.Datetime("us", "Asia/Tokyo"),
                      [("'2024-01-10 00:00:00+00:00'", None)])
    assert got is None
