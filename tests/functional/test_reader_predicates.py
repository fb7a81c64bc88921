"""Whatever filter a read is given, its answer is the filter applied to the decoded rows.

polars' Parquet reader skips row groups by their statistics with any filter its scan is
handed, and bounds arithmetic on a column by the statistics' arithmetic, which wraps at
the type's edges: ``c0 - 2 < 3571596662`` on a ``uint32`` column of ``[0, 5, 10]`` skips
the group whose ``5`` and ``10`` the filter keeps. The service hands a scanning reader
only comparisons of bare columns with constants (:mod:`s3slice.query.pruning.scan_safe`) and
runs the rest on the decoded frame; its own pruning judges nothing else either.

Oracle: polars SQL over the whole file read into memory (``pl.read_parquet``), the
dialect the service runs. Files: several row groups with statistics, every integer width
signed and unsigned, floats (NaN, infinities, -0.0), dates and timestamps, values at the
types' edges and nulls; filters: ``+ - *``, negation, division, modulo, casts, functions
and column-with-column arithmetic near the edges, alone and under AND, OR, NOT, IN,
BETWEEN; read by every strategy, as a filter and as SQL, and once through
``lambda_handler`` on the local S3 server, where polars' own S3 reader is handed the read.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3slice import FOOTER_CACHE, Engine, FooterCache, LocalFetcher, S3SliceError, Settings
from s3slice.core.model import parse_request
from s3slice.entry import dispatch as _entry
from s3slice.query.analyzer import analyze
from s3slice.query.pruning import predicate as P
from s3slice.query.pruning.scan_safe import exact, scan_where
from tests.support import S3Env, invoke, read_request

INTEGERS = {f"{u}int{b}": (b, u == "u") for b in (8, 16, 32, 64) for u in ("", "u")}
#: Ways of reading: the decoders' choice (auto), ranged fetches of the groups the plan
#: keeps, a whole-object image, and streamed batches.
CONFIGS: list[dict[str, Any]] = [
    {}, {"strategy": "ranges", "small_object_size": 0}, {"strategy": "whole"},
    {"strategy": "batches", "small_object_size": 0},
]
OPS = ("<", "<=", ">", ">=", "=", "<>")


def _range(kind: str) -> tuple[int, int]:
    bits, unsigned = INTEGERS[kind]
    return (0, (1 << bits) - 1) if unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


def _values(kind: str) -> list[Any]:
    """Values of ``kind`` at and near its edges, and small ones."""
    if kind in INTEGERS:
        lo, hi = _range(kind)
        return sorted({v for v in (lo, lo + 1, lo + 2, 0, 1, 2, 5, 10, hi - 2, hi - 1, hi)
                       if lo <= v <= hi})
    if kind in ("float32", "float64"):
        top = 3.4e38 if kind == "float32" else 1.7976931348623157e308
        return [-top, -1.5, -0.0, 0.0, 1.5, 2.0, 16777217.0, top, float("inf"),
                float("-inf"), float("nan")]
    if kind == "date32":
        return [dt.date(1, 1, 1), dt.date(1969, 12, 31), dt.date(1970, 1, 1),
                dt.date(2020, 2, 29), dt.date(9999, 12, 31)]
    return [dt.datetime(1, 1, 1), dt.datetime(1970, 1, 1), dt.datetime(2020, 1, 1, 0, 0, 1),
            dt.datetime(9999, 12, 31, 23, 59, 59)]


KINDS = [*INTEGERS, "float32", "float64", "date32", "timestamp"]


def _type(kind: str) -> pa.DataType:
    return pa.timestamp("us") if kind == "timestamp" else getattr(pa, kind)()


def _constants(kind: str) -> list[str]:
    """Constants near the edges of ``kind`` and of the results of arithmetic on it."""
    if kind in INTEGERS:
        lo, hi = _range(kind)
        edges = {lo, hi, lo - 1, hi + 1, lo + 2, hi - 2, 0, 1, -1, 5, 3571596662,
                 (1 << 31) - 1, 1 << 31, (1 << 32) - 1, 1 << 32, (1 << 63) - 1, -(1 << 63)}
        return [str(v) for v in sorted(edges)] + ["1.5", "-2.5", "1e20"]
    if kind.startswith("float"):
        return ["0", "1.5", "-1.5", "3e38", "1e308", "-1e308", "2147483647", "1e400"]
    if kind == "date32":
        return ["'2020-02-29'", "DATE '1970-01-01'", "'0001-01-01'", "'9999-12-31'", "0",
                "18321", "2020"]
    return ["'2020-01-01'", "TIMESTAMP '1970-01-01 00:00:00'", "0", "2020",
            "'9999-12-31 23:59:59'"]


def _expressions(kind: str) -> list[str]:
    """Expressions of the column ``c`` (and ``k``, an int8 column): arithmetic at every
    shape, casts, functions, and mixed types."""
    if kind in INTEGERS:
        return ["c", "c - 2", "c + 2", "2 - c", "c * 3", "c * 2", "-c", "c / 2", "c % 7",
                "c + 128", "c - 4294967296", "c * 65536", "c + c", "c * c", "c + k",
                "c - k", "k - c", "c * k", "CAST(c AS SMALLINT)", "CAST(c AS INT)",
                "CAST(c AS BIGINT)", "CAST(c AS DOUBLE)", "ABS(c)", "c + 1.5", "c - 2.5e0"]
    if kind.startswith("float"):
        return ["c", "c + 1e308", "c * 2", "-c", "c / 0", "c - c", "ABS(c)",
                "CAST(c AS INT)", "c * 1e308", "FLOOR(c)", "c + k", "c + 1"]
    if kind == "date32":
        return ["c", "c + INTERVAL '1 day'", "c - INTERVAL '1000 years'",
                "EXTRACT(YEAR FROM c)", "CAST(c AS TIMESTAMP)"]
    return ["c", "c + INTERVAL '1 day'", "CAST(c AS DATE)", "EXTRACT(YEAR FROM c)",
            "c - INTERVAL '3000 years'"]


@st.composite
def filter_st(draw: st.DrawFn, kind: str) -> str:
    """A filter on an expression of ``c`` near the edges, alone or combined."""
    constants = _constants(kind)

    def compare() -> str:
        expr = draw(st.sampled_from(_expressions(kind)))
        return f"{expr} {draw(st.sampled_from(OPS))} {draw(st.sampled_from(constants))}"
    shape = draw(st.sampled_from(["one", "and", "or", "not", "in", "between", "null"]))
    first = compare()
    if shape in ("and", "or"):
        return f"{first} {shape.upper()} {compare()}"
    if shape == "not":
        return f"NOT ({first})"
    expr = draw(st.sampled_from(_expressions(kind)))
    if shape == "in":
        items = draw(st.lists(st.sampled_from(constants), min_size=1, max_size=3))
        return f"{expr} IN ({', '.join(items)})"
    if shape == "between":
        low, high = draw(st.sampled_from(constants)), draw(st.sampled_from(constants))
        return f"{expr} BETWEEN {low} AND {high} AND {first}"
    if shape == "null":
        return f"{expr} IS NULL OR {first}"
    return first


def written(kind: str, values: list[Any], group_rows: int) -> bytes:
    """A Parquet file of ``values`` (column ``c``, sorted so that the row groups'
    statistics differ) and a small int8 column ``k``, with statistics."""
    k = [None if i % 5 == 4 else (i * 37) % 256 - 128 for i in range(len(values))]
    table = pa.table({"c": pa.array(values, _type(kind)), "k": pa.array(k, pa.int8())})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=group_rows, write_statistics=True)
    return buf.getvalue()


def oracle(raw: bytes, where: str) -> pl.DataFrame | None:
    """polars SQL over the decoded file in memory; None where polars refuses the filter."""
    frame = pl.read_parquet(raw)
    try:
        return pl.SQLContext(frames={"t": frame}).execute(
            f"SELECT * FROM t WHERE {where}", eager=True)
    except pl.exceptions.PolarsError:
        return None


def served(raw: bytes, where: str, config: dict[str, Any], *, sql: bool
           ) -> pl.DataFrame | S3SliceError:
    with tempfile.TemporaryDirectory() as root:
        (Path(root) / "b").mkdir()
        (Path(root) / "b" / "t.parquet").write_bytes(raw)
        engine = Engine(Settings(memory_mb=1024, memory_budget_mb=1, footer_size=256,
                                 **config),
                        fetcher=LocalFetcher(root), footer_cache=FooterCache(0))
        request: dict[str, Any] = (
            {"source": "s3://b/t.parquet",
             "sql": f"SELECT * FROM s3object WHERE {where}"} if sql
            else {"source": "s3://b/t.parquet", "filter": where})
        try:
            return read_request(engine, request).frame
        except S3SliceError as e:
            return e


def check(raw: bytes, where: str, config: dict[str, Any], *, sql: bool = False) -> None:
    want = oracle(raw, where)
    got = served(raw, where, config, sql=sql)
    if want is None:
        assert isinstance(got, S3SliceError), (where, config, got)
        return
    assert isinstance(got, pl.DataFrame), (where, config, got)
    assert got.sort(got.columns, nulls_last=True).equals(
        want.sort(want.columns, nulls_last=True)), (where, config, got, want)


def _edges(kind: str, rows: int = 24) -> list[Any]:
    values = _values(kind)
    out = [values[i % len(values)] for i in range(rows - 2)] + [None, None]
    return sorted(out, key=lambda v: (v is None, v != v, 0 if v is None or v != v else v))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.get("strategy", "auto"))
@pytest.mark.parametrize("where", [
    "c0 - 2 < 3571596662", "c0 - 2 < 3571596662 AND c0 >= 0", "NOT (c0 - 2 >= 3571596662)",
    "c0 - 2 < 3571596662 OR c0 > 100", "c0 > 1 AND c0 - 2 < 3571596662",
])
def test_the_issue_example(config: dict[str, Any], where: str) -> None:
    """``c0 - 2 < 3571596662`` on a uint32 column of [0, 5, 10] is [5, 10], as in memory."""
    buf = io.BytesIO()
    pq.write_table(pa.table({"c0": pa.array([0, 5, 10], pa.uint32())}), buf)
    raw = buf.getvalue()
    got = served(raw, where, config, sql=False)
    assert isinstance(got, pl.DataFrame), got
    assert sorted(got["c0"].to_list()) == [5, 10], (where, config)
    check(raw, where, config, sql=True)


@pytest.mark.parametrize("kind", list(INTEGERS))
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.get("strategy", "auto"))
def test_arithmetic_at_every_integer_width_equals_memory(kind: str,
                                                         config: dict[str, Any]) -> None:
    """Every ``+ - *`` and negation whose result wraps at the edges of every width."""
    raw = written(kind, _edges(kind), 3)
    lo, hi = _range(kind)
    for where in [f"c - 2 < {hi}", f"c - 2 = {hi - 1}", f"c + 2 > {lo}", f"c + 2 < {lo + 3}",
                  f"-c > {lo}", f"-c = {lo}", "2 - c > 0", f"c * 3 < {lo + 3}",
                  f"c * 2 > {hi - 3}", "c - 2 < 3571596662"]:
        check(raw, where, config)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from([*INTEGERS, *KINDS]), data=st.data(),
       group_rows=st.sampled_from([2, 3, 5]),
       config=st.sampled_from(CONFIGS), sql=st.booleans())
def test_random_filters_near_the_edges_equal_memory(
        kind: str, data: st.DataObject, group_rows: int, config: dict[str, Any],
        sql: bool) -> None:
    # Both edges of the type are always there (where arithmetic wraps), with more values.
    values = [*_values(kind), *data.draw(st.lists(st.sampled_from([*_values(kind), None]),
                                                  max_size=12), label="values")]
    values.sort(key=lambda v: (v is None, v != v, 0 if v is None or v != v else v))
    where = data.draw(filter_st(kind), label="where")
    check(written(kind, values, group_rows), where, config, sql=sql)


# What a scanning reader is handed.

def _analysis_of(where: str) -> Any:
    return analyze(parse_request({"source": "s3://b/t.parquet", "filter": where}).query)


@pytest.mark.parametrize("where", [
    "col_1 <= 1000", "col_1 > 999000 OR col_2 < 10", "region = 'north' AND col_4 BETWEEN 1 "
    "AND 5", "col_1 IN (1, 2, 3)", "a IS NULL OR NOT (b <> 2.5)",
])
def test_comparisons_of_bare_columns_go_to_the_scan_whole(where: str) -> None:
    """The plain read's fast path: the filter goes into polars' scan as it is."""
    analysis = _analysis_of(where)
    assert scan_where(analysis.predicate, analysis.where) == (analysis.where, True)


@pytest.mark.parametrize(("where", "pushed"), [
    ("c0 - 2 < 3571596662", None),
    ("-c0 > 5", None),
    ("CAST(c0 AS INT) < 5", None),
    ("ABS(c0) < 5 OR c1 = 1", None),
    ("c0 - 2 < 3571596662 AND c1 >= 7", '("c1" >= 7)'),
    ("c1 IN (1, 2) AND c0 * 2 = 4 AND c2 IS NULL", '("c1" IN (1, 2)) AND ("c2" IS NULL)'),
])
def test_arithmetic_never_reaches_a_scan_nor_the_pruning(where: str,
                                                         pushed: str | None) -> None:
    """Anything on a column but a bare comparison stays out of the scan's filter and out
    of the service's own pruning predicate: the decoded frame is filtered by all of it."""
    analysis = _analysis_of(where)
    assert scan_where(analysis.predicate, analysis.where) == (pushed, False)
    assert "c0" not in P.columns_of(analysis.predicate)
    assert not exact(analysis.predicate)


# Through lambda_handler: polars' own S3 reader is handed the read.

DATA, RESULTS = "predicate-data", "predicate-results"


@pytest.fixture
def lake(s3: S3Env, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Env]:
    for bucket in (DATA, RESULTS):
        s3.empty_bucket(bucket)
    monkeypatch.setenv("S3SLICE_SMALL_OBJECT_SIZE", "0")
    monkeypatch.setenv("S3SLICE_FOOTER_SIZE", "16384")
    _entry.reset()
    FOOTER_CACHE.clear()
    yield s3
    _entry.reset()
    FOOTER_CACHE.clear()


@pytest.mark.integration
@pytest.mark.parametrize("where", [
    "c0 - 2 < 3571596662", "c0 - 2 < 3571596662 AND c1 >= 0", "-c1 > -2147483648",
    "c1 + 2 < -2147483640 OR c0 * 3 < 10",
])
def test_polars_s3_reader_is_handed_only_what_it_judges(lake: S3Env, where: str) -> None:
    rows = 4_000
    c0 = [0, 5, 10] * (rows // 3) + [10] * (rows % 3)
    # every row group holds both edges of c1: its statistics prune none of them
    c1 = [-(1 << 31) + (i % 4) if i % 2 else (1 << 31) - 1 - (i % 4) for i in range(rows)]
    buf = io.BytesIO()
    pq.write_table(pa.table({"c0": pa.array(sorted(c0), pa.uint32()),
                             "c1": pa.array(c1, pa.int32())}), buf, row_group_size=1_000)
    raw = buf.getvalue()
    lake.client.put_object(Bucket=DATA, Key="t.parquet", Body=raw)
    response = invoke({"source": f"s3://{DATA}/t.parquet", "filter": where,
                       "output": f"s3://{RESULTS}/out/"})
    assert response["status"] == "ok", response
    assert response["stats"]["strategy_inputs"].get("transport") == "polars", response["stats"]
    frames = [pl.read_parquet(lake.get(o["uri"])) for o in response["outputs"]]
    got = pl.concat(frames) if frames else pl.DataFrame()
    want = oracle(raw, where)
    assert want is not None and want.height > 0
    assert got.sort(got.columns).equals(want.sort(want.columns)), where


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.get("strategy", "auto"))
@pytest.mark.parametrize("where", [
    "c IN (1234567890123.4567, 1.5e0)", "c IN (1.5e0, 1234567890123.4567)",
    "c IN (1234567890123.4567, 1.5)", "c NOT IN (1234567890123.4567, 1.5e0)",
])
def test_an_in_list_mixing_a_float_prunes_nothing_it_cannot_judge(
        config: dict[str, Any], where: str) -> None:
    """polars compares a column with an IN list's common type (a float, when one value is
    one): the service's own pruning must not judge each value as itself."""
    buf = io.BytesIO()
    pq.write_table(pa.table({"c": pa.array([decimal.Decimal("1234567890123.4568")],
                                           pa.decimal128(18, 4))}), buf, row_group_size=1)
    check(buf.getvalue(), where, config)
    check(buf.getvalue(), where, config, sql=True)
