"""One rule for values written as text, on every path (``s3slice.core.values``): inline rows,
NDJSON and CSV outputs, S3 Select's JSON and CSV records, and the command line's
``--print json|csv|table``. A struct, a list and a map are JSON (their compact JSON text in
a CSV field or a printed cell), timestamps ISO 8601 with ``T`` and the offset only when the
column has a zone, non-ASCII text as it is. A map is a JSON object of its keys.

The expected values are written here by hand from the Parquet file's values (Python's
``isoformat`` for the timestamps), never from the service's own writers.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import decimal
import io
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3slice.entry import dispatch as _entry
from tests.integration.test_cli import cli_run, describe
from tests.support import S3Env, invoke

pytestmark = pytest.mark.integration

DATA, RESULTS = "serial-data", "serial-results"
KEY = "nested.parquet"
SOURCE = f"s3://{DATA}/{KEY}"
PARIS = ZoneInfo("Europe/Paris")
NAIVE = [dt.datetime(2024, 6, 1, 12, 0, 0, 500), dt.datetime(2024, 12, 31, 23, 59, 59)]
TEXT = ["héllo ✓ 東京", "naïve \"quoted\", comma"]
COLUMNS = ["id", "s", "l", "m", "tz", "utc", "nv", "txt"]


def table() -> pa.Table:
    utc = [t.replace(tzinfo=dt.UTC) for t in NAIVE]
    return pa.table({
        "id": pa.array([0, 1], pa.int64()),
        "s": pa.array([{"city": None, "name": "Zürich", "at": NAIVE[0]}, None],
                      pa.struct([("city", pa.string()), ("name", pa.string()),
                                 ("at", pa.timestamp("us"))])),
        "l": pa.array([[1, 2], None], pa.list_(pa.int64())),
        "m": pa.array([[("ключ", 1)], []], pa.map_(pa.string(), pa.int64())),
        "tz": pa.array(utc, pa.timestamp("us", tz="Europe/Paris")),
        "utc": pa.array(utc, pa.timestamp("us", tz="UTC")),
        "nv": pa.array(NAIVE, pa.timestamp("us")),
        "txt": pa.array(TEXT, pa.string()),
    })


def expected() -> list[dict[str, Any]]:
    """Each row's JSON value, as the rule says."""
    rows = []
    for i, naive in enumerate(NAIVE):
        instant = naive.replace(tzinfo=dt.UTC)
        rows.append({
            "id": i,
            "s": {"city": None, "name": "Zürich", "at": NAIVE[0].isoformat()} if i == 0
            else None,
            "l": [1, 2] if i == 0 else None,
            "m": {"ключ": 1} if i == 0 else {},  # a map is a JSON object
            "tz": instant.astimezone(PARIS).isoformat(),  # 2024-06-01T14:00:00.000500+02:00
            "utc": instant.isoformat(),                    # ...+00:00
            "nv": naive.isoformat(),                       # no offset: a zone-less column
            "txt": TEXT[i]})
    return rows


def field_text(value: Any) -> str:
    """A value in a CSV field: text as is, a null empty, anything else its compact JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@pytest.fixture
def lake(s3: S3Env) -> Iterator[S3Env]:
    for bucket in (DATA, RESULTS):
        s3.empty_bucket(bucket)
    buf = io.BytesIO()
    pq.write_table(table(), buf)
    s3.client.put_object(Bucket=DATA, Key=KEY, Body=buf.getvalue())
    _entry.reset()
    yield s3
    _entry.reset()


def test_the_expected_values_are_what_the_file_holds() -> None:
    """The oracle's timestamps are the file's instants (Python reads them back)."""
    want = expected()
    assert want[0]["tz"] == "2024-06-01T14:00:00.000500+02:00"
    assert want[1]["utc"] == "2024-12-31T23:59:59+00:00"
    for row, naive in zip(want, NAIVE, strict=True):
        assert dt.datetime.fromisoformat(row["tz"]) == naive.replace(tzinfo=dt.UTC)
        assert dt.datetime.fromisoformat(row["nv"]).tzinfo is None


def test_inline_rows(lake: S3Env) -> None:
    response = invoke({"source": SOURCE, "return_rows": True})
    assert response["rows"] == expected()
    assert response["columns"] == COLUMNS


def test_ndjson_output(lake: S3Env) -> None:
    response = invoke({"source": SOURCE, "output": {"uri": f"s3://{RESULTS}/j/",
                                                    "format": "json"}})
    text = lake.get(response["outputs"][0]["uri"]).decode()
    assert [json.loads(line) for line in text.splitlines()] == expected()
    assert "Zürich" in text and "東京" in text  # non-ASCII as is, never \u escapes


def test_csv_output(lake: S3Env) -> None:
    response = invoke({"source": SOURCE, "output": {"uri": f"s3://{RESULTS}/c/",
                                                    "format": "csv"}})
    text = lake.get(response["outputs"][0]["uri"]).decode()
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == COLUMNS
    assert rows[1:] == [[field_text(row[c]) for c in COLUMNS] for row in expected()]


@pytest.mark.parametrize("fmt", ["JSON", "CSV"])
def test_s3_select_records(lake: S3Env, fmt: str) -> None:
    response = invoke({"Bucket": DATA, "Key": KEY, "Expression": "SELECT * FROM S3Object",
                       "InputSerialization": {"Parquet": {}},
                       "OutputSerialization": {fmt: {}}})
    payload = response["Payload"]
    if fmt == "JSON":
        assert [json.loads(line) for line in payload.splitlines()] == expected()
        assert "Zürich" in payload
    else:  # no header, as S3 Select writes CSV
        assert list(csv.reader(io.StringIO(payload))) == [
            [field_text(row[c]) for c in COLUMNS] for row in expected()]


@pytest.mark.slow  # subprocesses: the CLI's imports, several seconds
def test_cli_print_json_csv_and_table(lake: S3Env) -> None:
    forms = ["json", "csv", "table"]
    with ThreadPoolExecutor(len(forms)) as pool:
        runs = dict(zip(forms, pool.map(lambda form: cli_run(
            lake.endpoint_url, "query", "--source", SOURCE, "--columns", ",".join(COLUMNS),
            "--print", form), forms), strict=True))
    for proc in runs.values():
        assert proc.returncode == 0, describe(proc)
    want = expected()
    lines = runs["json"].stdout.splitlines()
    assert [json.loads(line) for line in lines] == want
    assert lines[0] == json.dumps(want[0], separators=(",", ":"), ensure_ascii=False)
    assert list(csv.reader(io.StringIO(runs["csv"].stdout))) == [
        COLUMNS, *([field_text(row[c]) for c in COLUMNS] for row in want)]
    table_lines = runs["table"].stdout.splitlines()
    assert table_lines[0].split() == COLUMNS
    for line, row in zip(table_lines[2:4], want, strict=True):
        for c in COLUMNS:  # every cell's text, nulls as null
            assert (field_text(row[c]) or "null") in line, (c, line)
    assert table_lines[-1] == "(2 rows)"


@pytest.mark.slow  # subprocesses: the CLI's imports, several seconds
def test_cli_limit_0_prints_the_header(lake: S3Env) -> None:
    """No rows still has its columns: ``--print csv`` writes the header, ``table`` the
    names; the JSON response names them in ``columns``."""
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda form: cli_run(
            lake.endpoint_url, "query", "--source", SOURCE, "--columns", "id,txt,nv",
            "--limit", "0", "--print", form), ("csv", "table")))
    for proc in runs:
        assert proc.returncode == 0, describe(proc)
    assert runs[0].stdout == "id,txt,nv\n"
    assert runs[1].stdout.splitlines()[0].split() == ["id", "txt", "nv"]
    assert runs[1].stdout.splitlines()[-1] == "(0 rows)"
    response = invoke({"source": SOURCE, "columns": ["id", "txt", "nv"], "limit": 0})
    assert response["rows"] == [] and response["columns"] == ["id", "txt", "nv"]


SCALARS = "scalars.parquet"


def scalar_table() -> pa.Table:
    """Dates, times, durations, decimals, milli- and nanosecond timestamps, binary."""
    return pa.table({
        "d": pa.array([dt.date(2024, 6, 1), None], pa.date32()),
        "t": pa.array([dt.time(1, 2, 3, 400), dt.time(1)], pa.time64("us")),
        "du": pa.array([dt.timedelta(days=1, seconds=5, microseconds=7),
                        dt.timedelta(seconds=-3)], pa.duration("us")),
        "dec": pa.array([decimal.Decimal("1.50"), decimal.Decimal("-0.01")],
                        pa.decimal128(10, 2)),
        "ms": pa.array([dt.datetime(2024, 6, 1, 12, 0, 0, 500_000), NAIVE[1]],
                       pa.timestamp("ms")),
        "ns": pa.array([1_717_243_200_123_456_789, 0], pa.timestamp("ns", tz="UTC")),
        "b": pa.array([b"\x00\xff", None], pa.binary()),
        "ok": pa.array([True, None], pa.bool_())})


#: Each row as the rule writes it (docs/contract.md's table), by hand.
SCALAR_ROWS = [
    {"d": "2024-06-01", "t": "01:02:03.000400", "du": "P1DT5.000007S", "dec": "1.50",
     "ms": "2024-06-01T12:00:00.500", "ns": "2024-06-01T12:00:00.123456789+00:00",
     "b": base64.b64encode(b"\x00\xff").decode(), "ok": True},
    {"d": None, "t": "01:00:00", "du": "-PT3S", "dec": "-0.01",
     "ms": "2024-12-31T23:59:59", "ns": "1970-01-01T00:00:00+00:00", "b": None, "ok": None}]


@pytest.mark.parametrize("path", ["rows", "ndjson", "csv", "select-json", "select-csv"])
def test_dates_times_durations_decimals_on_every_path(lake: S3Env, path: str) -> None:
    buf = io.BytesIO()
    pq.write_table(scalar_table(), buf)
    lake.client.put_object(Bucket=DATA, Key=SCALARS, Body=buf.getvalue())
    source, names = f"s3://{DATA}/{SCALARS}", list(SCALAR_ROWS[0])
    cells = [[field_text(row[c]) for c in names] for row in SCALAR_ROWS]
    if path == "rows":
        assert invoke({"source": source, "return_rows": True})["rows"] == SCALAR_ROWS
    elif path in ("ndjson", "csv"):
        response = invoke({"source": source, "output": {
            "uri": f"s3://{RESULTS}/{path}/", "format": "json" if path == "ndjson" else "csv"}})
        text = lake.get(response["outputs"][0]["uri"]).decode()
        if path == "ndjson":
            assert [json.loads(line) for line in text.splitlines()] == SCALAR_ROWS
        else:
            assert list(csv.reader(io.StringIO(text))) == [names, *cells]
    else:
        fmt = path.removeprefix("select-").upper()
        payload = invoke({"Bucket": DATA, "Key": SCALARS, "Expression": "SELECT * FROM S3Object",
                          "InputSerialization": {"Parquet": {}},
                          "OutputSerialization": {fmt: {}}})["Payload"]
        if fmt == "JSON":
            assert [json.loads(line) for line in payload.splitlines()] == SCALAR_ROWS
        else:
            assert list(csv.reader(io.StringIO(payload))) == cells
