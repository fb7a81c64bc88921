"""Split aggregates are exact for any batching and any values the types allow.

Random frames (every integer width and sign over its whole range, Float32/Float64 with
NaN and infinities, decimals, booleans, nulls, a group key), cut into random batches
(empty ones included), and random aggregate queries from the supported set, with and
without GROUP BY. Each batch's partial is written to Parquet and read back, as the
Distributed Map's batches and reduce do, and the final plan runs over them without the
source schema (as the engine and the reduce run it). The answer must be the oracle's:
polars SQL over the concatenated frame, except where polars itself is wrong, where the
oracle is the exact value (see :mod:`s3slice.query.split.types`):

- an integer SUM is the exact sum (polars wraps an Int32, UInt32, Int64 or UInt64 sum in
  the column's type); its type is polars' but Int64 for Int32/UInt32 (the widening), and a
  sum some group of which is outside its answer type (Int64/UInt64 beyond 64 bits) is
  answered exactly as Decimal(38, 0), as DuckDB answers HUGEINT (never wrapped);
- an integer, boolean or decimal AVG is the exact mean, rounded to Float64 (polars'
  own mean accumulates in floating point).

Floating-point SUM, AVG, STDDEV and VAR are regrouped batch by batch, so they equal
polars' within rounding: the bound scales with the data (the sum of the magnitudes for a
sum, their largest square for a variance), since polars' own one-pass result carries an
error of that size too. Values are drawn so that no float sum overflows in one order and
not in another (|x| <= 1e300, Float32 |x| <= 2**100); NaN and infinities are drawn as such.
"""

from __future__ import annotations

import io
import itertools
import math
import os
import random
from decimal import Decimal
from fractions import Fraction
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from s3slice.query.analysis import collect
from s3slice.query.split import split_query

INTEGERS: dict[str, pl.DataType] = {
    "i8": pl.Int8(), "i16": pl.Int16(), "i32": pl.Int32(), "i64": pl.Int64(),
    "u8": pl.UInt8(), "u16": pl.UInt16(), "u32": pl.UInt32(), "u64": pl.UInt64(),
}
FLOATS: dict[str, pl.DataType] = {"f32": pl.Float32(), "f64": pl.Float64()}
OTHERS: dict[str, pl.DataType] = {"d": pl.Decimal(18, 4), "b": pl.Boolean()}
TYPES = {**INTEGERS, **FLOATS, **OTHERS}
#: SUM's answer type where it is not polars' (the widening of split_types).
SUM_TYPE: dict[str, pl.DataType] = {"i32": pl.Int64(), "u32": pl.Int64()}
RANGE = {"i64": (-(2**63), 2**63 - 1), "u64": (0, 2**64 - 1)}
FUNCS = ["SUM", "AVG", "MIN", "MAX", "COUNT", "STDDEV", "VARIANCE", "SUM DISTINCT",
         "COUNT DISTINCT", "AVG DISTINCT"]


def bounds(name: str) -> tuple[int, int]:
    bits = int(name[1:])
    if name.startswith("u"):
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def values(name: str) -> st.SearchStrategy[Any]:
    if name in INTEGERS:
        lo, hi = bounds(name)
        # edges and huge values most of the time: the sums that wrap
        return st.one_of(st.sampled_from([lo, hi, hi - 1, lo + 1, 0]), st.integers(lo, hi),
                         st.integers(max(lo, -1000), min(hi, 1000)))
    if name == "f32":
        return st.one_of(st.floats(-2.0**100, 2.0**100, width=32),
                         st.sampled_from([math.nan, math.inf, -math.inf, -0.0]))
    if name == "f64":
        return st.one_of(st.floats(-1e300, 1e300), st.floats(-1e6, 1e6),
                         st.sampled_from([math.nan, math.inf, -math.inf, -0.0]))
    if name == "d":
        return st.decimals(min_value=Decimal("-99999999999999.9999"),
                           max_value=Decimal("99999999999999.9999"), places=4,
                           allow_nan=False, allow_infinity=False)
    return st.booleans()


@st.composite
def cases(draw: st.DrawFn) -> tuple[pl.DataFrame, list[pl.DataFrame], str,
                                    list[tuple[str, str]], bool]:
    columns = draw(st.lists(st.sampled_from(sorted(TYPES)), min_size=1, max_size=3,
                            unique=True))
    n = draw(st.integers(0, 30))
    data: dict[str, list[Any]] = {"g": draw(st.lists(st.sampled_from(["a", "b", None]),
                                                     min_size=n, max_size=n))}
    for c in columns:
        data[c] = draw(st.lists(st.one_of(st.none(), values(c)), min_size=n, max_size=n))
    df = pl.DataFrame(data, schema={"g": pl.String(), **{c: TYPES[c] for c in columns}})
    k = draw(st.integers(0, 5))  # one batch in about 1 case of 6
    cuts = sorted(draw(st.lists(st.integers(0, n), min_size=k, max_size=k)))
    batches = [df[a:b] for a, b in itertools.pairwise([0, *cuts, n])]
    aggs = draw(st.lists(st.tuples(st.sampled_from(FUNCS), st.sampled_from(columns)),
                         min_size=1, max_size=4, unique=True))
    grouped = draw(st.booleans())
    outputs = ", ".join(f"{f.split()[0]}({' '.join([*f.split()[1:], c])}) AS a{i}"
                        for i, (f, c) in enumerate(aggs))
    sql = (f"SELECT g, {outputs} FROM s3object GROUP BY g" if grouped
           else f"SELECT {outputs} FROM s3object")
    return df, batches, sql, aggs, grouped


def through_storage(frame: pl.DataFrame) -> pl.DataFrame:
    """A partial as the Distributed Map's batch writes it and the reduce reads it."""
    buf = io.BytesIO()
    pq.write_table(frame.to_arrow(), buf, compression="zstd")
    out = pl.read_parquet(buf.getvalue())
    assert out.schema == frame.schema
    return out


def split_answer(sql: str, batches: list[pl.DataFrame]) -> pl.DataFrame:
    s = split_query(sql)
    assert s is not None
    partials = [through_storage(collect(s.partial(b))) for b in batches]
    return collect(s.final(partials))


def exact_sums(df: pl.DataFrame, column: str, grouped: bool, *,
               distinct: bool = False) -> dict[Any, int | None]:
    groups: dict[Any, list[int]] = {}
    for key, v in zip(df["g"] if grouped else [None] * df.height, df[column], strict=True):
        groups.setdefault(key, [])
        if v is not None:
            groups[key].append(int(v))
    if not grouped:
        groups.setdefault(None, [])
    return {k: (sum(set(vs) if distinct else vs) if vs else None) for k, vs in groups.items()}


def exact_means(df: pl.DataFrame, column: str, grouped: bool) -> dict[Any, float | None]:
    groups: dict[Any, list[Fraction]] = {}
    for key, v in zip(df["g"] if grouped else [None] * df.height, df[column], strict=True):
        groups.setdefault(key, [])
        if v is not None:
            groups[key].append(Fraction(v))
    if not grouped:
        groups.setdefault(None, [])
    return {k: (float(sum(vs) / len(vs)) if vs else None) for k, vs in groups.items()}


def fits(value: int | None, dtype: pl.DataType) -> bool:
    if value is None:
        return True
    lo, hi = {pl.Int64: RANGE["i64"], pl.UInt64: RANGE["u64"],
              pl.UInt32: (0, 2**32 - 1)}[dtype.base_type()]  # type: ignore[index]
    return lo <= value <= hi


def float_close(got: float | None, want: float | None, scale: float, rel: float) -> bool:
    if got is None or want is None:
        return got is None and want is None
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got)
    if math.isinf(want) or math.isinf(got):
        return got == want
    return math.isclose(got, want, rel_tol=rel, abs_tol=scale)


def keyed(frame: pl.DataFrame, grouped: bool) -> dict[Any, dict[str, Any]]:
    rows = frame.to_dicts()
    return {(r["g"] if grouped else None): r for r in rows}


def magnitude(df: pl.DataFrame, column: str) -> tuple[float, float]:
    """(sum of |x|, max |x|) over the finite values of a column."""
    xs = [abs(float(v)) for v in df[column] if v is not None and math.isfinite(float(v))]
    return sum(xs), max(xs, default=0.0)


@settings(max_examples=int(os.environ.get("SPLIT_EXAMPLES", "300")), deadline=None,
          derandomize=True)
@given(case=cases())
def test_split_aggregates_equal_the_oracle_for_any_batching_and_values(
        case: tuple[pl.DataFrame, list[pl.DataFrame], str, list[tuple[str, str]], bool],
) -> None:
    df, batches, sql, aggs, grouped = case
    want = pl.SQLContext(frames={"s3object": df}).execute(sql, eager=True)
    sums = {i: exact_sums(df, c, grouped, distinct=f == "SUM DISTINCT")
            for i, (f, c) in enumerate(aggs)
            if f.startswith("SUM") and c in INTEGERS | {"b": 0}}
    wide = {i for i, by in sums.items()
            if not all(fits(v, SUM_TYPE.get(aggs[i][1], want.schema[f"a{i}"]))
                       for v in by.values())}
    event(f"batches: {min(len(batches), 4)}{'+' if len(batches) > 4 else ''}")
    event("a sum beyond its type, answered wide" if wide else "answered")
    event("grouped" if grouped else "whole")
    got = split_answer(sql, batches)
    assert got.columns == want.columns
    for i, (f, c) in enumerate(aggs):
        expected = SUM_TYPE.get(c, want.schema[f"a{i}"]) if f.startswith(
            "SUM") else want.schema[f"a{i}"]
        if i in wide:  # an exact sum beyond its answer type: Decimal(38, 0), not wrapped
            expected = pl.Decimal(38, 0)
        assert got.schema[f"a{i}"] == expected, (sql, got.schema, want.schema)
    if grouped:
        assert got.schema["g"] == want.schema["g"]
    g, w = keyed(got, grouped), keyed(want, grouped)
    assert g.keys() == w.keys()
    for i, (f, c) in enumerate(aggs):
        name = f"a{i}"
        total, top = magnitude(df, c)
        exact_mean = exact_means(df, c, grouped) if f == "AVG" and c not in FLOATS else None
        for key in w:
            mine, theirs = g[key][name], w[key][name]
            where = (sql, key, name, mine, theirs)
            if i in sums:
                assert mine == sums[i][key], where
            elif exact_mean is not None:
                assert float_close(mine, exact_mean[key], 0.0, 1e-12), (*where, exact_mean)
            elif (f.split()[0] in ("SUM", "AVG") and c in FLOATS) or f == "AVG DISTINCT":
                # polars' own float mean of the distinct values, in another order
                rel = 1e-5 if c == "f32" else 1e-9
                assert float_close(mine, theirs, rel * total, rel), where
            elif f in ("STDDEV", "VARIANCE"):
                rel = 1e-4 if c == "f32" else 1e-9
                scale = rel * (top if f == "STDDEV" else top * top)
                if f == "STDDEV":  # an error e in a variance is sqrt(e) in its root
                    scale = math.sqrt(rel) * top
                assert float_close(mine, theirs, scale, rel), where
            elif isinstance(theirs, float):  # MIN/MAX of floats: exact, NaN as NaN
                assert (math.isnan(mine) and math.isnan(theirs)) or mine == theirs, where
            else:
                assert mine == theirs, where


@pytest.mark.parametrize(("dtype", "value"), [(pl.Int32, 3_000_000),
                                              (pl.UInt32, 4_000_000_000),
                                              (pl.Int64, 1_700_000_000_000_000_000),
                                              (pl.UInt64, 2**64 - 1)])
def test_the_reported_wraps_are_exact_whatever_the_batching(dtype: pl.DataType,
                                                             value: int) -> None:
    """The issue's case: 2 x 1,000 rows of one large value; AVG is the value, SUM exact
    (beyond 64 bits, as Decimal(38, 0)), for one batch, two, and many."""
    df = pl.DataFrame({"g": [i % 2 for i in range(2000)],
                       "v": pl.Series([value] * 2000, dtype=dtype)})
    for batches in ([df], [df[:1000], df[1000:]], [df[i:i + 7] for i in range(0, 2000, 7)]):
        got = split_answer("SELECT AVG(v) AS m, COUNT(*) AS n FROM s3object", batches)
        assert got.rows() == [(float(value), 2000)]
        got = split_answer("SELECT g, AVG(v) AS m FROM s3object GROUP BY g ORDER BY g",
                           batches)
        assert got.rows() == [(0, float(value)), (1, float(value))]
        got = split_answer("SELECT SUM(v) AS s FROM s3object", batches)
        assert got.rows() == [(value * 2000,)]
        assert got.schema["s"] == (pl.Int64 if value * 2000 < 2**63 else pl.Decimal(38, 0))


@pytest.mark.parametrize("spread", [4_000, 10**6])
def test_variance_of_huge_integers_merges_without_error_of_its_own(spread: int) -> None:
    """Integers near 2**60 (epoch nanoseconds are near 2**60.6), each exactly a double
    (multiples of 256), sorted as objects partitioned by time are. Each batch's variance
    is polars' own over its rows (which loses digits to the rounding of its mean, as
    polars' one pass over all rows does); the merge must add no error of its own: the
    partial and pooled means come from the exact sums, relative to the group's least
    value. So the answer is Chan's merge of polars' batch variances done in rational
    arithmetic, to 1e-12, and one batch is polars' answer itself."""
    rng = random.Random(spread)
    xs = sorted(2**60 + 256 * rng.randrange(spread) for _ in range(3000))
    df = pl.DataFrame({"t": pl.Series(xs, dtype=pl.Int64)})
    sql = "SELECT VARIANCE(t) AS v, STDDEV(t) AS sd FROM s3object"
    want = pl.SQLContext(frames={"s3object": df}).execute(sql, eager=True)
    assert split_answer(sql, [df]).rows() == want.rows()
    total, n = Fraction(sum(xs)), len(xs)
    for batches in ([df[:1000], df[1000:2100], df[2100:]],
                    [df[i:i + 30] for i in range(0, 3000, 30)]):
        m2 = Fraction(0)
        for b in batches:
            v = pl.SQLContext(frames={"s3object": b}).execute(
                "SELECT VARIANCE(t) AS v FROM s3object", eager=True)["v"][0]
            mean = Fraction(sum(b["t"].to_list()), b.height)
            m2 += Fraction(v) * (b.height - 1) + b.height * (mean - total / n) ** 2
        merged = float(m2 / (n - 1))
        got = split_answer(sql, batches)
        assert got.schema == want.schema
        assert math.isclose(got["v"][0], merged, rel_tol=1e-12), (got, merged)
        assert math.isclose(got["sd"][0], math.sqrt(merged), rel_tol=1e-12)


@pytest.mark.parametrize("dtype", [pl.Int64, pl.UInt64])
def test_sums_beyond_64_bits_equal_duckdb_whatever_the_batching(dtype: pl.DataType) -> None:
    """F6: a group whose sum leaves Int64 (UInt64) is answered exactly, as DuckDB's HUGEINT
    (polars wraps): the whole column as Decimal(38, 0), the groups that fit included;
    without such a group the column keeps its type. AVG is exact too."""
    import duckdb

    top = 2**63 - 1 if dtype == pl.Int64 else 2**64 - 1
    low = -(2**63) if dtype == pl.Int64 else 0
    rng = random.Random(36)
    values = [rng.choice([top, low, top - 5, 1, 0, None]) for _ in range(300)]
    df = pl.DataFrame({"g": [rng.randrange(4) for _ in values], "v": pl.Series(values,
                                                                             dtype=dtype)})
    sql = ("SELECT g, SUM(v) AS s, AVG(v) AS m, COUNT(*) AS n FROM s3object "
           "GROUP BY g ORDER BY g")
    want = duckdb.sql(sql.replace("s3object", "df")).fetchall()
    assert any(s is not None and not low <= s <= top for _, s, _, _ in want)
    for batches in ([df], [df[:150], df[150:]], [df[i:i + 7] for i in range(0, 300, 7)]):
        got = split_answer(sql, batches)
        assert got.schema["s"] == pl.Decimal(38, 0)
        assert [(g, s, n) for g, s, _, n in got.rows()] == [(g, s, n) for g, s, _, n in want]
        for (_, _, m, _), (_, _, w, _) in zip(got.rows(), want, strict=True):
            assert m == pytest.approx(w, rel=1e-15)
    fits = df.filter(pl.col("v") == 1)
    got = split_answer(sql, [fits[:3], fits[3:]])
    assert got.schema["s"] == dtype
