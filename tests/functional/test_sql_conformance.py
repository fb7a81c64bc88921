"""The SQL dialect, construct by construct: each query through the engine (with pruning and
range reads) against an independent oracle, a direct polars expression on the same data.

Also the bad-query table: each malformed or forbidden query and the error type it gets,
raised before any byte of data is read.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

from s3slice import (
    Engine,
    FilterSyntaxError,
    FooterCache,
    ForbiddenQueryError,
    LocalFetcher,
    QueryError,
    RecordingFetcher,
    RequestError,
    S3SliceError,
    Settings,
    UnknownColumnError,
)
from tests.integration.iceberg_warehouse import conformance_frame
from tests.support import read_request

BUCKET = "data"
SOURCE = f"s3://{BUCKET}/t.parquet"


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return conformance_frame()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, table: pl.DataFrame) -> Path:
    root = tmp_path_factory.mktemp("sql")
    (root / BUCKET).mkdir()
    table.write_parquet(root / BUCKET / "t.parquet", row_group_size=250)
    return root


def run(root: Path, sql: str) -> tuple[pl.DataFrame, RecordingFetcher]:
    fetcher = RecordingFetcher(LocalFetcher(root))
    engine = Engine(Settings(memory_mb=2048), fetcher=fetcher, footer_cache=FooterCache(1 << 20))
    return read_request(engine, {"source": SOURCE, "sql": sql}).frame, fetcher


c = pl.col
Oracle = Callable[[pl.DataFrame], pl.DataFrame]
S3 = "FROM S3Object s"

CASES: list[tuple[str, str, Oracle]] = [
    ("select list and aliases", f"SELECT s.id AS ident, s.amount * 2 AS twice {S3}",
     lambda t: t.select(c("id").alias("ident"), (c("amount") * 2).alias("twice"))),
    ("star", f"SELECT * {S3} WHERE s.id < 3", lambda t: t.filter(c("id") < 3)),
    ("quoted column", f'SELECT s."quoted col" {S3} WHERE s."quoted col" = 2',
     lambda t: t.filter(c("quoted col") == 2).select("quoted col")),
    ("lower-case from", "SELECT id FROM s3object WHERE id >= 1990",
     lambda t: t.filter(c("id") >= 1990).select("id")),
    ("comparisons", f"SELECT id {S3} WHERE s.amount > 100 AND s.amount <= 120 AND id <> 5",
     lambda t: t.filter((c("amount") > 100) & (c("amount") <= 120) & (c("id") != 5))
     .select("id")),
    ("or and not", f"SELECT id {S3} WHERE NOT (s.id > 10) OR s.id = 1999",
     lambda t: t.filter(~(c("id") > 10) | (c("id") == 1999)).select("id")),
    ("between", f"SELECT id {S3} WHERE s.id BETWEEN 100 AND 110",
     lambda t: t.filter(c("id").is_between(100, 110)).select("id")),
    ("in", f"SELECT id {S3} WHERE s.qty IN (1, 11)",
     lambda t: t.filter(c("qty").is_in([1, 11])).select("id")),
    ("like", f"SELECT id {S3} WHERE s.name LIKE '% bob%'",
     lambda t: t.filter(c("name").str.starts_with(" bob")).select("id")),
    ("is null", f"SELECT id {S3} WHERE s.name IS NULL",
     lambda t: t.filter(c("name").is_null()).select("id")),
    ("is not null", f"SELECT COUNT(*) AS n {S3} WHERE s.qty IS NOT NULL",
     lambda t: t.select(c("qty").is_not_null().sum().cast(pl.UInt32).alias("n"))),
    ("cast", f"SELECT CAST(s.amount AS INT) AS a {S3} WHERE CAST(s.qty AS VARCHAR) = '3'",
     lambda t: t.filter(c("qty") == 3).select(c("amount").cast(pl.Int32).alias("a"))),
    ("arithmetic", f"SELECT (s.id + 1) * 2 - s.qty / 2.0 AS x {S3}",
     lambda t: t.select(((c("id") + 1) * 2 - c("qty") / 2.0).alias("x"))),
    ("case", f"SELECT CASE WHEN s.amount > 250 THEN 'hi' ELSE 'lo' END AS band {S3}",
     lambda t: t.select(pl.when(c("amount") > 250).then(pl.lit("hi")).otherwise(pl.lit("lo"))
                        .alias("band"))),
    ("coalesce and nullif", f"SELECT COALESCE(s.qty, -1) AS q, NULLIF(s.qty, 0) AS z {S3}",
     lambda t: t.select(c("qty").fill_null(-1).alias("q"),
                        pl.when(c("qty") == 0).then(None).otherwise(c("qty")).alias("z"))),
    ("lower upper trim", f"SELECT LOWER(s.name) AS l, UPPER(s.name) AS u, TRIM(s.name) AS t {S3}",
     lambda t: t.select(c("name").str.to_lowercase().alias("l"),
                        c("name").str.to_uppercase().alias("u"),
                        c("name").str.strip_chars(" ").alias("t"))),
    ("trim both from", f"SELECT TRIM(BOTH ' ' FROM s.name) AS t {S3}",
     lambda t: t.select(c("name").str.strip_chars(" ").alias("t"))),
    ("substring",
     f"SELECT SUBSTRING(s.name FROM 2 FOR 3) AS a, SUBSTRING(s.name, 2, 3) AS b {S3}",
     lambda t: t.select(c("name").str.slice(1, 3).alias("a"),
                        c("name").str.slice(1, 3).alias("b"))),
    ("char_length", f"SELECT CHAR_LENGTH(s.name) AS n, CHARACTER_LENGTH(s.name) AS m {S3}",
     lambda t: t.select(c("name").str.len_chars().alias("n"),
                        c("name").str.len_chars().alias("m"))),
    ("extract", f"SELECT EXTRACT(YEAR FROM s.ts) AS y, EXTRACT(MONTH FROM s.ts) AS m, "
     f"EXTRACT(HOUR FROM s.ts) AS h {S3}",
     lambda t: t.select(c("ts").dt.year().alias("y"), c("ts").dt.month().alias("m"),
                        c("ts").dt.hour().alias("h"))),
    ("date_add", f"SELECT DATE_ADD(day, 3, s.ts) AS d, DATE_ADD(month, -2, s.ts) AS m, "
     f"DATE_ADD(hour, s.qty, s.ts) AS h {S3}",
     lambda t: t.select(c("ts").dt.offset_by("3d").alias("d"),
                        c("ts").dt.offset_by("-2mo").alias("m"),
                        (c("ts") + pl.duration(hours=c("qty"))).alias("h"))),
    ("date_diff", f"SELECT DATE_DIFF(day, TO_TIMESTAMP('2024-01-01T'), s.ts) AS d, "
     f"DATE_DIFF(month, TO_TIMESTAMP('2024-01-01T'), s.ts) AS m, "
     f"DATE_DIFF(year, TO_TIMESTAMP('2023-06-01T'), s.ts) AS y {S3}",
     lambda t: t.select(
         ((c("ts") - dt.datetime(2024, 1, 1)).dt.total_seconds() // 86400).alias("d"),
         ((c("ts").dt.year() - 2024) * 12 + c("ts").dt.month() - 1).alias("m"),
         # whole years, as S3 Select (MinIO) counts them: the anniversary reached
         pl.when(c("ts") >= dt.datetime(2023, 6, 1))
         .then(c("ts").dt.year() - 2023 - (c("ts").dt.month().cast(pl.Int32) * 100
                                           + c("ts").dt.day() < 601).cast(pl.Int32))
         .otherwise(c("ts").dt.year() - 2023 + (c("ts").dt.month().cast(pl.Int32) * 100
                                                + c("ts").dt.day() > 601).cast(pl.Int32))
         .alias("y"))),
    ("to_timestamp constant prunes",
     f"SELECT id {S3} WHERE s.ts >= TO_TIMESTAMP('2024-06-01T') "
     f"AND s.ts < TO_TIMESTAMP('2024-06-02T00:00:00Z')",
     lambda t: t.filter(c("ts").is_between(dt.datetime(2024, 6, 1), dt.datetime(2024, 6, 2),
                                           closed="left")).select("id")),
    ("utcnow", f"SELECT COUNT(*) AS n {S3} WHERE s.ts < UTCNOW()",
     lambda t: t.select(pl.len().cast(pl.UInt32).alias("n"))),
    ("dates and decimals", f"SELECT id {S3} WHERE s.day = CAST('2024-02-01' AS DATE) "
     f"AND s.price > 5",
     lambda t: t.filter((c("day") == dt.date(2024, 2, 1)) & (c("price") > 5)).select("id")),
    ("aggregates", f"SELECT COUNT(*) AS n, COUNT(s.qty) AS q, SUM(s.qty) AS total, "
     f"AVG(s.amount) AS mean, MIN(s.ts) AS first, MAX(s.name) AS last {S3}",
     lambda t: t.select(pl.len().cast(pl.UInt32).alias("n"),
                        c("qty").count().cast(pl.UInt32).alias("q"),
                        c("qty").sum().alias("total"), c("amount").mean().alias("mean"),
                        c("ts").min().alias("first"), c("name").max().alias("last"))),
    ("limit", f"SELECT id {S3} WHERE s.id > 100 LIMIT 7",
     lambda t: t.filter(c("id") > 100).select("id").head(7)),
    ("group by having order by",
     "SELECT s.qty, COUNT(*) AS n FROM S3Object s WHERE s.qty IS NOT NULL "
     "GROUP BY s.qty HAVING COUNT(*) > 100 ORDER BY n DESC, s.qty",
     lambda t: t.filter(c("qty").is_not_null()).group_by("qty")
     .agg(pl.len().cast(pl.UInt32).alias("n")).filter(c("n") > 100).sort(
         ["n", "qty"], descending=[True, False])),
    # An alias may reuse the name of a column the query reads; WHERE sees the source's
    # column, as in standard SQL.
    ("alias reuses an aggregated column", "SELECT SUM(qty) AS qty FROM s3object",
     lambda t: t.select(c("qty").sum())),
    ("alias reuses a minimum's column", "SELECT MIN(amount) AS amount FROM s3object",
     lambda t: t.select(c("amount").min())),
    ("alias reuses its expression's column", "SELECT qty + 1 AS qty, amount FROM s3object",
     lambda t: t.select((c("qty") + 1).alias("qty"), "amount")),
    ("where sees the source column, not the alias",
     "SELECT id, amount AS qty FROM s3object WHERE qty > 5",
     lambda t: t.filter(c("qty") > 5).select("id", c("amount").alias("qty"))),
    ("alias reuse with qualified names and order by the alias",
     f"SELECT s.qty, SUM(s.id) AS id {S3} WHERE s.id > 100 AND s.qty IS NOT NULL "
     "GROUP BY s.qty ORDER BY id DESC, s.qty",
     lambda t: t.filter((c("id") > 100) & c("qty").is_not_null()).group_by("qty")
     .agg(c("id").sum()).sort(["id", "qty"], descending=[True, False])),
]


@pytest.mark.parametrize(("name", "sql", "expected"), CASES, ids=[c[0] for c in CASES])
def test_construct_matches_the_oracle(root: Path, table: pl.DataFrame, name: str, sql: str,
                                      expected: Oracle) -> None:
    got, _ = run(root, sql)
    want = expected(table)
    assert got.columns == want.columns
    ordered = "ORDER BY" in sql or "LIMIT" in sql
    if not ordered:
        got, want = got.sort(got.columns, nulls_last=True), want.sort(want.columns,
                                                                      nulls_last=True)
    assert got.to_dict(as_series=False) == want.cast(got.schema).to_dict(  # type: ignore[arg-type]
        as_series=False), name


ALIAS_REUSE = [case for case in CASES if case[0].startswith(("alias", "where sees"))]


@pytest.mark.parametrize(("name", "sql", "expected"), ALIAS_REUSE, ids=[c[0] for c in ALIAS_REUSE])
def test_alias_reuse_oracle_is_standard_sql(table: pl.DataFrame, name: str, sql: str,
                                            expected: Oracle) -> None:
    """The oracle of the alias-reuse cases is itself checked against an independent SQL
    engine (SQLite, where WHERE resolves a name to the source column first): the
    engine is held to the standard answer, whatever polars SQL would resolve."""
    rows = table.select("id", "qty", "amount")
    with contextlib.closing(sqlite3.connect(":memory:")) as db:
        db.execute("CREATE TABLE s3object (id INTEGER, qty INTEGER, amount REAL)")
        db.executemany("INSERT INTO s3object VALUES (?, ?, ?)", rows.rows())
        cursor = db.execute(sql)
        names = [d[0] for d in cursor.description]
        got = [tuple(r) for r in cursor.fetchall()]
    want = expected(table)
    assert names == want.columns
    want_rows = [tuple(r) for r in want.rows()]
    if "ORDER BY" not in sql:
        got, want_rows = sorted(got, key=repr), sorted(want_rows, key=repr)
    assert len(got) == len(want_rows)
    for g, w in zip(got, want_rows, strict=True):
        assert g == pytest.approx(w), name


def test_an_aliased_source_column_is_fetched_once_and_only_it(root: Path) -> None:
    got, fetcher = run(root, "SELECT id, amount AS qty FROM s3object WHERE qty > 5 "
                             "AND id < 250")
    assert got.columns == ["id", "qty"]
    assert got.height > 0
    # One row group of eight can hold id < 250; id, amount and qty are fetched, nothing else.
    assert 0 < sum(b - a for a, b in fetcher.ranges()) < 6_000


def test_a_parse_error_is_plain_text_naming_the_token(root: Path) -> None:
    engine = Engine(Settings(memory_mb=2048), fetcher=LocalFetcher(root))
    for request in ({"sql": "SELEC id FROM s3object"}, {"filter": "id >"}):
        with pytest.raises(FilterSyntaxError) as info:
            read_request(engine, {"source": SOURCE, **request})
        message = info.value.message
        assert "\x1b" not in message and "\n" not in message, message
        assert message.startswith(("sql: cannot parse", "filter: cannot parse")), message
    with pytest.raises(FilterSyntaxError, match="ParseUnexpectedToken: unexpected 'FROM'"):
        read_request(engine, {"source": SOURCE, "sql": "SELEC id FROM s3object"})


@pytest.mark.parametrize("request_", [
    {"sql": "SELECT id FROM s3object WHERE TO_TIMESTAMP(ts) < TO_TIMESTAMP('2024-03-01T')"},
    {"sql": "SELECT s.id FROM S3Object s WHERE CAST(s.ts AS TIMESTAMP) < "
            "CAST('2024-03-01' AS TIMESTAMP)"},
    {"filter": "CAST(ts AS TIMESTAMP) < CAST('2024-03-01' AS TIMESTAMP)", "columns": ["id"]},
])
def test_text_timestamps_in_where(tmp_path: Path, request_: dict[str, object]) -> None:
    """WHERE turns text into timestamps as the SELECT list does (the row filter runs on
    each piece as it is read, where a plain cast of text to a timestamp is refused)."""
    (tmp_path / BUCKET).mkdir()
    stamps = ["2024-05-01T10:30:00", "2024-01-01T00:00:00", "2023-12-31T23:59:59",
              "2024-02-29T12:00:00"]
    (tmp_path / BUCKET / "ts.csv").write_text(
        "id,ts\n" + "".join(f"{i},{t}\n" for i, t in enumerate(stamps)))
    engine = Engine(Settings(memory_mb=2048), fetcher=LocalFetcher(tmp_path))
    got = read_request(engine, {"source": f"s3://{BUCKET}/ts.csv", "input": "csv",
                                **request_}).frame
    assert sorted(got["id"].to_list()) == [i for i, t in enumerate(stamps)
                                           if dt.datetime.fromisoformat(t)
                                           < dt.datetime(2024, 3, 1)]


def test_where_of_sql_prunes_row_groups(root: Path) -> None:
    got, fetcher = run(root, "SELECT s.id FROM S3Object s WHERE s.id BETWEEN 500 AND 520")
    assert got["id"].to_list() == list(range(500, 521))
    # 8 row groups of 250; only the third holds ids 500..520, and only `id` is fetched.
    ranges = fetcher.ranges()
    assert 0 < sum(b - a for a, b in ranges) < 2_000


BAD: list[tuple[str, type[S3SliceError], str]] = [
    ("SELEC id FROM s3object", FilterSyntaxError, "cannot parse"),
    ("SELECT id FROM s3object; DROP TABLE s3object", FilterSyntaxError, "one expression"),
    ("SELECT id FROM other_table", ForbiddenQueryError, "other_table"),
    ("SELECT * FROM s3object JOIN secrets ON true", ForbiddenQueryError, "secrets"),
    ("SELECT * FROM read_csv('/etc/passwd')", ForbiddenQueryError, "read_csv"),
    ("SELECT * FROM read_parquet('s3://other/x.parquet')", ForbiddenQueryError, "read_parquet"),
    ("SELECT * FROM 's3://other/x.parquet'", ForbiddenQueryError, "not allowed"),
    ("SELECT * FROM db.s3object", ForbiddenQueryError, "db.s3object"),
    ("SELECT * FROM s3object WHERE id IN (SELECT id FROM t2)", ForbiddenQueryError, "t2"),
    ("DELETE FROM s3object", ForbiddenQueryError, "only SELECT"),
    ("SELECT nope FROM s3object", UnknownColumnError, "'nope'"),
    ("SELECT id FROM s3object WHERE DATE_ADD(fortnight, 1, ts) > ts", FilterSyntaxError,
     "date part"),
    ("SELECT DATE_ADD(month, qty, ts) FROM s3object", FilterSyntaxError, "whole number"),
    ("SELECT DATE_DIFF(day, ts) FROM s3object", FilterSyntaxError, "takes 3"),
    ("SELECT TO_TIMESTAMP('yesterday') FROM s3object", FilterSyntaxError, "ISO 8601"),
    ("SELECT id FROM s3object WHERE name + 1 > 2", QueryError, "cannot run"),
]


@pytest.mark.parametrize(("sql", "error", "message"), BAD, ids=[b[0][:40] for b in BAD])
def test_bad_queries_fail_before_reading_data(root: Path, sql: str, error: type[S3SliceError],
                                              message: str) -> None:
    fetcher = RecordingFetcher(LocalFetcher(root))
    engine = Engine(Settings(memory_mb=2048), fetcher=fetcher, footer_cache=FooterCache(1 << 20))
    with pytest.raises(error, match=message):
        read_request(engine, {"source": SOURCE, "sql": sql})
    if error is not QueryError:  # a type error shows only once the data's types are known
        assert not fetcher.ranges()


@pytest.mark.parametrize(("request_", "field"), [
    ({"sql": "x" * 70_000}, "sql"),
    ({"sql": ""}, "sql"),
    ({"sql": "SELECT 1", "limit": 5}, "sql"),
    ({"columns": ["id"], "limit": -1}, "limit"),
])
def test_bad_requests(root: Path, request_: dict[str, object], field: str) -> None:
    engine = Engine(Settings(memory_mb=2048), fetcher=LocalFetcher(root))
    with pytest.raises(RequestError) as info:
        read_request(engine, {"source": SOURCE, **request_})
    assert info.value.field == field
