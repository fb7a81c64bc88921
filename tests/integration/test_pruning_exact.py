"""Pruning never changes an answer (issue 28 §3, and §4's hive partitions): through the real
handler on the local S3 server, row groups, pages, Bloom filters and partitions are pruned
only where polars' own comparison, in the column's own type, proves no row can match.

Each object is written so that the matching rows sit alone in a row group (and its pages),
whose statistics are then exactly the constant polars compares with: a constant read in
another type (a decimal as a float, a big integer as a float, a zone-less time in UTC)
used to prune them. The oracle is polars reading the whole object, then running the same
SQL (timestamp text written with the meaning docs/sql.md gives it); for hive partitions,
polars' ``scan_parquet(hive_partitioning=True)`` (which DuckDB agrees with) over the same
keys on disk.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3slice import QueryError
from tests.support import S3Env, configure, fresh_lake, invoke

pytestmark = pytest.mark.integration

DATA, RESULTS = "exact-data", "exact-results"
GROUP = 50  # rows per row group
NY = "America/New_York"


def _ts(text: str, tz: str | None = None) -> dt.datetime:
    value = dt.datetime.fromisoformat(text)
    return value.replace(tzinfo=dt.UTC) if tz else value


#: name: (Arrow type, the matching value, values of the other row groups, constants).
#: The matching value fills one row group alone; each filter names the column ``c``.
CASES: dict[str, tuple[pa.DataType, Any, list[Any], list[str]]] = {
    "decimal": (pa.decimal128(18, 4), decimal.Decimal("1234567890123.4567"),
                [decimal.Decimal("1234567890123.4568"), decimal.Decimal("1.5"),
                 decimal.Decimal("1234567890123.4566")],
                ["c = 1234567890123.4567", "c >= 1234567890123.4567 AND c < 1234567890123.4568",
                 "c IN (1234567890123.4567, 7)", "c <> 1234567890123.4568"]),
    "uint64": (pa.uint64(), 18446744073709551615, [1, 2**63, 18446744073709551614],
               ["c = 18446744073709551615", "c >= 18446744073709551615",
                "c > 18446744073709551614", "c IN (18446744073709551615)"]),
    "float_big_int": (pa.float64(), 2.0**53, [1.5, 2.0**53 + 2, -2.0**53],
                      ["c = 9007199254740993", "c <= 9007199254740993 AND c >= 9007199254740993",
                       "c IN (9007199254740993)", "c > 9007199254740991"]),
    # A Bloom filter (int64 columns have one) hashed 2**53 for the float, where polars
    # compares 2**53 + 1 as a float, equal to it.
    "int_vs_float": (pa.int64(), 2**53 + 1, [2**53 - 1, 2**53 + 3, 7],
                     ["c = 9.007199254740992e15", "c IN (9.007199254740992e15, 1e0)",
                      "c = 9007199254740993"]),
    "zoned_vs_plain_text": (pa.timestamp("us", tz=NY), _ts("2024-01-01 15:00:00", NY),
                            [_ts("2024-01-01 10:00:00", NY), _ts("2024-01-02 15:00:00", NY),
                             _ts("2023-12-31 15:00:00", NY)],
                            ["c = '2024-01-01 10:00:00'", "c >= '2024-01-01 10:00:00' "
                             "AND c <= '2024-01-01 10:00:00'", "c > '2024-01-01 09:59:59'"
                             " AND c < '2024-01-01 10:00:01'"]),
    "plain_vs_zoned_text": (pa.timestamp("us"), _ts("2024-01-01 09:00:00"),
                            [_ts("2024-01-01 10:00:00"), _ts("2024-01-02 09:00:00"),
                             _ts("2023-12-31 09:00:00")],
                            ["c = '2024-01-01 10:00:00+01:00'",
                             "c <= '2024-01-01 10:00:00+01:00' AND c > '2024-01-01 08:59:00'",
                             "c BETWEEN '2024-01-01 10:00:00+01:00' AND "
                             "'2024-01-01 10:00:00+01:00'"]),
}

#: Read whole (small objects in one GET), and read by ranges with the page index and the
#: Bloom filters (nothing is small).
CONFIGS: dict[str, dict[str, str]] = {
    "whole": {},
    "ranges": {"S3SLICE_SMALL_OBJECT_SIZE": "0", "S3SLICE_STRATEGY": "ranges",
               "S3SLICE_FOOTER_SIZE": "65536"},
}



@pytest.fixture
def lake(s3: S3Env, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Env]:
    yield from fresh_lake(s3, DATA, RESULTS)


def case_table(name: str) -> pa.Table:
    typ, match, others, _ = CASES[name]
    values = [*others[:1], match, *others[1:]]  # the match in row group 1
    column = pa.array([v for v in values for _ in range(GROUP)], typ)
    return pa.table({"id": pa.array(range(len(column)), pa.int64()), "c": column})


def parquet(table: pa.Table, **kw: Any) -> bytes:
    buf = io.BytesIO()
    bloom = {"c": {"ndv": 8, "fpp": 0.01}} if table.schema.field("c").type in (
        pa.uint64(), pa.int64()) else None
    pq.write_table(table, buf, row_group_size=GROUP, write_page_index=True,
                   data_page_size=64, write_batch_size=8, bloom_filter_options=bloom, **kw)
    return buf.getvalue()


def oracle(data: bytes, where: str) -> pl.DataFrame:
    """polars reading every row, then filtering with the same SQL; ISO 8601 text compared
    with a timestamp column written first as docs/sql.md gives its meaning (no offset:
    UTC; an offset: that instant), which polars alone reads otherwise (a zoned column's
    own zone; an offset against a naive column dropped)."""
    frame = pl.read_parquet(data)
    dtype = frame.schema.get("c")
    if isinstance(dtype, pl.Datetime):
        where = _ISO.sub(lambda m: _utc_text(m.group(1), zoned=dtype.time_zone is not None),
                         where)
    return pl.SQLContext(frames={"s3object": frame}).execute(
        f"SELECT * FROM s3object WHERE {where}", eager=True)


_ISO = re.compile(r"'(\d{4}-\d\d-\d\d[ T][^']*)'")


def _utc_text(text: str, *, zoned: bool) -> str:
    value = dt.datetime.fromisoformat(text)
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return f"'{value.isoformat(' ')}+00:00'" if zoned else f"'{value.isoformat(' ')}'"


def answer(s3: S3Env, source: str, query: dict[str, Any]) -> tuple[pl.DataFrame, Any]:
    response = invoke({"source": source, **query, "output": f"s3://{RESULTS}/out/"})
    frames = [pl.read_parquet(s3.get(o["uri"])) for o in response["outputs"]]
    return pl.concat(frames), response


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_constant_is_compared_in_the_columns_own_type(
        lake: S3Env, monkeypatch: pytest.MonkeyPatch, name: str, config: str) -> None:
    configure(monkeypatch, CONFIGS[config])
    data = parquet(case_table(name))
    md = pq.read_metadata(pa.BufferReader(data))
    statistics = md.row_group(1).column(1).statistics
    assert md.num_row_groups == 4 and statistics is not None and statistics.has_min_max
    key = f"in/{name}.parquet"
    lake.client.put_object(Bucket=DATA, Key=key, Body=data)
    for where in CASES[name][3]:
        want = oracle(data, where)
        assert want.height >= GROUP, where  # the row group of the match, at least
        for query in ({"filter": where}, {"sql": f"SELECT * FROM s3object WHERE {where}"}):
            got, _ = answer(lake, f"s3://{DATA}/{key}", query)
            assert got.sort("id").equals(want.sort("id")), (name, config, query)


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_pruning_still_prunes_what_cannot_match(
        lake: S3Env, monkeypatch: pytest.MonkeyPatch, config: str) -> None:
    """The same objects, with constants no row equals: row groups are skipped."""
    configure(monkeypatch, CONFIGS[config])
    for name, where in (("uint64", "c = 18446744073709551613"),
                        ("decimal", "c = 1234567890123.4569"),
                        ("zoned_vs_plain_text", "c = '2024-01-01 11:00:00'")):
        data = parquet(case_table(name))
        key = f"in/{name}.parquet"
        lake.client.put_object(Bucket=DATA, Key=key, Body=data)
        got, response = answer(lake, f"s3://{DATA}/{key}", {"filter": where})
        assert got.height == oracle(data, where).height == 0
        assert response["stats"]["row_groups_read"] == 0, (name, response["stats"])


def test_a_comparison_polars_refuses_is_refused_typed(lake: S3Env) -> None:
    data = parquet(case_table("uint64"))
    lake.client.put_object(Bucket=DATA, Key="in/u.parquet", Body=data)
    with pytest.raises(pl.exceptions.PolarsError):
        oracle(data, "c = 'text'")
    with pytest.raises(QueryError):
        invoke({"source": f"s3://{DATA}/in/u.parquet", "filter": "c = 'text'",
                "return_rows": True})


# ---------------------------------------------------------------------- hive partitions

def put_local(lake: S3Env, root: Path, key: str, table: pa.Table) -> None:
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=2)
    lake.client.put_object(Bucket=DATA, Key=key, Body=buf.getvalue())
    (root / key).parent.mkdir(parents=True, exist_ok=True)
    (root / key).write_bytes(buf.getvalue())


def hive_oracle(root: Path, prefix: str, where: str | None) -> pl.DataFrame:
    lf = pl.scan_parquet(str(root / prefix / "**" / "*.parquet"), hive_partitioning=True)
    frame = lf.collect()
    if where is None:
        return frame
    return pl.SQLContext(frames={"s3object": frame}).execute(
        f"SELECT * FROM s3object WHERE {where}", eager=True)


def same_rows(got: pl.DataFrame, want: pl.DataFrame) -> bool:
    columns = sorted(want.columns)
    return (sorted(got.columns) == columns
            and got.select(columns).sort(columns).equals(want.select(columns).sort(columns)))


@pytest.mark.parametrize("where", [None, "k = 5", "k = 1", "k > 4 AND v >= 20", "k IN (1, 2)"])
def test_a_partition_column_also_in_the_file_is_the_partitions_value(
        lake: S3Env, tmp_path: Path, where: str | None) -> None:
    put_local(lake, tmp_path, "p/k=5/x.parquet",
              pa.table({"k": pa.array([1, 2, 3, 1], pa.int64()), "v": [10, 20, 30, 40]}))
    put_local(lake, tmp_path, "p/k=7/y.parquet",
              pa.table({"k": pa.array([5, 5], pa.int64()), "v": [50, 60]}))
    want = hive_oracle(tmp_path, "p", where)
    query = {} if where is None else {"filter": where}
    got, _ = answer(lake, f"s3://{DATA}/p/", query)
    assert same_rows(got, want), (where, got, want)
    if where == "k = 5":
        assert want.height == 4  # polars and DuckDB: every row of k=5/, none of k=7/


@pytest.mark.parametrize("where", [None, "run = '2024_01_15'", "run > '2024_01_15'"])
def test_partition_values_are_typed_as_polars_types_them(
        lake: S3Env, tmp_path: Path, where: str | None) -> None:
    for run, v in (("2024_01_15", 1), ("2024_01_16", 2)):
        put_local(lake, tmp_path, f"h/run={run}/x.parquet", pa.table({"v": [v]}))
    want = hive_oracle(tmp_path, "h", where)
    assert want.schema["run"] == pl.String
    query = {} if where is None else {"filter": where}
    got, _ = answer(lake, f"s3://{DATA}/h/", query)
    assert got.schema["run"] == pl.String
    assert same_rows(got, want), (where, got, want)


@pytest.mark.parametrize(("values", "where"), [
    (["007", "12"], "n = 7"), (["1.", ".5"], "n < 1"), (["2024-01-15", "2024-02-01"],
                                                        "n = '2024-01-15'"),
    (["+5", "5"], "n = '5'"), (["true", "false"], "n"), (["9999999999999999999", "1"], "n > 1"),
])
def test_partition_types_and_pruning_match_polars(
        lake: S3Env, tmp_path: Path, values: list[str], where: str) -> None:
    for i, value in enumerate(values):
        put_local(lake, tmp_path, f"t/n={value}/x.parquet", pa.table({"v": [i]}))
    want = hive_oracle(tmp_path, "t", where)
    got, _ = answer(lake, f"s3://{DATA}/t/", {"filter": where})
    assert got.schema["n"] == want.schema["n"], values
    assert same_rows(got, want), (values, where, got, want)


@pytest.mark.parametrize(("values", "where"), [
    ([2**53 - 5, 2**53 + 1, 2**53 + 5], "c = 9.007199254740992e15"),  # polars: 2**53 + 1
    ([2**53 - 5, 2**53 + 1, 2**53 + 5], "c IN (9.007199254740992e15)"),
    ([-5, 3, 5], "c = 3.0e0"),
    ([-5, 3, 5], "c = 3"),
])
def test_a_bloom_filter_is_asked_only_for_the_one_value_that_can_match(
        lake: S3Env, monkeypatch: pytest.MonkeyPatch, values: list[int], where: str) -> None:
    """Statistics cannot rule these row groups out (the constant lies between their
    bounds); a Bloom filter hashing the wrong value did, and lost the match."""
    configure(monkeypatch, CONFIGS["ranges"])
    column = pa.array([v + 10 * g for g in range(4) for v in values * 20], pa.int64())
    table = pa.table({"id": pa.array(range(len(column)), pa.int64()), "c": column})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=len(values) * 20,
                   bloom_filter_options={"c": {"ndv": 8, "fpp": 0.01}})
    data = buf.getvalue()
    lake.client.put_object(Bucket=DATA, Key="in/bloom.parquet", Body=data)
    want = oracle(data, where)
    got, response = answer(lake, f"s3://{DATA}/in/bloom.parquet", {"filter": where})
    assert want.height > 0
    assert got.sort("id").equals(want.sort("id")), where
    bloom = response["stats"]["strategy_inputs"]["bloom_filters"]
    assert bloom["used"] is True
    if where == "c = 3":  # exact: the filters rule out the groups without 3
        assert bloom["row_groups_after"] == 1
