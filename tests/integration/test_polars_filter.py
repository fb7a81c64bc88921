"""``s3slice.read_parquet(..., filter=pl.Expr)`` prunes as the same filter written as SQL
text does, and answers what polars answers in memory (``frame.filter(expr)`` over the
whole decoded file), on the local S3 server:

- a filter on a sorted timestamp column (zoned and naive), ``is_between`` and ``is_in``
  read the row groups the SQL text reads, few of many;
- seeded random expressions over integers, floats (NaN, infinities, nulls), strings,
  dates, timestamps and booleans, with parts the pruning does not understand (``%``,
  ``str.len_chars``) under ``&``, ``|`` and ``~``, answer exactly as polars in memory.
"""

from __future__ import annotations

import datetime as dt
import io
import random
from collections.abc import Callable, Iterator
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import pytest

import s3slice
from s3slice.entry import dispatch as _entry
from s3slice.query.polars.expr import to_sql
from tests.support import S3Env, forget_warm_state

pytestmark = pytest.mark.integration

BUCKET = "polars-filter"
UTC = dt.UTC
START = dt.datetime(2024, 1, 1, tzinfo=UTC)
N = 20_000


@pytest.fixture
def lake(s3: S3Env) -> Iterator[S3Env]:
    s3.bucket(BUCKET)
    _entry.reset()
    yield s3
    _entry.reset()


def put(s3: S3Env, key: str, frame: pl.DataFrame, row_group_size: int) -> str:
    sink = io.BytesIO()
    pq.write_table(frame.to_arrow(), sink, row_group_size=row_group_size,
                   write_page_index=True)
    s3.client.put_object(Bucket=BUCKET, Key=key, Body=sink.getvalue())
    return f"s3://{BUCKET}/{key}"


def sorted_frame() -> pl.DataFrame:
    ts = pl.Series("ts", [START + dt.timedelta(minutes=i) for i in range(N)],
                   dtype=pl.Datetime("us", "UTC"))
    return pl.DataFrame({"i": range(N), "ts": ts, "naive": ts.dt.replace_time_zone(None),
                         "k": [f"k{i % 50:02d}" for i in range(N)]})


CUT = START + dt.timedelta(minutes=N - 1_700)
PRUNING: list[tuple[str, pl.Expr, str]] = [
    ("zoned ts", pl.col("ts") >= CUT, f"ts >= '{CUT.isoformat()}'"),
    ("naive ts", pl.col("naive") >= CUT.replace(tzinfo=None),
     f"naive >= CAST('{CUT.replace(tzinfo=None).isoformat(sep=' ')}' AS TIMESTAMP)"),
    ("between", pl.col("i").is_between(5_000, 5_150, closed="left"),
     "i >= 5000 AND i < 5150"),
    ("is_in and an opaque part", pl.col("i").is_in([7, 12_345]) & (pl.col("k").str.len_chars()
                                                                  > 1),
     "i IN (7, 12345)"),
    ("not", ~(pl.col("i") < N - 100), f"NOT (i < {N - 100})"),
]


@pytest.mark.parametrize(("name", "expr", "sql"), PRUNING, ids=[p[0] for p in PRUNING])
def test_an_expression_prunes_as_the_same_sql_text(lake: S3Env, name: str, expr: pl.Expr,
                                                   sql: str) -> None:
    frame = sorted_frame()
    uri = put(lake, "sorted.parquet", frame, row_group_size=200)  # 100 row groups
    forget_warm_state()  # each read from cold: the footer fetched by both
    got = s3slice.read_parquet(uri, filter=expr)
    assert got.equals(frame.filter(expr))
    forget_warm_state()
    text = s3slice.read_parquet(uri, filter=sql)
    assert text.equals(frame.filter(expr))
    stats, text_stats = got.s3slice.stats, text.s3slice.stats
    assert stats is not None and text_stats is not None
    assert stats["row_groups"] == 100
    assert stats["row_groups_read"] == text_stats["row_groups_read"] <= 10, name
    assert stats["bytes_fetched"] == text_stats["bytes_fetched"]


# ------------------------------------------------------------------ random expressions
def random_frame(rng: random.Random, n: int = 1_200) -> pl.DataFrame:
    def maybe(v: Any) -> Any:
        return None if rng.random() < 0.08 else v
    floats = [maybe(rng.choice([rng.uniform(-50, 50), float("nan"), float("inf"),
                                -float("inf"), 0.0, -0.0]) if rng.random() < 0.15
                    else round(rng.uniform(-50, 50), 2)) for _ in range(n)]
    frame = pl.DataFrame({
        "a": [maybe(rng.randint(-100, 100)) for _ in range(n)],
        "f": pl.Series(floats, dtype=pl.Float64),
        "s": [maybe(rng.choice(["", "a", "ab", "b", "été", "z", "Z", "a'b"])) for _ in range(n)],
        "d": [maybe(dt.date(2024, 1, 1) + dt.timedelta(days=rng.randint(0, 60)))
              for _ in range(n)],
        "t": pl.Series([maybe(START + dt.timedelta(hours=rng.randint(0, 500)))
                        for _ in range(n)], dtype=pl.Datetime("us", "UTC")),
        "b": [maybe(rng.random() < 0.5) for _ in range(n)],
    })
    # sorted by a, so that pruning has groups to skip
    return frame.sort("a", nulls_last=True)


def leaf(rng: random.Random) -> pl.Expr:
    op: Callable[[pl.Expr, Any], pl.Expr] = rng.choice([
        lambda c, v: c == v, lambda c, v: c != v, lambda c, v: c < v, lambda c, v: c <= v,
        lambda c, v: c > v, lambda c, v: c >= v])
    column = rng.choice("afsdtb")
    c = pl.col(column)
    values: dict[str, Callable[[], Any]] = {
        "a": lambda: rng.randint(-110, 110),
        "f": lambda: rng.choice([rng.uniform(-60, 60), 0.0, float("inf"), 1.5]),
        "s": lambda: rng.choice(["", "a", "ab", "b", "été", "z", "a'b", "m"]),
        "d": lambda: dt.date(2024, 1, 1) + dt.timedelta(days=rng.randint(-5, 65)),
        "t": lambda: START + dt.timedelta(hours=rng.randint(-10, 510), minutes=rng.choice(
            [0, 30])),
        "b": lambda: rng.random() < 0.5,
    }
    value = values[column]
    kind = rng.random()
    if kind < 0.45:
        return op(c, value())
    if kind < 0.55:
        return c.is_in([value() for _ in range(rng.randint(1, 4))])
    if kind < 0.65:
        lo, hi = sorted([value(), value()])
        return c.is_between(lo, hi, closed=rng.choice(["both", "left", "right", "none"]))
    if kind < 0.75:
        return c.is_null() if rng.random() < 0.5 else c.is_not_null()
    if kind < 0.85:
        return op(pl.lit(value()), c)  # the constant first
    # parts the pruning does not understand
    return rng.choice([(pl.col("a") % 3) == 0, pl.col("s").str.len_chars() > 1,
                       pl.col("f").is_nan(), (pl.col("a") * 2) > pl.col("f")])


def expression(rng: random.Random, depth: int = 0) -> pl.Expr:
    if depth >= 3 or rng.random() < 0.35:
        return leaf(rng)
    pick = rng.random()
    if pick < 0.4:
        return expression(rng, depth + 1) & expression(rng, depth + 1)
    if pick < 0.8:
        return expression(rng, depth + 1) | expression(rng, depth + 1)
    return ~expression(rng, depth + 1)


def test_random_expressions_answer_as_polars_in_memory(lake: S3Env) -> None:
    rng = random.Random(37)
    frame = random_frame(rng)
    uri = put(lake, "random.parquet", frame, row_group_size=60)
    checked = translated = 0
    while checked < 40:
        expr = expression(rng)
        try:
            want = frame.filter(expr)
        except pl.exceptions.PolarsError:
            continue  # polars refuses it in memory too
        got = s3slice.read_parquet(uri, filter=expr)
        assert got.equals(want), (str(expr), to_sql(expr))
        checked += 1
        translated += to_sql(expr) is not None
    assert translated >= 25  # most of them pruned by their SQL


def test_what_is_not_translated_prunes_nothing_and_stays_exact() -> None:
    opaque = pl.col("s").str.len_chars() > 1
    assert to_sql(opaque) is None
    assert to_sql(~(opaque & (pl.col("a") > 1))) is None  # NOT of a weakened part
    assert to_sql(opaque | (pl.col("a") > 1)) is None
    assert to_sql(opaque & (pl.col("a") > 1)) == '(("a" > 1))'
    assert to_sql(pl.col("a").is_in([1, None])) is None  # a null in the list
    assert to_sql(pl.col("f") < float("nan")) is None
    assert to_sql(pl.col("t") >= dt.datetime(2024, 1, 1, 2, tzinfo=dt.timezone(
        dt.timedelta(hours=2)))) == "(\"t\" >= '2024-01-01 00:00:00+00:00')"
