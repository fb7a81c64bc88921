"""The query split against its oracle: the same SQL run by polars over all rows at once.

Random data is cut into batches (some empty, some holding a group alone, null group keys
throughout); each batch's partial plan runs on its own, the final plan over the partials,
and the answer must be the oracle's: same names, types (but an exact Int64 SUM of Int32
values, see :mod:`s3slice.query.split.types`; values beyond polars' own types are
``test_split_exact.py``'s) and rows. Rows of an unordered
answer are compared as multisets; floating-point values within ``REL`` relative (sums are
regrouped batch by batch, see :mod:`s3slice.query.split`). ``ORDER BY ... LIMIT k`` with ties
may keep other rows of equal keys than the oracle: those cases compare the order keys in
sequence and check each row against the unlimited answer.
"""

from __future__ import annotations

import functools
import io
import itertools
import math
import random
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3slice.core.model import Query
from s3slice.query.analyzer import analyze
from s3slice.query.paths import with_paths
from s3slice.query.split import split_query
from s3slice.query.split.plan import Split

REL = 1e-9
ABS = 1e-9


def frame(seed: int, n: int = 400, *, by_group: bool = False) -> pl.DataFrame:
    rng = random.Random(seed)
    groups = ["a", "b", "c", "d", "e", None]
    rows = {
        "id": list(range(n)),
        "g": [rng.choice(groups) for _ in range(n)],
        "h": [rng.choice([None, 1, 2, 3]) for _ in range(n)],
        "x": [rng.choice([None, *range(-5, 20)]) for _ in range(n)],
        "f": [None if rng.random() < 0.15 else rng.uniform(-50, 150) for _ in range(n)],
        "s": [rng.choice([None, "p", "q", "r", "t"]) for _ in range(n)],
    }
    df = pl.DataFrame(rows, schema={"id": pl.Int64, "g": pl.String, "h": pl.Int32,
                                    "x": pl.Int64, "f": pl.Float64, "s": pl.String})
    if by_group:  # each group in one or two batches only
        df = df.sort("g", nulls_last=True)
    return df


def cut(df: pl.DataFrame, seed: int, pieces: int = 6) -> list[pl.DataFrame]:
    """Contiguous batches at random cut points; repeated points make empty batches."""
    rng = random.Random(seed)
    points = sorted(rng.choice([0, df.height, *range(df.height)]) for _ in range(pieces - 1))
    bounds = [0, *points, df.height]
    return [df[a:b] for a, b in itertools.pairwise(bounds)]


def oracle(sql: str, df: pl.DataFrame) -> pl.DataFrame:
    return pl.SQLContext(frames={"s3object": df}).execute(sql, eager=True)


def through_split(sql: str, batches: Sequence[pl.DataFrame], *,
                  schema: pl.Schema | None = None) -> pl.DataFrame:
    s = split_query(sql)
    assert s is not None, sql
    return s.run(batches, schema=schema).collect()


def close(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=REL,
                                                                 abs_tol=ABS)
    return a == b


def sort_key(row: tuple[object, ...]) -> tuple[object, ...]:
    # Exact columns first, so that rows sort alike on both sides whatever a float's ulps.
    exact = tuple((v is None, v) for v in row if not isinstance(v, float))
    floats = tuple((v is None, round(v, 6) if isinstance(v, float) else 0) for v in row)
    return (*exact, *floats)


def same_type(got: pl.DataType, want: pl.DataType) -> bool:
    """polars' type, or the split's documented widening: an exact Int64 sum where polars
    sums Int32 or UInt32 values in their own type (see :mod:`s3slice.query.split.types`)."""
    return got == want or (got == pl.Int64 and want in (pl.Int32, pl.UInt32))


def assert_same(got: pl.DataFrame, want: pl.DataFrame, *, ordered: bool) -> None:
    assert got.columns == want.columns
    assert all(same_type(g, w) for g, w in zip(got.dtypes, want.dtypes, strict=True)), (
        got.schema, want.schema)
    assert got.height == want.height, (got, want)
    g, w = got.rows(), want.rows()
    if not ordered:
        g, w = sorted(g, key=sort_key), sorted(w, key=sort_key)
    for a, b in zip(g, w, strict=True):
        assert len(a) == len(b)
        assert all(close(x, y) for x, y in zip(a, b, strict=True)), (a, b)


# Each case: SQL, and whether its row order is fully determined by the query.
AGGREGATES = [
    ("SELECT COUNT(*) FROM s3object", True),
    ("SELECT COUNT(*), COUNT(x), COUNT(f), COUNT(s) FROM s3object", True),
    ("SELECT SUM(x), SUM(f), SUM(h) FROM s3object", True),
    ("SELECT MIN(x), MAX(x), MIN(f), MAX(f), MIN(s), MAX(s) FROM s3object", True),
    ("SELECT AVG(x), AVG(f), AVG(h) FROM s3object", True),
    ("SELECT COUNT(DISTINCT x), COUNT(DISTINCT s), COUNT(DISTINCT g) FROM s3object", True),
    ("SELECT STDDEV(f), STDDEV_SAMP(x), VARIANCE(f), VAR_SAMP(x), VAR(h) FROM s3object",
     True),
    ("SELECT SUM(DISTINCT x), AVG(DISTINCT x), MIN(DISTINCT x) FROM s3object", True),
    ("SELECT g, COUNT(*), SUM(x), MIN(f), MAX(s), AVG(f) FROM s3object GROUP BY g", False),
    ("SELECT g, h, COUNT(*) AS n, SUM(f) AS total FROM s3object GROUP BY g, h", False),
    ("SELECT g, COUNT(DISTINCT s) AS ds, SUM(x) AS sx, STDDEV(f) AS sd FROM s3object "
     "GROUP BY g", False),
    ("SELECT g, VARIANCE(x), STDDEV(x), COUNT(x) FROM s3object GROUP BY g", False),
    ("SELECT g, COUNT(*) AS n FROM s3object GROUP BY g HAVING COUNT(*) > 60", False),
    ("SELECT g, SUM(x) AS sx FROM s3object GROUP BY g HAVING AVG(f) > 45 AND sx > 0", False),
    ("SELECT g, SUM(x) / COUNT(*) AS ratio, MAX(f) - MIN(f) AS spread, COUNT(*) + 1 "
     "FROM s3object GROUP BY g", False),
    ("SELECT UPPER(g) AS ug, COUNT(*) FROM s3object GROUP BY UPPER(g)", False),
    ("SELECT h, COUNT(*) AS n FROM s3object GROUP BY 1 ORDER BY n DESC, h NULLS FIRST",
     True),
    ("SELECT g, COUNT(*) AS n FROM s3object GROUP BY g ORDER BY g LIMIT 3", True),
    ("SELECT g, SUM(f) AS sf FROM s3object GROUP BY g ORDER BY sf DESC LIMIT 2 OFFSET 1",
     True),
    ("SELECT g FROM s3object GROUP BY g", False),
    ("SELECT DISTINCT h FROM s3object GROUP BY g, h", False),
    ("SELECT COUNT(*), SUM(x), AVG(f), MIN(s), STDDEV(f), COUNT(DISTINCT x) FROM s3object "
     "WHERE x > 1000", True),
    ("SELECT COUNT(*), SUM(f), STDDEV(f) FROM s3object WHERE id < 30", True),
    ("SELECT g, COUNT(*), SUM(f) FROM s3object WHERE id >= 350 GROUP BY g", False),
    ("SELECT g, COUNT(*) FROM s3object WHERE x > 1000 GROUP BY g", False),
    ("SELECT s3object.g, COUNT(*) FROM s3object WHERE s3object.x > 3 GROUP BY s3object.g",
     False),
    ("SELECT COUNT(*) * 2 + SUM(x), CASE WHEN SUM(x) > 100 THEN 'big' ELSE 'small' END "
     "FROM s3object", True),
]

ROWS = [
    ("SELECT id, x FROM s3object ORDER BY x DESC, id LIMIT 7", True),
    ("SELECT id, f FROM s3object ORDER BY f NULLS FIRST, id LIMIT 5", True),
    ("SELECT id, f FROM s3object ORDER BY f DESC NULLS LAST, id LIMIT 12", True),
    ("SELECT id, f FROM s3object ORDER BY f DESC, id LIMIT 12", True),
    ("SELECT * FROM s3object ORDER BY id DESC LIMIT 4", True),
    ("SELECT id AS k, x FROM s3object ORDER BY k LIMIT 5 OFFSET 3", True),
    ("SELECT id, x * 2 AS y FROM s3object ORDER BY 2, 1 LIMIT 6", True),
    ("SELECT id FROM s3object ORDER BY x, f DESC, id LIMIT 9", True),
    ("SELECT id, g FROM s3object WHERE x > 15 ORDER BY id LIMIT 1000", True),
    ("SELECT id, s FROM s3object ORDER BY id", True),
    ("SELECT id, x FROM s3object LIMIT 17", True),
    ("SELECT id, x FROM s3object LIMIT 10 OFFSET 95", True),
    ("SELECT id FROM s3object WHERE x > 1000 ORDER BY id LIMIT 3", True),
    ("SELECT DISTINCT g FROM s3object", False),
    ("SELECT DISTINCT g, h FROM s3object ORDER BY g NULLS FIRST, h LIMIT 8", True),
    ("SELECT DISTINCT s FROM s3object ORDER BY s DESC", True),
    ("SELECT DISTINCT x % 3 AS r FROM s3object ORDER BY r", True),
    ("SELECT * FROM s3object ORDER BY 2 DESC, id LIMIT 9", True),
    ("SELECT DISTINCT * FROM s3object ORDER BY 4 NULLS FIRST, 1 LIMIT 6", True),
    ("SELECT x + 100 AS x, id FROM s3object ORDER BY x DESC, id LIMIT 5", True),
]


def scenarios() -> list[tuple[int, bool, int]]:
    """(data seed, groups concentrated by batch, batching seed)."""
    return [(1, False, 10), (2, True, 20), (3, False, 30), (4, True, 40)]


@pytest.mark.parametrize(("sql", "ordered"), AGGREGATES + ROWS)
@pytest.mark.parametrize("scenario", scenarios())
def test_split_equals_oracle(sql: str, ordered: bool, scenario: tuple[int, bool, int]) -> None:
    seed, by_group, batching = scenario
    df = frame(seed, by_group=by_group)
    batches = cut(df, batching)
    want = oracle(sql, df)
    # Without the schema, the final plan's own names and types already match ...
    assert_same(through_split(sql, batches), want, ordered=ordered)
    # ... and with it, the answer is cast to the oracle's schema by construction.
    assert_same(through_split(sql, batches, schema=df.schema), want, ordered=ordered)


@pytest.mark.parametrize(("sql", "ordered"), AGGREGATES + ROWS)
def test_split_over_only_empty_batches(sql: str, ordered: bool) -> None:
    df = frame(5).clear()
    want = oracle(sql, df)
    assert_same(through_split(sql, [df, df.clear()]), want, ordered=ordered)
    s = split_query(sql)
    assert s is not None
    assert_same(s.run([], schema=df.schema).collect(), want, ordered=ordered)


@pytest.mark.parametrize(("sql", "ordered"), AGGREGATES[:12] + ROWS[:6])
def test_one_batch_and_one_row_batches(sql: str, ordered: bool) -> None:
    df = frame(6, n=40)
    want = oracle(sql, df)
    assert_same(through_split(sql, [df]), want, ordered=ordered)
    assert_same(through_split(sql, [df[i:i + 1] for i in range(df.height)]), want,
                ordered=ordered)


def test_partials_survive_parquet() -> None:
    """The reduce step reads the partials back from storage: their schema must survive."""
    sql = ("SELECT g, COUNT(*) AS n, AVG(f) AS m, STDDEV(f) AS sd, COUNT(DISTINCT s) AS ds "
           "FROM s3object GROUP BY g")
    df = frame(7)
    s = split_query(sql)
    assert s is not None
    stored = []
    for batch in cut(df, 70):
        buf = io.BytesIO()
        s.partial(batch).collect().write_parquet(buf)
        stored.append(pl.read_parquet(buf.getvalue()))
    got = s.final(stored, schema=df.schema).collect()
    assert_same(got, oracle(sql, df), ordered=False)


def test_float32_average_is_cast_to_the_oracles_type() -> None:
    df = frame(8).with_columns(pl.col("f").cast(pl.Float32).alias("r"))
    sql = "SELECT g, AVG(r), SUM(r), STDDEV(r) FROM s3object GROUP BY g"
    want = oracle(sql, df)
    got = through_split(sql, cut(df, 80), schema=df.schema)
    assert got.schema == want.schema
    assert_close_frames = sorted(got.rows(), key=sort_key), sorted(want.rows(), key=sort_key)
    for a, b in zip(*assert_close_frames, strict=True):
        assert a[0] == b[0]
        assert all(math.isclose(x, y, rel_tol=1e-5) for x, y in zip(a[1:], b[1:], strict=True)
                   if x is not None and y is not None)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_top_k_with_ties_keeps_the_oracles_keys(seed: int) -> None:
    """``ORDER BY x LIMIT k`` with many equal x: the sequence of keys is the oracle's, and
    each row is a row of the data with that key (which of the tied rows is arbitrary)."""
    df = frame(seed)
    for sql, key in [("SELECT x, id, g FROM s3object ORDER BY x LIMIT 23", "x"),
                     ("SELECT g, id FROM s3object ORDER BY g DESC LIMIT 40", "g"),
                     ("SELECT DISTINCT h, g FROM s3object ORDER BY h LIMIT 7", "h")]:
        want = oracle(sql, df)
        got = through_split(sql, cut(df, seed))
        assert got.schema == want.schema
        assert got[key].to_list() == want[key].to_list()
        unlimited = Counter(oracle(sql.rsplit(" LIMIT", 1)[0], df).rows())
        assert not Counter(got.rows()) - unlimited


def test_distinct_limit_without_order_is_some_distinct_rows() -> None:
    df = frame(9)
    sql = "SELECT DISTINCT g, h FROM s3object LIMIT 5"
    got = through_split(sql, cut(df, 90))
    every = set(oracle("SELECT DISTINCT g, h FROM s3object", df).rows())
    assert got.height == 5
    assert len(set(got.rows())) == 5
    assert set(got.rows()) <= every


def test_large_mean_small_spread_variance_is_stable() -> None:
    """Chan's merge of (n, mean, M2): a mean of 1e9 with unit spread keeps its digits.
    Against the exact variance (rational arithmetic), the split is as close as polars'
    one pass (both within 1e-6 relative: the float64 mean of values near 1e9 is itself
    rounded to 1e-7), where the sum-of-squares formula loses every digit."""
    rng = random.Random(11)
    values = [1e9 + rng.gauss(0, 1) for _ in range(2000)]
    df = pl.DataFrame({"g": [i % 3 for i in range(2000)], "v": values})
    sql = "SELECT g, VARIANCE(v) AS var FROM s3object GROUP BY g ORDER BY g"
    got = through_split(sql, cut(df, 5, pieces=9))
    want = oracle(sql, df)
    assert got.schema == want.schema
    for g in range(3):
        xs = [Fraction(v) for i, v in enumerate(values) if i % 3 == g]
        mean = sum(xs) / len(xs)
        exact = float(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
        assert math.isclose(got["var"][g], exact, rel_tol=1e-6)
        assert math.isclose(want["var"][g], exact, rel_tol=1e-6)
        fs = [float(x) for x in xs]
        naive = (sum(v * v for v in fs) - sum(fs) ** 2 / len(fs)) / (len(fs) - 1)
        assert not math.isclose(naive, exact, rel_tol=1e-2)


# ------------------------------------------------------------------------------ property

PROPERTY_SQL = [
    "SELECT COUNT(*), COUNT(x), SUM(x), MIN(x), MAX(x), AVG(x), SUM(f), AVG(f) FROM s3object",
    "SELECT STDDEV(f), VARIANCE(f), STDDEV(x), VAR_SAMP(x), COUNT(DISTINCT x) FROM s3object",
    "SELECT g, COUNT(*), SUM(f), MIN(f), MAX(x), AVG(x), STDDEV(f), VARIANCE(x), "
    "COUNT(DISTINCT x) FROM s3object GROUP BY g",
    "SELECT g, SUM(x) AS sx FROM s3object GROUP BY g HAVING COUNT(*) > 2",
]


@functools.cache
def cached_split(sql: str) -> Split:
    s = split_query(sql)
    assert s is not None
    return s


rows_strategy = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", None]),
              st.one_of(st.none(), st.integers(-1000, 1000)),
              st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False,
                                             width=64))),
    max_size=60)


@settings(max_examples=250, derandomize=True, deadline=None)
@given(rows=rows_strategy, cuts=st.lists(st.integers(0, 60), max_size=6))
def test_random_batchings_give_the_oracles_aggregates(
        rows: list[tuple[str | None, int | None, float | None]], cuts: list[int]) -> None:
    df = pl.DataFrame({"g": [r[0] for r in rows], "x": [r[1] for r in rows],
                       "f": [r[2] for r in rows]},
                      schema={"g": pl.String, "x": pl.Int64, "f": pl.Float64})
    points = sorted(min(c, df.height) for c in cuts)
    bounds = [0, *points, df.height]
    batches = [df[a:b] for a, b in itertools.pairwise(bounds)]
    for sql in PROPERTY_SQL:
        got = cached_split(sql).run(batches, schema=df.schema).collect()
        want = oracle(sql, df)
        assert got.schema == want.schema
        assert got.height == want.height
        g = sorted(got.rows(), key=sort_key)
        w = sorted(want.rows(), key=sort_key)
        for a, b in zip(g, w, strict=True):
            for x, y in zip(a, b, strict=True):
                if isinstance(x, float) and isinstance(y, float):
                    # Sums regroup; a variance's relative error grows when it is tiny
                    # against the squared values, so the scale of the data sets the bound.
                    assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-6), (sql, a, b)
                else:
                    assert x == y, (sql, a, b)


# ------------------------------------------------------------------- the analysed SQL

ANALYSED = [
    "SELECT s.rec.c, COUNT(*) AS n, SUM(s.rec.b), AVG(s.rec.b) FROM s3object s "
    "GROUP BY s.rec.c",
    "SELECT s.tags[0], COUNT(*), COUNT(DISTINCT s.rec.b) FROM s3object s GROUP BY s.tags[0]",
    "SELECT id, s.rec.b FROM s3object s ORDER BY s.rec.b DESC, id LIMIT 5",
    "SELECT COUNT(*), MAX(TO_TIMESTAMP(ts)) AS latest FROM s3object "
    "WHERE TO_TIMESTAMP(ts) < TO_TIMESTAMP('2024-05-20T')",
    "SELECT DATE_DIFF(day, TO_TIMESTAMP('2024-05-01T'), TO_TIMESTAMP(ts)) AS d, "
    "COUNT(*) AS n FROM s3object GROUP BY d",
]


@pytest.mark.parametrize("sql", ANALYSED)
def test_the_analysed_sql_splits_with_its_paths_computed_per_batch(sql: str) -> None:
    """The wiring's contract: split ``Analysis.sql`` (paths rewritten, S3 Select functions
    translated), compute the path columns on each batch as ``Analysis.finish`` does, and
    the answer is ``Analysis.finish`` over all rows."""
    rng = random.Random(3)
    n = 200
    df = pl.DataFrame({
        "id": range(n),
        "rec": [{"b": rng.choice([None, *range(5)]), "c": rng.choice(["u", "v", None])}
                for _ in range(n)],
        "tags": [[rng.choice("xyz") for _ in range(rng.randint(0, 3))] for _ in range(n)],
        "ts": [f"2024-05-{rng.randint(1, 28):02d}T10:00:00Z" for _ in range(n)]})
    analysis = analyze(Query(sql=sql))
    assert analysis.sql is not None
    want = analysis.finish(df.lazy()).collect()
    s = split_query(analysis.sql)
    assert s is not None
    batches = [with_paths(df[i:i + 37].lazy(), analysis.paths) for i in range(0, n, 37)]
    schema = with_paths(df.lazy(), analysis.paths).collect_schema()
    got = s.run(batches, schema=schema).collect()
    assert_same(got, want, ordered="ORDER BY" in sql)
