"""Exact aggregates across objects and batches, through the handler on the local S3 server.

The reported case: a prefix of two objects, each 1,000 rows of an Int32 column holding
3,000,000, answered ``AVG`` = 852516.352, because each partial SUM kept the column's type
and wrapped. The same with Int64 epoch nanoseconds, with GROUP BY, and through the
Distributed Map (map batches writing partials, then the reduce). The oracle is polars over
the concatenated objects; where polars itself wraps (its SUM of Int32 is an Int32), the
exact sum, as :mod:`s3slice.query.split.types` documents: SUM of Int32 answers an exact
Int64, and a sum beyond 64 bits an exact Decimal(38, 0) (DuckDB: HUGEINT), never wrapped.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import polars as pl
import pytest

from s3slice.entry import dispatch as _entry
from tests.support import S3Env, invoke

pytestmark = pytest.mark.integration

DATA, RESULTS = "exact-data", "exact-results"
OUTPUT = f"s3://{RESULTS}/out/"
ROWS = 1_000
BIG = 3_000_000
EPOCH_NS = 1_700_000_000_123_456_789


def frame(i: int) -> pl.DataFrame:
    return pl.DataFrame({
        "g": [("a", "b", "c")[(i + r) % 3] for r in range(ROWS)],
        "v": pl.Series([BIG] * ROWS, dtype=pl.Int32),
        "w": pl.Series([2_000_000_000 - r * 7 for r in range(ROWS)], dtype=pl.Int32),
        "ts": pl.Series([EPOCH_NS + i * 10**12 + r * 10**9 for r in range(ROWS)],
                        dtype=pl.Int64),
    })


@pytest.fixture
def lake(s3: S3Env, monkeypatch: pytest.MonkeyPatch) -> S3Env:
    for bucket in (DATA, RESULTS):
        s3.empty_bucket(bucket)
    for i in range(2):
        s3.put_frame(DATA, f"two/part-{i}.parquet", frame(i))
    monkeypatch.delenv("S3SLICE_QUERY", raising=False)
    monkeypatch.delenv("S3SLICE_OUTPUT_URI", raising=False)
    _entry.reset()
    return s3



def objects(lake: S3Env) -> pl.DataFrame:
    """The oracle's data: every object of the prefix, read whole and concatenated."""
    return pl.concat([pl.read_parquet(lake.get(f"s3://{DATA}/{k}"))
                      for k in lake.keys(DATA, "two/")])


def polars_answer(sql: str, df: pl.DataFrame) -> pl.DataFrame:
    return pl.SQLContext(frames={"s3object": df}).execute(sql, eager=True)


def direct(sql: str, source: str = f"s3://{DATA}/two/") -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = invoke({"source": source, "sql": sql,
                                         "return_rows": True})["rows"]
    return rows


def exact_sums(df: pl.DataFrame, column: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for g, v in zip(df["g"], df[column], strict=True):
        out[g] = out.get(g, 0) + int(v)
    return out


def test_avg_and_sum_of_an_int32_prefix_are_exact(lake: S3Env) -> None:
    df = objects(lake)
    sql = "SELECT AVG(v) AS m, SUM(v) AS s, AVG(w) AS mw, COUNT(*) AS n FROM s3object"
    [row] = direct(sql)
    want = polars_answer(sql, df).row(0, named=True)
    assert row["m"] == want["m"] == BIG  # polars' mean is right: the split's must be too
    assert row["mw"] == want["mw"]
    assert row["n"] == want["n"] == 2 * ROWS
    exact = sum(int(v) for v in df["v"])
    assert row["s"] == exact == 2 * ROWS * BIG
    assert want["s"] != exact  # polars' own SUM of an Int32 wraps: the exact sum is chosen


def test_one_object_alone_sums_exactly_too(lake: S3Env) -> None:
    """A single object is answered by the same split (one batch): never polars' wrap."""
    df = pl.read_parquet(lake.get(f"s3://{DATA}/two/part-0.parquet"))
    [row] = direct("SELECT SUM(v) AS s, AVG(v) AS m FROM s3object",
                   source=f"s3://{DATA}/two/part-0.parquet")
    assert row == {"s": sum(int(v) for v in df["v"]), "m": BIG}


def test_group_by_over_the_prefix_is_exact(lake: S3Env) -> None:
    df = objects(lake)
    sql = ("SELECT g, COUNT(*) AS n, SUM(w) AS s, AVG(w) AS m, MIN(w) AS lo, MAX(w) AS hi "
           "FROM s3object GROUP BY g ORDER BY g")
    rows = direct(sql)
    want = polars_answer(sql, df).to_dicts()
    sums = exact_sums(df, "w")
    assert [r["g"] for r in rows] == [w["g"] for w in want] == ["a", "b", "c"]
    for r, w in zip(rows, want, strict=True):
        assert (r["n"], r["lo"], r["hi"]) == (w["n"], w["lo"], w["hi"])
        assert r["m"] == pytest.approx(w["m"], rel=1e-12)
        assert r["s"] == sums[r["g"]] > 2**31  # polars: wrapped; the split: exact


def test_int64_epoch_nanoseconds_average_exactly_and_an_overflowing_sum_is_exact(
        lake: S3Env) -> None:
    df = objects(lake)
    sql = "SELECT g, AVG(ts) AS m, MIN(ts) AS lo FROM s3object GROUP BY g ORDER BY g"
    rows = direct(sql)
    want = polars_answer(sql, df).to_dicts()
    for r, w in zip(rows, want, strict=True):
        values = [int(t) for g, t in zip(df["g"], df["ts"], strict=True) if g == r["g"]]
        assert r["m"] == sum(values) / len(values)  # Python: the exact mean, rounded once
        assert r["m"] == pytest.approx(w["m"], rel=1e-15)
        assert r["lo"] == w["lo"]
    # The sum of 2,000 epoch nanoseconds is beyond Int64: exact (DuckDB's HUGEINT), never
    # wrapped, as polars would; the groups' sums too, whichever fit.
    [row] = direct("SELECT SUM(ts) AS s FROM s3object")
    assert int(row["s"]) == sum(int(t) for t in df["ts"]) > 2**63
    rows = direct("SELECT g, SUM(ts) AS s FROM s3object GROUP BY g ORDER BY g")
    for r in rows:
        assert int(r["s"]) == sum(int(t) for g, t in zip(df["g"], df["ts"], strict=True)
                                  if g == r["g"])


def map_events(lake: S3Env, sql: str, run: str, size: int) -> list[dict[str, Any]]:
    listed = lake.client.list_objects_v2(Bucket=DATA, Prefix="two/")["Contents"]
    items = [{"Key": o["Key"], "Size": o["Size"], "Etag": o["ETag"]} for o in listed]
    return [{"Items": items[i:i + size],
             "BatchInput": {"bucket": DATA, "query": {"sql": sql}, "output": OUTPUT,
                            "run": run}}
            for i in range(0, len(items), size)]


@pytest.mark.parametrize("size", [1, 2])
def test_map_batches_and_the_reduce_are_exact(lake: S3Env, size: int) -> None:
    """Partials written to S3 by each map batch (one object each, or both in one), then
    the reduce: the same exact answer."""
    df = objects(lake)
    sql = ("SELECT g, AVG(v) AS m, SUM(v) AS s, AVG(ts) AS t, COUNT(*) AS n, SUM(ts) AS st "
           "FROM s3object GROUP BY g ORDER BY g")
    run = f"exact-{size}"
    events = map_events(lake, sql, run, size)
    assert len(events) == 2 // size
    for event in events:
        assert invoke(event)["status"] == "ok"
    response = invoke({"Reduce": {"run": run, "query": {"sql": sql}, "output": OUTPUT,
                                  "batches": len(events)}})
    [output] = response["outputs"]
    got = pl.read_parquet(lake.get(output["uri"]))
    want = polars_answer(sql, df)
    assert got["g"].to_list() == want["g"].to_list()
    assert got["m"].to_list() == want["m"].to_list() == [float(BIG)] * 3
    assert got["n"].to_list() == want["n"].to_list()
    sums = exact_sums(df, "v")
    assert got["s"].to_list() == [sums[g] for g in got["g"]]
    assert got.schema["s"] == pl.Int64
    big = exact_sums(df, "ts")  # beyond Int64: exact as Decimal(38, 0), never wrapped
    assert got["st"].to_list() == [big[g] for g in got["g"]]
    assert got.schema["st"] == pl.Decimal(38, 0) and min(big.values()) > 2**63
    for g, t, w in zip(got["g"], got["t"], want["t"], strict=True):
        values = [int(x) for k, x in zip(df["g"], df["ts"], strict=True) if k == g]
        assert t == sum(values) / len(values)
        assert t == pytest.approx(w, rel=1e-15)


def test_an_aggregate_without_an_exact_split_is_answered_whole_by_polars(
        lake: S3Env) -> None:
    """``AVG`` of a date has no exact integer sum (a date cannot be widened); one
    process holds every row, so polars answers it over all of them, as before."""
    df = pl.DataFrame({"d": [dt.date(2024, 1, 1), dt.date(2024, 1, 4)] * 10,
                       "v": pl.Series(range(20), dtype=pl.Int32)})
    lake.put_frame(DATA, "dates/one.parquet", df)
    sql = "SELECT AVG(d) AS m, SUM(v) AS s FROM s3object"
    [row] = direct(sql, source=f"s3://{DATA}/dates/one.parquet")
    want = polars_answer(sql, df).row(0, named=True)
    # Inline rows write a timestamp in ISO 8601 with its `T` (docs/contract.md).
    assert row == {"m": want["m"].isoformat(), "s": want["s"]}
