"""S3 Select's time functions through the real handler on the local S3 server, against
naive and zoned timestamp columns (Parquet: naive, UTC, Europe/Paris, America/New_York and
America/St_Johns' half hours, at us and ns) and timestamp text (CSV and JSON lines, with
``Z`` and offsets), each answer against an oracle computed here in Python (``zoneinfo``,
``datetime``):

- ``TO_STRING(ts, pattern)``: S3 Select's pattern letters, the column's own wall time and
  offset (a naive column is UTC: ``Z``);
- ``EXTRACT`` (``TIMEZONE_HOUR``/``TIMEZONE_MINUTE`` too), ``DATE_DIFF`` (whole years as
  S3 Select counts them, calendar months, elapsed days and hours), ``DATE_ADD``;
- ``TO_TIMESTAMP``/``CAST(… AS TIMESTAMP)`` of text with ``Z`` or an offset: that
  instant, compared with ``TO_TIMESTAMP`` literals and ``UTCNOW()``, shifted and
  differenced by elapsed parts; its date parts (``EXTRACT``), calendar ``DATE_DIFF`` and
  ``TO_STRING`` read the text's own wall time and offset, as S3 Select does (columns and
  literals alike);
- one meaning on every path: a UTC Parquet column and the same instants as CSV and JSON
  text answer the same queries alike.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import re
from collections.abc import Callable, Iterator
from typing import Any
from zoneinfo import ZoneInfo

import polars as pl
import pyarrow.parquet as pq
import pytest

from s3slice import FilterSyntaxError
from s3slice.entry import dispatch as _entry
from tests.support import S3Env, invoke

pytestmark = pytest.mark.integration

DATA = "time-functions"
UTC = dt.UTC
#: Instants either side of midnight, DST changes in Paris and New York, a leap day, the
#: epoch's year, fractions of a second; and a null.
INSTANTS: list[dt.datetime | None] = [
    dt.datetime(1969, 7, 20, 20, 18, 4, 123456, tzinfo=UTC),
    dt.datetime(2024, 2, 29, 23, 30, tzinfo=UTC),
    dt.datetime(2024, 3, 31, 0, 59, 59, tzinfo=UTC),
    dt.datetime(2024, 3, 31, 1, 0, 1, tzinfo=UTC),
    None,
    dt.datetime(2024, 11, 3, 6, 0, 0, 500000, tzinfo=UTC),
    dt.datetime(2024, 12, 31, 23, 0, tzinfo=UTC),
    dt.datetime(2025, 1, 1, 0, 0, tzinfo=UTC),
]
ZONES = [None, "UTC", "Europe/Paris", "America/New_York", "America/St_Johns"]
#: The reference instant DATE_DIFF counts to: 2025-03-01T00:00Z.
REF = dt.datetime(2025, 3, 1, tzinfo=UTC)
REF_SQL = "TO_TIMESTAMP('2025-03-01T00:00:00Z')"


@pytest.fixture
def lake(s3: S3Env) -> Iterator[S3Env]:
    s3.empty_bucket(DATA)
    _entry.reset()
    yield s3
    _entry.reset()


def put(s3: S3Env, key: str, body: bytes) -> str:
    s3.client.put_object(Bucket=DATA, Key=key, Body=body)
    return f"s3://{DATA}/{key}"


def parquet(zone: str | None, unit: str) -> tuple[pl.DataFrame, bytes]:
    series = pl.Series("ts", INSTANTS, dtype=pl.Datetime(unit, "UTC"))  # type: ignore[arg-type]
    series = series.dt.convert_time_zone(zone) if zone else series.dt.replace_time_zone(None)
    frame = pl.DataFrame({"i": range(len(INSTANTS)), "ts": series})
    sink = io.BytesIO()
    pq.write_table(frame.to_arrow(), sink, row_group_size=3)
    return frame, sink.getvalue()


def local(value: dt.datetime | None, zone: str | None) -> dt.datetime | None:
    """The instant at the column's zone (a naive column's wall time is UTC's)."""
    if value is None:
        return None
    return value.astimezone(ZoneInfo(zone) if zone else UTC)


def offset(value: dt.datetime, fmt: str) -> str:
    """The offset as S3 Select's ``X`` letters write it: ``Z`` at UTC."""
    seconds = int(value.utcoffset().total_seconds())  # type: ignore[union-attr]
    if seconds == 0:
        return "Z"
    sign, seconds = ("-" if seconds < 0 else "+"), abs(seconds)
    hh, mm = seconds // 3600, seconds % 3600 // 60
    return {"X": f"{sign}{hh:02d}" + (f"{mm:02d}" if mm else ""),
            "XXXX": f"{sign}{hh:02d}{mm:02d}", "XXX": f"{sign}{hh:02d}:{mm:02d}"}[fmt]


#: (pattern as the SQL text holds it, the oracle over the local aware datetime)
PATTERNS: list[tuple[str, Callable[[dt.datetime], str]]] = [
    ("MMMM d, y", lambda t: f"{t:%B} {t.day}, {t.year}"),
    ("MMM d, yyyy h:m a", lambda t: f"{t:%b} {t.day}, {t.year} {int(t.strftime('%I'))}:"
                                    f"{t.minute} {t:%p}"),
    ("M-d-yy", lambda t: f"{t.month}-{t.day}-{t:%y}"),
    ("y-MM-dd''T''HH:mm:ss.SSSX", lambda t: f"{t:%Y-%m-%dT%H:%M:%S}."
                                            f"{t.microsecond // 1000:03d}{offset(t, 'X')}"),
    ("yyyy-MM-dd''T''H:m:s.SSSSSSXXXX", lambda t: f"{t:%Y-%m-%dT}{t.hour}:{t.minute}:"
                                                  f"{t.second}.{t.microsecond:06d}"
                                                  f"{offset(t, 'XXXX')}"),
    ("HH''h'' XXX, MMMMM", lambda t: f"{t:%H}h {offset(t, 'XXX')}, {t:%B}"[:len(
        f"{t:%H}h {offset(t, 'XXX')}, ") + 1]),  # MMMMM: the month's first letter
]


def rows(response: dict[str, Any]) -> list[dict[str, Any]]:
    return list(response["rows"])


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("unit", ["us", "ns"])
def test_to_string_and_parts_read_the_columns_own_wall_time(lake: S3Env, zone: str | None,
                                                            unit: str) -> None:
    _, body = parquet(zone, unit)
    uri = put(lake, f"p-{unit}-{zone}.parquet".replace("/", "_"), body)
    fields = ", ".join(f"TO_STRING(ts, '{p}') AS f{k}" for k, (p, _) in enumerate(PATTERNS))
    sql = (f"SELECT i, {fields}, EXTRACT(TIMEZONE_HOUR FROM ts) AS th, "
           f"EXTRACT(TIMEZONE_MINUTE FROM ts) AS tm, EXTRACT(HOUR FROM ts) AS h, "
           f"DATE_DIFF(year, ts, {REF_SQL}) AS dy, DATE_DIFF(month, ts, {REF_SQL}) AS dm, "
           f"DATE_DIFF(hour, ts, {REF_SQL}) AS dh FROM s3object ORDER BY i")
    got = rows(invoke({"source": uri, "sql": sql, "return_rows": True}))
    # Each timestamp's calendar is its own (S3 Select, MinIO): the column's at its zone, the
    # 'Z' literal's at UTC.
    ref = REF
    for row, instant in zip(got, INSTANTS, strict=True):
        t = local(instant, zone)
        if t is None:
            assert all(v is None for k, v in row.items() if k != "i"), row
            continue
        for k, (pattern, oracle) in enumerate(PATTERNS):
            assert row[f"f{k}"] == oracle(t), (pattern, zone, t)
        seconds = int(t.utcoffset().total_seconds())  # type: ignore[union-attr]
        # S3 Select (MinIO): hours and the minutes left, each truncated toward zero
        assert (row["th"], row["tm"]) == (int(seconds / 3600),
                                          int(math.fmod(seconds, 3600) / 60))
        assert row["h"] == t.hour
        whole = ref.year - t.year - ((ref.month, ref.day) < (t.month, t.day))
        assert row["dy"] == whole
        assert row["dm"] == (ref.year - t.year) * 12 + ref.month - t.month
        assert row["dh"] == int((REF - t).total_seconds() // 3600)


#: Text as S3 Select reads timestamps: Z, offsets either side, minutes only, a date, a
#: year, fractions, and a space for the T.
TEXTS = ["2024-05-01T10:30:00Z", "2024-06-15T00:00:00+02:00", "2023-12-31T23:59:59-05:00",
         "2024-02-29T12:00Z", "2024-01-01T", "2024T", "2020-06-15T08:45:30.25+05:30",
         "2024-06-15 01:02:03", "2024-07T"]


def own(text: str) -> dt.datetime:
    """The oracle of S3 Select's reading: the text as an aware datetime at its own offset
    (its wall time as written), UTC when it has none."""
    full = text.replace(" ", "T")
    if full.endswith("T") and len(full) == 5:
        full = full[:4] + "-01-01"
    elif full.endswith("T") and len(full) == 8:
        full = full[:7] + "-01"
    value = dt.datetime.fromisoformat(full.removesuffix("T"))
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def instant(text: str) -> dt.datetime:
    """The instant the text names, at UTC."""
    return own(text).astimezone(UTC)


def text_objects(lake: S3Env) -> dict[str, dict[str, Any]]:
    """The texts as a CSV object and a JSON-lines object: S3 Select requests over each."""
    csv_body = ("i,ts\n" + "".join(f"{i},{t}\n" for i, t in enumerate(TEXTS))).encode()
    json_body = "".join(json.dumps({"i": i, "ts": t}) + "\n" for i, t in enumerate(TEXTS))
    put(lake, "t.csv", csv_body)
    put(lake, "t.jsonl", json_body.encode())
    return {"csv": {"Key": "t.csv", "InputSerialization": {"CSV": {"FileHeaderInfo": "USE"}}},
            "json": {"Key": "t.jsonl", "InputSerialization": {"JSON": {"Type": "LINES"}}}}


def select(request: dict[str, Any], sql: str) -> list[dict[str, Any]]:
    response = invoke({"Bucket": DATA, "ExpressionType": "SQL", "Expression": sql,
                       "OutputSerialization": {"JSON": {}}, **request})
    return [json.loads(line) for line in response["Payload"].splitlines()]


@pytest.mark.parametrize("fmt", ["csv", "json"])
@pytest.mark.parametrize("reader", ["TO_TIMESTAMP(s.ts)", "CAST(s.ts AS TIMESTAMP)"])
def test_timestamp_text_with_offsets_is_that_instant(lake: S3Env, fmt: str,
                                                     reader: str) -> None:
    request = text_objects(lake)[fmt]
    cut = "2024-02-29T14:00:00+02:00"  # 12:00Z
    got = select(request, f"SELECT s.i FROM S3Object s WHERE {reader} >= TO_TIMESTAMP('{cut}')"
                          f" AND {reader} < UTCNOW()")
    want = [i for i, t in enumerate(TEXTS) if instant(cut) <= instant(t) < dt.datetime.now(UTC)]
    assert [int(r["i"]) for r in got] == want and want
    got = select(request, f"SELECT DATE_DIFF(minute, {reader}, {REF_SQL}) AS m, "
                          f"DATE_DIFF(second, {REF_SQL}, {reader}) AS s, "
                          f"DATE_ADD(day, 1, {reader}) < {REF_SQL} AS before FROM S3Object s")
    want_rows = [{"m": int((REF - instant(t)).total_seconds() // 60),
                  "s": math.trunc((instant(t) - REF).total_seconds()),
                  "before": instant(t) + dt.timedelta(days=1) < REF} for t in TEXTS]
    assert got == want_rows


#: EXTRACT's parts, each by the oracle over the text's own aware datetime.
PARTS: list[tuple[str, Callable[[dt.datetime], int]]] = [
    ("YEAR", lambda t: t.year), ("MONTH", lambda t: t.month), ("DAY", lambda t: t.day),
    ("HOUR", lambda t: t.hour), ("MINUTE", lambda t: t.minute),
    ("SECOND", lambda t: t.second),
    ("TIMEZONE_HOUR", lambda t: int(t.utcoffset().total_seconds() / 3600)),  # type: ignore[union-attr]
    ("TIMEZONE_MINUTE",
     lambda t: int(math.fmod(t.utcoffset().total_seconds(), 3600) / 60)),  # type: ignore[union-attr]
]


def calendar(part: str, t1: dt.datetime, t2: dt.datetime) -> int:
    """S3 Select's (MinIO's) calendar DATE_DIFF(part, t1, t2): each date its own (the
    value's wall time), the order the instants'."""
    if t2 < t1:
        return -calendar(part, t2, t1)
    years = t2.year - t1.year
    if part == "month":
        return years * 12 + t2.month - t1.month
    return years - ((t2.month, t2.day) < (t1.month, t1.day))


def own_time_fields(reader: str) -> str:
    """The select list of every part, calendar difference and pattern over ``reader``."""
    fields = [f"EXTRACT({p} FROM {reader}) AS {p.lower()}" for p, _ in PARTS]
    fields += [f"TO_STRING({reader}, '{p}') AS f{k}" for k, (p, _) in enumerate(PATTERNS)]
    fields += [f"DATE_DIFF(year, {reader}, {REF_SQL}) AS dy",
               f"DATE_DIFF(month, {reader}, {REF_SQL}) AS dm",
               f"DATE_DIFF(year, {REF_SQL}, {reader}) AS ndy",
               f"DATE_DIFF(month, {REF_SQL}, {reader}) AS ndm",
               f"DATE_DIFF(hour, {reader}, {REF_SQL}) AS dh"]
    return ", ".join(fields)


def own_time_row(text: str) -> dict[str, Any]:
    """The oracle of :func:`own_time_fields` over ``text``."""
    t = own(text)
    row: dict[str, Any] = {p.lower(): oracle(t) for p, oracle in PARTS}
    row |= {f"f{k}": oracle(t) for k, (_, oracle) in enumerate(PATTERNS)}
    return row | {"dy": calendar("year", t, REF), "dm": calendar("month", t, REF),
                  "ndy": calendar("year", REF, t), "ndm": calendar("month", REF, t),
                  "dh": math.trunc((REF - t).total_seconds() / 3600)}


@pytest.mark.parametrize("fmt", ["csv", "json"])
@pytest.mark.parametrize("reader", ["TO_TIMESTAMP(s.ts)", "CAST(s.ts AS TIMESTAMP)"])
def test_parts_and_formats_of_a_text_read_its_own_wall_time(lake: S3Env, fmt: str,
                                                           reader: str) -> None:
    """EXTRACT (every part), calendar DATE_DIFF and TO_STRING of a text column's timestamp
    read the text's wall time and offset (S3 Select, MinIO); elapsed DATE_DIFF the
    instant."""
    request = text_objects(lake)[fmt]
    got = select(request, f"SELECT {own_time_fields(reader)} FROM S3Object s")
    assert got == [own_time_row(t) for t in TEXTS]


@pytest.mark.parametrize("reader", ["TO_TIMESTAMP('{}')", "CAST('{}' AS TIMESTAMP)"])
def test_parts_and_formats_of_a_text_literal_read_its_own_wall_time(lake: S3Env,
                                                                   reader: str) -> None:
    request = text_objects(lake)["csv"]
    for text in (TEXTS[1], TEXTS[2], TEXTS[6], TEXTS[0], TEXTS[5]):  # offsets, Z, a year
        got = select(request, f"SELECT {own_time_fields(reader.format(text))} FROM S3Object s "
                              "WHERE s.i = '0'")
        assert got == [own_time_row(text)], text


def test_a_text_in_no_timestamp_form_is_a_query_error(lake: S3Env) -> None:
    request = text_objects(lake)["csv"]
    with pytest.raises(FilterSyntaxError, match="not an ISO 8601"):
        select(request, "SELECT s.i FROM S3Object s WHERE TO_TIMESTAMP('06/15/2024') < UTCNOW()")
    with pytest.raises(FilterSyntaxError, match=r"'Q' in the pattern 'yyyy Q'"):
        select(request, "SELECT TO_STRING(TO_TIMESTAMP(s.ts), 'yyyy Q') FROM S3Object s")


QUERIES = [
    "SELECT i FROM s3object WHERE ts >= TO_TIMESTAMP('2024-03-31T01:00:00Z') ORDER BY i",
    "SELECT i, TO_STRING(ts, 'y-MM-dd''T''HH:mm:ssXXX') AS t FROM s3object ORDER BY i",
    f"SELECT i, DATE_DIFF(year, ts, {REF_SQL}) AS y, DATE_DIFF(day, ts, {REF_SQL}) AS d, "
    "EXTRACT(MONTH FROM ts) AS m FROM s3object ORDER BY i",
    "SELECT i FROM s3object WHERE DATE_ADD(month, 1, ts) > TO_TIMESTAMP('2025-01-15T') "
    "ORDER BY i",
    "SELECT COUNT(*) AS n FROM s3object WHERE ts < UTCNOW()",
]


def test_one_meaning_on_every_path(lake: S3Env) -> None:
    """A UTC Parquet column and the same instants as CSV and JSON text (read with
    TO_TIMESTAMP) answer alike."""
    _, body = parquet("UTC", "us")
    uri = put(lake, "utc.parquet", body)
    texts = [None if t is None else t.isoformat() for t in INSTANTS]
    csv_body = "i,ts\n" + "".join(f"{i},{t or ''}\n" for i, t in enumerate(texts))
    json_body = "".join(json.dumps({"i": i, "ts": t}) + "\n" for i, t in enumerate(texts))
    csv_uri = put(lake, "utc.csv", csv_body.encode())
    json_uri = put(lake, "utc.jsonl", json_body.encode())
    for sql in QUERIES:
        want = rows(invoke({"source": uri, "sql": sql, "return_rows": True}))
        text_sql = re.sub(r"\bts\b", "TO_TIMESTAMP(ts)", sql)
        for source in (csv_uri, json_uri):
            got = rows(invoke({"source": source, "sql": text_sql, "return_rows": True}))
            assert [{k: (int(v) if k == "i" else v) for k, v in r.items()} for r in got] == \
                want, (sql, source)


@pytest.mark.parametrize("zone", ZONES)
def test_to_timestamp_of_a_timestamp_or_date_column_is_that_instant_at_utc(
        lake: S3Env, zone: str | None) -> None:
    frame, _ = parquet(zone, "us")
    frame = frame.with_columns(day=pl.col("ts").dt.date())
    sink = io.BytesIO()
    pq.write_table(frame.to_arrow(), sink)
    uri = put(lake, f"typed-{zone}.parquet".replace("/", "_"), sink.getvalue())
    sql = ("SELECT i, TO_STRING(TO_TIMESTAMP(ts), 'yyyy-MM-dd''T''HH:mm:ssX') AS t, "
           "TO_TIMESTAMP(day) < TO_TIMESTAMP('2024-03-31T') AS early FROM s3object "
           "WHERE TO_TIMESTAMP(ts) >= TO_TIMESTAMP('2024-03-31T01:00:00+01:00') ORDER BY i")
    got = rows(invoke({"source": uri, "sql": sql, "return_rows": True}))
    cut = dt.datetime(2024, 3, 31, tzinfo=UTC)
    want = [{"i": i, "t": f"{t:%Y-%m-%dT%H:%M:%S}Z",
             "early": local(t, zone).date() < dt.date(2024, 3, 31)}  # type: ignore[union-attr]
            for i, t in enumerate(INSTANTS) if t is not None and t >= cut]
    assert got == want and want
