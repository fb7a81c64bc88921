"""A planned read handed to polars' own S3 reader (``s3slice.parquet.handoff``), through
the real handler on the local S3 server.

The hand-off happens when the plan reads every row group and the page index cuts nothing:
polars then fetches exactly the plan's column chunks. Each test checks what the server
saw, and each answer is compared with polars reading the whole object locally, then
running the same SQL (the oracle), and with the ranged read of the same object
(``S3SLICE_STRATEGY=ranges``, which never hands off). The guarantees of the ranged read
hold: an object replaced during polars' read is read again (its ETag is checked after the
read, with ``If-Match``), a wrong leading magic is an ``ObjectFormatError``, a failure of
polars' reader is answered by the ranged read, and ``stats`` count only s3slice's own
requests, saying ``transport: polars``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
from collections.abc import Iterator
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3slice import FOOTER_CACHE, ObjectFormatError
from s3slice.entry import dispatch as _entry
from tests.support import S3Env, invoke

pytestmark = pytest.mark.integration

DATA, RESULTS = "handoff-data", "handoff-results"
ROWS, GROUP = 4_000, 1_000
#: Ranged reads (nothing is small, the footer in its own GET), the strategy chosen.
AUTO = {"S3SLICE_SMALL_OBJECT_SIZE": "0", "S3SLICE_FOOTER_SIZE": "16384"}
UTC = dt.UTC


def table() -> pa.Table:
    n = range(ROWS)
    return pa.table({
        "id": pa.array(n, pa.int64()),
        "i32": pa.array([(i * 7919) % 1000 - 500 for i in n], pa.int32()),
        "f": pa.array([float("nan") if i % 97 == 0 else (i % 113) / 7 for i in n]),
        "s": pa.array([None if i % 31 == 0 else f"k{(i * 13) % 50}" for i in n]),
        "b": pa.array([i % 3 == 0 for i in n]),
        "d": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=i % 400) for i in n]),
        "ts": pa.array([dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(minutes=i)
                        for i in n], pa.timestamp("us", tz="UTC")),
        "naive": pa.array([dt.datetime(2024, 1, 1) + dt.timedelta(seconds=i * 37)
                           for i in n], pa.timestamp("ms")),
        "dec": pa.array([decimal.Decimal(i % 1000) / 100 for i in n], pa.decimal128(12, 2)),
        "u64": pa.array([2**63 + i for i in n], pa.uint64()),
        # what the queries leave: the needed bytes stay well under the object's
        "pad": pa.array([f"{i:08d}" * 40 for i in n]),
    })


def parquet(t: pa.Table, **kw: Any) -> bytes:
    buf = io.BytesIO()
    pq.write_table(t, buf, row_group_size=GROUP, compression="snappy", **kw)
    return buf.getvalue()


DATA_BYTES = parquet(table())

#: Filters that keep rows in every row group (statistics prune none), each with the
#: columns it reads: adjacent ones, so that polars' reader, which merges ranges less than
#: 1 MiB apart, fetches only theirs.
QUERIES: list[tuple[list[str], str]] = [
    (["id", "i32"], "i32 <= -400"),
    (["i32", "f"], "f > 10.5 AND i32 > 0"),
    (["s"], "s = 'k7' OR s IS NULL"),
    (["b"], "b"),
    (["d"], "d >= '2024-02-01' AND d < '2024-02-10'"),
    (["ts"], "ts < '2024-01-01 00:30:00+00:00' OR ts > '2024-01-03 18:00:00+00:00' OR "
             "ts BETWEEN '2024-01-02 00:00:00+00:00' AND '2024-01-02 00:20:00+00:00' OR "
             "ts BETWEEN '2024-01-02 12:00:00+00:00' AND '2024-01-02 12:10:00+00:00'"),
    (["naive"], "naive < '2024-01-01 00:10:00' OR naive > '2024-01-02 17:00:00' OR "
                "naive BETWEEN '2024-01-01 15:00:00' AND '2024-01-01 15:05:00' OR "
                "naive BETWEEN '2024-01-02 01:00:00' AND '2024-01-02 01:05:00'"),
    (["dec", "u64"], "dec = 3.25 OR u64 % 997 = 0"),
    (["f"], "f <> f OR f > 15"),  # NaN
]


@pytest.fixture
def lake(s3: S3Env, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Env]:
    for bucket in (DATA, RESULTS):
        s3.empty_bucket(bucket)
    for name, value in AUTO.items():
        monkeypatch.setenv(name, value)
    _entry.reset()
    FOOTER_CACHE.clear()
    yield s3
    _entry.reset()
    FOOTER_CACHE.clear()


def oracle(data: bytes, columns: list[str], where: str) -> pl.DataFrame:
    frame = pl.read_parquet(data)
    return pl.SQLContext(frames={"s3object": frame}).execute(
        f"SELECT {', '.join(columns)} FROM s3object WHERE {where}", eager=True)


def answer(source: str, columns: list[str], where: str, s3: S3Env
           ) -> tuple[pl.DataFrame, dict[str, Any]]:
    response = invoke({"source": source, "columns": columns, "filter": where,
                       "output": f"s3://{RESULTS}/out/"})
    frames = [pl.read_parquet(s3.get(o["uri"])) for o in response["outputs"]]
    return pl.concat(frames), response["stats"]


def ranged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S3SLICE_STRATEGY", "ranges")
    _entry.reset()
    FOOTER_CACHE.clear()


def needed_bytes(data: bytes, columns: list[str]) -> int:
    md = pq.read_metadata(pa.BufferReader(data))
    index = {md.schema.column(i).name: i for i in range(md.num_columns)}
    return sum(md.row_group(g).column(index[c]).total_compressed_size
               for g in range(md.num_row_groups) for c in columns)


@pytest.mark.parametrize(("columns", "where"), QUERIES, ids=[w for _, w in QUERIES])
def test_polars_reads_what_the_plan_needs_and_answers_as_the_oracle(
        lake: S3Env, monkeypatch: pytest.MonkeyPatch, columns: list[str], where: str) -> None:
    lake.client.put_object(Bucket=DATA, Key="t.parquet", Body=DATA_BYTES)
    want = oracle(DATA_BYTES, columns, where)
    assert 0 < want.height < ROWS
    lake.log.clear()
    got, stats = answer(f"s3://{DATA}/t.parquet", columns, where, lake)
    assert got.equals(want), where
    assert stats["strategy"] == "ranges"
    assert stats["strategy_inputs"]["transport"] == "polars", stats["strategy_inputs"]
    assert stats["row_groups_read"] == ROWS // GROUP
    # s3slice's own GETs (the footer, the 4-byte If-Match check) and polars' (its footer,
    # one GET per row group of the plan's adjacent chunks): their planned figures are
    # what the server saw.
    gets = [r for r in lake.log.gets() if r.path.startswith(f"/{DATA}/")]
    mine = [r for r in gets if r.range in ("bytes=0-3", "bytes=-16384")]
    assert len(mine) == 2
    assert stats["requests"] == len(gets) == 2 + 1 + ROWS // GROUP
    assert stats["bytes_fetched"] == sum(r.body_bytes for r in gets)
    assert stats["needed_bytes"] == needed_bytes(DATA_BYTES, columns)
    ranges = [r for r in gets if r not in mine and not (r.range or "").startswith("bytes=-")]
    assert 0 <= sum(r.body_bytes for r in ranges) - stats["needed_bytes"] <= 1024
    # the ranged read gives the same answer
    ranged(monkeypatch)
    again, stats = answer(f"s3://{DATA}/t.parquet", columns, where, lake)
    assert "transport" not in stats["strategy_inputs"]
    assert again.equals(want)


def test_an_object_replaced_during_polars_read_is_read_again(
        lake: S3Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """The object is replaced once polars has planned its read: the If-Match check after
    it fails (412), and the read restarts on the new object."""
    first, second = DATA_BYTES, parquet(table().slice(0, 2_000).append_column(
        "extra", pa.array(range(2_000))))
    lake.client.put_object(Bucket=DATA, Key="t.parquet", Body=first)
    real = pl.scan_parquet
    replaced: list[str] = []

    def replacing(source: Any, **kw: Any) -> pl.LazyFrame:
        lf = real(source, **kw)
        if isinstance(source, str) and source.startswith("s3://") and not replaced:
            replaced.append(source)
            lake.client.put_object(Bucket=DATA, Key="t.parquet", Body=second)
        return lf

    monkeypatch.setattr(pl, "scan_parquet", replacing)
    lake.log.clear()
    got, stats = answer(f"s3://{DATA}/t.parquet", ["id", "i32"], "i32 <= -400", lake)
    assert replaced
    assert got.equals(oracle(second, ["id", "i32"], "i32 <= -400"))
    assert [r.status for r in lake.log.gets() if r.range == "bytes=0-3"] == [412, 206]
    assert stats["rows_in"] == 2_000


def test_a_wrong_leading_magic_is_refused(lake: S3Env) -> None:
    bad = b"PAR0" + DATA_BYTES[4:]
    lake.client.put_object(Bucket=DATA, Key="bad.parquet", Body=bad)
    with pytest.raises(ObjectFormatError, match="PAR1"):
        invoke({"source": f"s3://{DATA}/bad.parquet", "columns": ["id", "i32"],
                "filter": "i32 <= -400", "output": f"s3://{RESULTS}/out/"})
    assert lake.keys(RESULTS) == []


def test_when_polars_reader_fails_the_ranged_read_answers(
        lake: S3Env, monkeypatch: pytest.MonkeyPatch) -> None:
    lake.client.put_object(Bucket=DATA, Key="t.parquet", Body=DATA_BYTES)
    real = pl.scan_parquet

    def failing(source: Any, **kw: Any) -> pl.LazyFrame:
        if isinstance(source, str) and source.startswith("s3://"):
            source = source.replace("/t.parquet", "/missing.parquet")
        return real(source, **kw)

    monkeypatch.setattr(pl, "scan_parquet", failing)
    got, stats = answer(f"s3://{DATA}/t.parquet", ["s"], "s = 'k7'", lake)
    assert got.equals(oracle(DATA_BYTES, ["s"], "s = 'k7'"))
    assert stats["strategy_inputs"]["transport"] == "s3slice (polars' reader failed)"
    assert stats["bytes_fetched"] >= needed_bytes(DATA_BYTES, ["s"])


@pytest.mark.parametrize("key", ["in/a b.parquet", "in/100%.parquet", "in/q?x.parquet",
                                 "in//double.parquet", "in/ünï.parquet"])
def test_keys_polars_may_read_otherwise_are_read_by_s3slice(lake: S3Env, key: str) -> None:
    lake.client.put_object(Bucket=DATA, Key=key, Body=DATA_BYTES)
    got, stats = answer(f"s3://{DATA}/{key}", ["id", "i32"], "i32 <= -400", lake)
    assert got.equals(oracle(DATA_BYTES, ["id", "i32"], "i32 <= -400"))
    assert "transport" not in stats["strategy_inputs"]


@pytest.mark.parametrize(("why", "query"), [
    ("row groups pruned", (["id", "i32"], "id < 1500")),
    ("no filter", (["id", "i32"], None)),
])
def test_plans_that_prune_more_than_polars_are_not_handed_off(
        lake: S3Env, why: str, query: tuple[list[str], str | None]) -> None:
    lake.client.put_object(Bucket=DATA, Key="t.parquet", Body=DATA_BYTES)
    columns, where = query
    event: dict[str, Any] = {"source": f"s3://{DATA}/t.parquet", "columns": columns,
                             "output": f"s3://{RESULTS}/out/"}
    if where is not None:
        event["filter"] = where
    response = invoke(event)
    assert "transport" not in response["stats"]["strategy_inputs"], why
    got = pl.concat([pl.read_parquet(lake.get(o["uri"])) for o in response["outputs"]])
    want = pl.read_parquet(DATA_BYTES, columns=columns)
    if where is not None:
        want = oracle(DATA_BYTES, columns, where)
    assert got.equals(want)


def test_columns_polars_would_fetch_the_gap_between_are_read_by_s3slice(lake: S3Env) -> None:
    """``id`` and ``s`` have ``i32`` and ``f`` between them: polars would fetch those too."""
    lake.client.put_object(Bucket=DATA, Key="t.parquet", Body=DATA_BYTES)
    got, stats = answer(f"s3://{DATA}/t.parquet", ["id", "s"], "s = 'k7'", lake)
    assert got.equals(oracle(DATA_BYTES, ["id", "s"], "s = 'k7'"))
    assert "transport" not in stats["strategy_inputs"]


def test_a_read_whose_chunks_and_answer_may_pass_the_memory_budget_is_not_handed_off(
        lake: S3Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """``id`` and ``x`` decode to 3.2 MB: within the default budget polars reads them;
    under a 1 MB budget the ranged read does (polars would hold the chunks and every row
    at once)."""
    n = 200_000
    t = pa.table({"id": pa.array(range(n), pa.int64()),
                  "x": pa.array([i % 1000 for i in range(n)], pa.int64()),
                  **{f"z{k}": pa.array([(i * 2654435761 + k) % 2**61 / 3 for i in range(n)])
                     for k in range(3)}})
    buf = io.BytesIO()
    pq.write_table(t, buf, row_group_size=50_000, compression="snappy", use_dictionary=False)
    data = buf.getvalue()
    lake.client.put_object(Bucket=DATA, Key="big.parquet", Body=data)
    where = "x < 5"
    want = oracle(data, ["id", "x"], where)
    got, stats = answer(f"s3://{DATA}/big.parquet", ["id", "x"], where, lake)
    assert got.equals(want)
    assert stats["strategy_inputs"]["transport"] == "polars", stats["strategy_inputs"]
    monkeypatch.setenv("S3SLICE_MEMORY_BUDGET_MB", "1")
    _entry.reset()
    got, stats = answer(f"s3://{DATA}/big.parquet", ["id", "x"], where, lake)
    assert got.equals(want)
    assert "transport" not in stats["strategy_inputs"]
