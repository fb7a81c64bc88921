"""Partition transforms through the real handler on the local S3 server: tables written by
pyiceberg, each partitioned by one transform of one source type (hour, day and bucket of
a timestamptz; truncate and bucket of a decimal; truncate of negative integers and of
multi-byte strings; bucket of a date), queried with the constants a query writes (naive
and offset texts for a timestamptz, IN lists, BETWEEN). Each answer equals polars' run of
the query over pyiceberg's scan, and the S3 server's requests prove that no data file of
a partition the predicate rules out is opened: which partitions may hold a match is
computed here with pyiceberg's own transforms of the query's bounds."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

from tests.integration.test_iceberg_tables import (
    Warehouse,
    data_gets,
    pyiceberg_rows,
    query,
    same,
    warehouse,  # noqa: F401 - the module's fixture
)
from tests.support import S3Env, invoke

pytestmark = pytest.mark.integration

N = 160
UTC = dt.UTC
BASE = dt.datetime(2024, 1, 1, tzinfo=UTC)
WORDS = ("été", "€uro", "ab", "ñandú", "étagère", "zz", "日本語")


def rows() -> pa.Table:
    """Timestamptz every 37 minutes (about four days), decimals and integers either side
    of zero, multi-byte strings and dates."""
    ids = range(N)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "tz": pa.array([BASE + dt.timedelta(minutes=37 * i) for i in ids],
                       pa.timestamp("us", tz="UTC")),
        "dec": pa.array([decimal.Decimal((i * 37) % 1000 - 500).scaleb(-2) for i in ids],
                        pa.decimal128(9, 2)),
        "n": pa.array([i % 61 - 30 for i in ids], pa.int32()),
        "s": pa.array([f"{WORDS[i % len(WORDS)]}{i % 3}" for i in ids]),
        "d": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=i % 20) for i in ids],
                      pa.date32()),
    })


def transform(name: str) -> Any:
    from pyiceberg import transforms as tr

    kind, _, arg = name.partition("[")
    width = int(arg.rstrip("]")) if arg else 0
    made: dict[str, Callable[[], Any]] = {
        "hour": tr.HourTransform, "day": tr.DayTransform,
        "bucket": lambda: tr.BucketTransform(width),
        "truncate": lambda: tr.TruncateTransform(width)}
    return made[kind]()


def theirs(name: str, table: Any, column: str) -> Callable[[Any], Any]:
    """pyiceberg's transform of a source value of ``column`` (as pyiceberg takes it)."""
    from pyiceberg import types as it

    field = table.schema().find_field(column)
    fn = transform(name).transform(field.field_type)

    def apply(value: Any) -> Any:
        if isinstance(value, dt.datetime):
            value = (value - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(
                microseconds=1)
        elif isinstance(value, dt.date) and isinstance(field.field_type, it.DateType):
            value = (value - dt.date(1970, 1, 1)).days
        out = fn(value)
        return (out - dt.date(1970, 1, 1)).days if isinstance(out, dt.date) else out
    return apply


TABLES: dict[str, tuple[str, str]] = {  # table: (source column, transform)
    "tz_hour": ("tz", "hour"), "tz_day": ("tz", "day"), "tz_bucket": ("tz", "bucket[8]"),
    "dec_truncate": ("dec", "truncate[100]"), "dec_bucket": ("dec", "bucket[8]"),
    "n_truncate": ("n", "truncate[10]"), "s_truncate": ("s", "truncate[2]"),
    "d_bucket": ("d", "bucket[6]"),
}


@pytest.fixture(scope="module")
def tables(warehouse: Warehouse) -> dict[str, Any]:  # noqa: F811
    data = rows()
    made = {}
    for name, (column, how) in TABLES.items():
        table = warehouse.catalog.create_table(f"db.transform_{name}", schema=data.schema)
        with table.update_spec() as spec:
            spec.add_field(column, transform(how), f"p_{column}")
        table.append(data)
        made[name] = table
    return made


def at(text: str) -> dt.datetime:
    """A timestamptz text as polars reads it: naive is UTC, an offset is that instant."""
    value = dt.datetime.fromisoformat(text)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def between(lo: Any, hi: Any) -> Callable[[Any], bool]:
    return lambda p: lo <= p <= hi


def among(*parts: Any) -> Callable[[Any], bool]:
    return lambda p: p in parts


# (table, WHERE, the partitions that may hold a match: from pyiceberg's transform ``f`` of
# the query's bounds; every other partition must stay unopened)
CASES: list[tuple[str, str, Callable[[Callable[[Any], Any]], Callable[[Any], bool]]]] = [
    ("tz_hour", "tz >= '2024-01-02T10:00:00+02:00' AND tz < '2024-01-02 12:00:00'",
     lambda f: between(f(at("2024-01-02T08:00:00")), f(at("2024-01-02T12:00:00")))),
    ("tz_hour", "tz BETWEEN '2024-01-03T01:30:00-05:00' AND '2024-01-03 09:00:00'",
     lambda f: between(f(at("2024-01-03T06:30:00")), f(at("2024-01-03T09:00:00")))),
    ("tz_day", "tz < '2024-01-02T03:00:00+05:00'",  # 2024-01-01 22:00 UTC
     lambda f: between(-(1 << 31), f(at("2024-01-01T22:00:00")))),
    ("tz_day", "tz >= '2024-01-03 00:00:00' OR tz IS NULL",
     lambda f: between(f(at("2024-01-03T00:00:00")), 1 << 31)),
    ("tz_bucket", "tz IN ('2024-01-01T02:37:00+02:00', '2024-01-02 16:42:00')",
     lambda f: among(f(at("2024-01-01T00:37:00")), f(at("2024-01-02T16:42:00")))),
    ("tz_bucket", "tz = '2024-01-03T13:40:00Z'",
     lambda f: among(f(at("2024-01-03T13:40:00")))),
    ("dec_truncate", "dec >= -1.5 AND dec < 0.25",
     lambda f: between(f(decimal.Decimal("-1.50")), f(decimal.Decimal("0.25")))),
    ("dec_truncate", "dec < -3.995",
     lambda f: between(decimal.Decimal("-1E9"), f(decimal.Decimal("-4.00")))),
    ("dec_bucket", "dec = -4.63 OR dec IN (2.0, -0.58)",
     lambda f: among(*(f(decimal.Decimal(v)) for v in ("-4.63", "2.00", "-0.58")))),
    ("n_truncate", "n BETWEEN -25 AND -11", lambda f: between(f(-25), f(-11))),
    ("n_truncate", "n < -20", lambda f: between(-(1 << 31), f(-21))),
    ("s_truncate", "s >= 'été' AND s < 'ñ'", lambda f: between(f("été"), f("ñ"))),
    ("s_truncate", "s IN ('日本語1', '€uro2')", lambda f: among(f("日本語1"), f("€uro2"))),
    ("d_bucket", "d IN ('2024-01-05', DATE '2024-01-09')",
     lambda f: among(f(dt.date(2024, 1, 5)), f(dt.date(2024, 1, 9)))),
]


@pytest.mark.parametrize(("name", "where", "may_hold"), CASES,
                         ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_a_ruled_out_partition_is_never_opened_and_answers_equal_pyiceberg(
        s3: S3Env, tables: dict[str, Any], name: str, where: str,
        may_hold: Callable[[Callable[[Any], Any]], Callable[[Any], bool]]) -> None:
    table = tables[name]
    column, how = TABLES[name]
    sql = f"SELECT id, {column} FROM s3object WHERE {where}"
    got, stats = query(table, sql)
    opened = {p.rpartition("/")[2] for p in data_gets(s3)}
    # (rechunked: polars 2.1 writes a frame whose first chunks are empty as "[]" JSON)
    want = pl.SQLContext(s3object=pyiceberg_rows(table)).execute(sql, eager=True).rechunk()
    same(got, want, ordered=False)
    assert want.height > 0

    allowed = may_hold(theirs(how, table, column))
    files = table.inspect.files()
    parts = [(p - dt.date(1970, 1, 1)).days if isinstance(p, dt.date) else p  # a day
             for p in (r[f"p_{column}"] for r in files["partition"].to_pylist())]
    names = [p.rpartition("/")[2] for p in files["file_path"].to_pylist()]
    ruled_out = {n for n, p in zip(names, parts, strict=True) if not allowed(p)}
    # the query rules some partitions out, and none of their files was opened
    assert ruled_out and not opened & ruled_out, (sorted(opened & ruled_out), parts)
    # every file of a partition holding a match was opened (or pruned by its bounds)
    matching = {theirs(how, table, column)(v) for v in want[column].to_list()}
    holding = {n for n, p in zip(names, parts, strict=True) if p in matching}
    assert holding <= opened
    counts = stats["iceberg"]
    assert counts["data_files"] == len(names)
    assert counts["files_pruned_by_partition"] >= len(ruled_out)
    assert len(opened) == stats["objects"] == len(names) - counts[
        "files_pruned_by_partition"] - counts["files_pruned_by_bounds"]


def test_a_timestamp_literal_on_a_timestamptz_column_means_utc_as_without_a_table(
        s3: S3Env, tables: dict[str, Any]) -> None:
    # A zone-less TIMESTAMP against a timestamptz column means UTC (docs/sql.md): on the
    # table and on one of its data files read as a Parquet object alike, equal to the
    # rows' instants compared in Python.
    table = tables["tz_hour"]
    sql = "SELECT id FROM s3object WHERE tz >= TIMESTAMP '2024-01-03 00:00:00'"
    got, _ = query(table, sql)
    data = rows()
    cut = dt.datetime(2024, 1, 3, tzinfo=UTC)
    want = sorted(i for i, t in zip(data["id"].to_pylist(), data["tz"].to_pylist(),
                                    strict=True) if t >= cut)
    assert sorted(got["id"].to_list()) == want and want
    path = table.inspect.files()["file_path"].to_pylist()[0]
    plain = invoke({"source": path, "sql": sql, "return_rows": True})["rows"]
    in_file = pl.read_parquet(s3.get(path))
    assert sorted(r["id"] for r in plain) == sorted(
        i for i, t in zip(in_file["id"], in_file["tz"], strict=True) if t >= cut)


def test_time_functions_on_a_timestamptz_column_mean_what_they_mean_on_parquet(
        s3: S3Env, tables: dict[str, Any]) -> None:
    # S3 Select's time functions over Iceberg's timestamptz (UTC): TO_STRING with its
    # offset, EXTRACT, DATE_DIFF, DATE_ADD and TO_TIMESTAMP literals answer as Python's
    # datetime does, on the table and on one of its data files read as a Parquet object.
    table = tables["tz_day"]
    sql = ("SELECT id, TO_STRING(tz, 'yyyy-MM-dd''T''HH:mmXXX') AS t, "
           "EXTRACT(HOUR FROM tz) AS h, EXTRACT(TIMEZONE_HOUR FROM tz) AS th, "
           "DATE_DIFF(minute, tz, TO_TIMESTAMP('2024-01-03T00:00:00+01:00')) AS m "
           "FROM s3object WHERE DATE_ADD(hour, 2, tz) >= TO_TIMESTAMP('2024-01-02T12:00Z') "
           "AND tz < UTCNOW()")
    cut = dt.datetime(2024, 1, 2, 10, tzinfo=UTC)
    ref = dt.datetime(2024, 1, 2, 23, tzinfo=UTC)
    data = rows()
    want = {i: {"id": i, "t": f"{t:%Y-%m-%dT%H:%M}Z", "h": t.hour, "th": 0,
                "m": int((ref - t).total_seconds() / 60)}
            for i, t in zip(data["id"].to_pylist(), data["tz"].to_pylist(), strict=True)
            if t >= cut}
    got, _ = query(table, sql)
    assert sorted(got.to_dicts(), key=lambda r: r["id"]) == [want[i] for i in sorted(want)]
    for path in table.inspect.files()["file_path"].to_pylist()[:2]:
        plain = invoke({"source": path, "sql": sql, "return_rows": True})["rows"]
        in_file = pl.read_parquet(s3.get(path))["id"].to_list()
        assert sorted(plain, key=lambda r: r["id"]) == [want[i] for i in sorted(in_file)
                                                        if i in want]
