"""The SQL semantics docs/sql.md's table states, through the real handler on the local S3
server, each against an oracle (polars expressions in memory, DuckDB, Python):

- time: a zone-less timestamp literal (``TO_TIMESTAMP`` without offset, ``UTCNOW()``,
  ``CAST('…' AS TIMESTAMP)``) against a zoned column means UTC, at every unit and zone,
  with row groups still pruned and the answer exact;
- a text column compared with a number compares numbers (every operator, ``IN``); a value
  that is no number is a ``QueryError`` naming the column, never an empty answer;
- ``ORDER BY`` puts nulls last, ascending and descending, on one object, many objects, an
  S3 Select request and a workflow's map and reduce; ``NULLS FIRST`` is accepted;
- ``IN (SELECT … FROM s3object)`` runs; ``LIMIT 2**32`` (and beyond) is every row;
- ``CAST(decimal AS INT)`` truncates toward zero, as S3 Select (MinIO) does.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
from collections.abc import Iterator
from typing import Any, Literal

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3slice import QueryError
from s3slice.entry import dispatch as _entry
from tests.support import S3Env, invoke

pytestmark = pytest.mark.integration

DATA, RESULTS = "semantics-data", "semantics-results"
UTC = dt.UTC
TimeUnit = Literal["ns", "us", "ms"]
#: The instant the literals name: 2024-06-01T00:00:00Z.
BOUNDARY = dt.datetime(2024, 6, 1, tzinfo=UTC)


@pytest.fixture
def lake(s3: S3Env) -> Iterator[S3Env]:
    for bucket in (DATA, RESULTS):
        s3.empty_bucket(bucket)
    _entry.reset()
    yield s3
    _entry.reset()


def put(s3: S3Env, key: str, table: pa.Table, row_group_size: int | None = None) -> str:
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=row_group_size)
    s3.client.put_object(Bucket=DATA, Key=key, Body=sink.getvalue())
    return f"s3://{DATA}/{key}"


def rows(response: dict[str, Any]) -> list[dict[str, Any]]:
    return list(response["rows"])


def duck(table: pa.Table, sql: str) -> list[tuple[Any, ...]]:
    """DuckDB's answer to ``sql`` over ``table`` (as ``t``), its time zone UTC."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("t", table)
    return con.execute(sql).fetchall()


# ------------------------------------------------------------------------------ time
def instants() -> list[dt.datetime | None]:
    """Hourly instants around the boundary, and a null."""
    out: list[dt.datetime | None] = [BOUNDARY + dt.timedelta(hours=h) for h in range(-20, 20)]
    out.insert(7, None)
    return out


def zoned_frame(unit: TimeUnit, zone: str | None) -> pl.DataFrame:
    """The instants in ``unit`` and ``zone`` (None: naive UTC wall times); at nanoseconds
    also 500 ns either side of the boundary, which a comparison at microseconds gets
    wrong."""
    values = instants()
    series = pl.Series("ts", values, dtype=pl.Datetime(unit, "UTC"))
    if unit == "ns":
        near = pl.Series("ts", [BOUNDARY, BOUNDARY], dtype=pl.Datetime("ns", "UTC"))
        series = series.append(near.dt.offset_by("-500ns")).append(near[:1].dt.offset_by(
            "500ns"))
    series = series.dt.convert_time_zone(zone) if zone else series.dt.replace_time_zone(None)
    return pl.DataFrame({"i": range(series.len()), "ts": series})


ZONES = [None, "UTC", "Europe/Paris", "America/New_York"]
HOUR = 3_600 * 10**9
#: (SQL condition, the same over the instants' nanoseconds since the epoch, UTC)
TIME_FILTERS: list[tuple[str, Any]] = [
    ("ts >= TO_TIMESTAMP('2024-06-01T00:00:00Z')", lambda c, b: c >= b),
    ("ts > TO_TIMESTAMP('2024-06-01T02:00:00+02:00')", lambda c, b: c > b),
    ("ts < CAST('2024-06-01 00:00:00' AS TIMESTAMP)", lambda c, b: c < b),
    ("ts BETWEEN TO_TIMESTAMP('2024-06-01T') AND TO_TIMESTAMP('2024-06-01T05:00Z')",
     lambda c, b: c.is_between(b, b + 5 * HOUR)),
    ("ts IN (TO_TIMESTAMP('2024-06-01T00:00:00Z'), TO_TIMESTAMP('2024-06-01T03:00Z'))",
     lambda c, b: c.is_in([b, b + 3 * HOUR])),
    ("DATE_ADD(hour, 2, ts) >= TO_TIMESTAMP('2024-06-01T00:00:00Z')",
     lambda c, b: c >= b - 2 * HOUR),
    ("ts <= UTCNOW()", lambda c, b: c <= dt.datetime.now(UTC).timestamp() * 10**9),
    # ISO 8601 text compared with a timestamp column: the same rule
    ("ts >= '2024-06-01 00:00:00'", lambda c, b: c >= b),
    ("ts < '2024-06-01T03:00:00+02:00'", lambda c, b: c < b + HOUR),
    ("ts BETWEEN '2024-05-31T23:00:00-01:00' AND '2024-06-01T04:00Z'",
     lambda c, b: c.is_between(b, b + 4 * HOUR)),
    ("ts IN ('2024-06-01', '2024-06-01T05:00:00+00:00')",
     lambda c, b: c.is_in([b, b + 5 * HOUR])),
]


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("unit", ["ns", "us", "ms"])
def test_zone_less_literals_mean_utc_and_still_prune(lake: S3Env, unit: TimeUnit,
                                                     zone: str | None) -> None:
    frame = zoned_frame(unit, zone)
    uri = put(lake, f"time/{unit}-{zone}.parquet".replace("/", "_", 1), frame.to_arrow(),
              row_group_size=5)
    # The oracle: the instants as nanoseconds since the epoch (a naive value's wall time
    # read as UTC), compared as integers.
    nanos = pl.col("ts").dt.epoch("ns")
    boundary = int(BOUNDARY.timestamp()) * 10**9
    for condition, expr in TIME_FILTERS:
        want = frame.filter(expr(nanos, boundary))["i"].to_list()
        for query in ({"sql": f"SELECT i FROM s3object WHERE {condition}"},
                      {"filter": condition, "columns": ["i"]}):
            response = invoke({"source": uri, **query, "return_rows": True})
            assert [r["i"] for r in rows(response)] == want, (condition, query)
        if condition.startswith("ts >="):  # a selective filter still prunes
            assert response["stats"]["row_groups_read"] < response["stats"]["row_groups"]


@pytest.mark.parametrize("zone", ZONES)
def test_time_functions_over_zoned_columns(lake: S3Env, zone: str | None) -> None:
    frame = zoned_frame("us", zone)
    uri = put(lake, f"time/functions-{zone}.parquet".replace("/", "_", 1), frame.to_arrow())
    sql = ("SELECT i, EXTRACT(HOUR FROM ts) AS h, DATE_ADD(day, 1, ts) AS later, "
           "DATE_DIFF(hour, ts, TO_TIMESTAMP('2024-06-02T00:00:00Z')) AS left_h "
           "FROM s3object ORDER BY i")
    got = pl.DataFrame(rows(invoke({"source": uri, "sql": sql, "return_rows": True})))
    ts = frame["ts"]
    # EXTRACT reads the column's own wall time (S3 Select: the timestamp's own offset);
    # DATE_DIFF counts elapsed hours between instants, the literal being UTC.
    aware = ts.dt.replace_time_zone("UTC") if zone is None else ts
    want_hours = (pl.Series([dt.datetime(2024, 6, 2, tzinfo=UTC)] * ts.len())
                  .dt.convert_time_zone(zone or "UTC") - aware).dt.total_hours().to_list()
    assert got["h"].to_list() == ts.dt.hour().to_list()
    assert got["left_h"].to_list() == want_hours
    later = [None if v is None else dt.datetime.fromisoformat(v) for v in got["later"]]
    want_later = (ts.dt.offset_by("1d")).to_list()
    assert later == want_later


# ------------------------------------------------------------------ text and numbers
def test_a_text_column_compared_with_a_number_compares_numbers(lake: S3Env) -> None:
    table = pa.table({"i": [1, 2, 3, 4], "qty": ["10", "25", None, "7"]})
    uri = put(lake, "types/numeric-text.parquet", table)
    for condition in ("qty = 10", "qty <> 10", "qty > 8", "qty <= 10", "qty IN (7, 25)",
                      "qty BETWEEN 8 AND 30", "qty > 8.5", "qty = 10.0", "9 < qty"):
        # DuckDB casts text to a number for = and IN and asks for the cast for <, >,
        # BETWEEN: it runs the comparison of numbers explicitly.
        typed = condition.replace("qty", "CAST(qty AS DOUBLE)")
        want = [r[0] for r in duck(table, f"SELECT i FROM t WHERE {typed} ORDER BY i")]
        for query in ({"sql": f"SELECT i FROM s3object WHERE {condition}"},
                      {"filter": condition, "columns": ["i"]}):
            got = [r["i"] for r in rows(invoke({"source": uri, **query, "return_rows": True}))]
            assert got == want, (condition, query)


@pytest.mark.parametrize("condition", ["region = 5", "region > 5", "region <> 5",
                                       "region IN (5, 6)", "region BETWEEN 1 AND 9",
                                       "5 < region"])
def test_a_text_that_is_no_number_is_a_query_error_never_an_empty_answer(
        lake: S3Env, condition: str) -> None:
    uri = put(lake, "types/text.parquet", pa.table({"region": ["north", "5", None]}))
    with pytest.raises(duckdb.Error):  # DuckDB refuses it too (convert or cast)
        duckdb.sql("SELECT * FROM (VALUES ('north'), ('5')) t(region) "
                   f"WHERE {condition}").fetchall()
    for query in ({"sql": f"SELECT * FROM s3object WHERE {condition}"},
                  {"filter": condition}):
        with pytest.raises(QueryError, match=r"text column 'region' holds \[\"north\"\], "
                                             r"which is not a number"):
            invoke({"source": uri, **query, "return_rows": True})
    assert lake.keys(RESULTS) == []


def test_s3_select_over_csv_compares_text_with_numbers(lake: S3Env) -> None:
    """S3 Select (MinIO: tests/integration/test_minio_select.py) converts CSV text to a
    number for ``>`` as for ``=``; it was an ObjectFormatError here."""
    body = b"id,qty\n1,10\n2,25\n3,7\n"
    lake.client.put_object(Bucket=DATA, Key="t.csv", Body=body)
    for condition, want in (("s.qty > 8", ["1", "2"]), ("s.qty = 7", ["3"]),
                            ("s.qty IN (7, 10)", ["1", "3"])):
        response = invoke({"Bucket": DATA, "Key": "t.csv", "ExpressionType": "SQL",
                           "Expression": f"SELECT s.id FROM S3Object s WHERE {condition}",
                           "InputSerialization": {"CSV": {"FileHeaderInfo": "USE"}},
                           "OutputSerialization": {"CSV": {}}})
        assert response["Payload"].split() == want, condition


# ------------------------------------------------------------------------ NULL order
NULLS = pa.table({"i": list(range(12)), "x": [5, None, 3, 9, None, 1, 7, None, 2, 8, 4, 6]})
ORDERS = ["x DESC", "x", "x ASC NULLS FIRST", "x DESC NULLS FIRST", "x DESC NULLS LAST"]


def duck_order(table: pa.Table, order: str, limit: int) -> list[Any]:
    return [r[0] for r in duck(table, f"SELECT x FROM t ORDER BY {order}, i LIMIT {limit}")]


@pytest.mark.parametrize("order", ORDERS)
def test_nulls_sort_last_unless_asked_first(lake: S3Env, order: str) -> None:
    one = put(lake, "order/one.parquet", NULLS, row_group_size=4)
    put(lake, "order/many/a.parquet", NULLS.slice(0, 6))
    put(lake, "order/many/b.parquet", NULLS.slice(6))
    sql = f"SELECT x FROM s3object ORDER BY {order}, i LIMIT 4"
    want = duck_order(NULLS, order, 4)
    none = [v is None for v in want]
    assert none == ([True] * 3 + [False] if "FIRST" in order else [False] * 4)
    for source in (one, f"s3://{DATA}/order/many/"):
        got = [r["x"] for r in rows(invoke({"source": source, "sql": sql,
                                            "return_rows": True}))]
        assert got == want, source
    # an S3 Select request over Parquet
    response = invoke({"Bucket": DATA, "Key": "order/one.parquet", "ExpressionType": "SQL",
                       "Expression": sql, "InputSerialization": {"Parquet": {}},
                       "OutputSerialization": {"CSV": {}}})
    assert response["Payload"].split("\n")[:-1] == ["" if v is None else str(v) for v in want]


def test_a_workflow_reduce_keeps_nulls_last(lake: S3Env) -> None:
    for k in range(3):
        put(lake, f"order/run/part-{k}.parquet", NULLS.slice(4 * k, 4))
    sql = "SELECT i, x FROM s3object ORDER BY x DESC, i LIMIT 5"
    listed = lake.client.list_objects_v2(Bucket=DATA, Prefix="order/run/")["Contents"]
    items = [{"Key": o["Key"], "Size": o["Size"], "Etag": o["ETag"]} for o in listed]
    output = f"s3://{RESULTS}/out/"
    events = [{"Items": items[i:i + 2], "BatchInput": {"bucket": DATA, "query": {"sql": sql},
                                                       "output": output, "run": "nulls"}}
              for i in range(0, len(items), 2)]
    for event in events:
        invoke(event)
    response = invoke({"Reduce": {"run": "nulls", "query": {"sql": sql}, "output": output,
                                  "batches": len(events)}})
    got = pl.read_parquet(lake.get(response["outputs"][0]["uri"]))["x"].to_list()
    assert got == duck_order(NULLS, "x DESC", 5)


# ------------------------------------------------------------- subqueries and LIMIT
SUBQUERIES = [
    "SELECT i FROM s3object WHERE x IN (SELECT x FROM s3object WHERE i < 4) ORDER BY i",
    "SELECT i FROM s3object s WHERE s.x IN (SELECT t.x FROM S3Object t WHERE t.x > 6) "
    "OR s.i = 0 ORDER BY i",
    "SELECT i FROM s3object WHERE x > (SELECT AVG(x) FROM s3object) AND i > 2 ORDER BY i",
    "SELECT i, (SELECT MAX(x) FROM s3object) AS m FROM s3object WHERE i < 3 ORDER BY i",
]


@pytest.mark.parametrize("sql", SUBQUERIES)
def test_subqueries_over_s3object_read_it_whole(lake: S3Env, sql: str) -> None:
    one = put(lake, "sub/one.parquet", NULLS, row_group_size=4)
    put(lake, "sub/many/a.parquet", NULLS.slice(0, 5))
    put(lake, "sub/many/b.parquet", NULLS.slice(5))
    want = duck(NULLS, sql.replace("S3Object", "t").replace("s3object", "t"))
    for source in (one, f"s3://{DATA}/sub/many/"):
        got = [tuple(r.values()) for r in rows(invoke({"source": source, "sql": sql,
                                                       "return_rows": True}))]
        assert got == want, source


def test_a_subquery_still_reads_only_s3object(lake: S3Env) -> None:
    from s3slice import ForbiddenQueryError
    uri = put(lake, "sub/x.parquet", NULLS)
    with pytest.raises(ForbiddenQueryError, match="table 'other' is not allowed"):
        invoke({"source": uri, "sql": "SELECT i FROM s3object WHERE x IN "
                "(SELECT x FROM other)", "return_rows": True})


@pytest.mark.parametrize("limit", [2**32, 2**32 + 1, 2**64, 10**30])
def test_a_limit_of_2_to_the_32_or_more_is_every_row(lake: S3Env, limit: int) -> None:
    uri = put(lake, "limit/x.parquet", NULLS)
    for sql in (f"SELECT i FROM s3object LIMIT {limit}",
                f"SELECT i FROM s3object ORDER BY i DESC LIMIT {limit}"):
        got = [r["i"] for r in rows(invoke({"source": uri, "sql": sql, "return_rows": True}))]
        assert sorted(got) == list(range(12))


# --------------------------------------------------------------------------- CAST
def test_cast_of_a_decimal_to_int_truncates_toward_zero(lake: S3Env) -> None:
    """S3 Select's rule (MinIO: CAST(2.5 AS INT) is 2, CAST(-2.5 AS INT) -2), and polars'
    and Spark's; DuckDB and Trino round half away from zero instead (asserted, so the
    documented difference cannot go stale)."""
    values = [decimal.Decimal(v) for v in ("1.5", "-2.5", "2.4", "-0.7", "3.99")]
    uri = put(lake, "cast/d.parquet", pa.table({"d": pa.array(values, pa.decimal128(5, 2))}))
    got = [r["n"] for r in rows(invoke({"source": uri, "sql": "SELECT CAST(d AS INT) AS n "
                                        "FROM s3object", "return_rows": True}))]
    assert got == [int(v) for v in values]  # Python's int() truncates toward zero
    duck = [r[0] for r in duckdb.sql("SELECT CAST(d AS INTEGER) FROM (VALUES (1.5::DECIMAL(5,2)"
                                     "), (-2.5::DECIMAL(5,2))) t(d)").fetchall()]
    assert duck == [2, -3]
