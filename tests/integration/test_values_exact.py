"""Values read and written exactly, through the real handler on the local S3 server.

INT96 timestamps of a file shaped as Spark 3.4 writes them (parquet-mr 1.13.1, no Arrow
schema, no statistics) are read at microseconds from their own 12 bytes, whatever their
year; a value polars cannot show is an ``ObjectFormatError`` naming the object and the
column. (NaN, infinities and binary values in JSON and NDJSON answers:
``test_floats_and_binary_exact.py``.)

The INT96 file is built here: pyarrow writes placeholders (it writes INT96 only from
nanosecond timestamps), then each placeholder's 12 bytes, in the uncompressed PLAIN data
page, are overwritten with the value wanted. The expected microseconds come from the
Julian day arithmetic below, never from the service's own decoder.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import struct
from collections.abc import Iterator
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import s3slice.parquet.pages
from s3slice import ObjectFormatError, OutputError
from s3slice.entry import dispatch as _entry
from s3slice.parquet import thrift as _thrift
from tests import malformed
from tests.support import S3Env, fresh_lake, invoke

pytestmark = pytest.mark.integration

DATA, RESULTS = "exact-data", "exact-results"
JULIAN_UNIX_EPOCH = 2_440_588
SPARK_CREATED_BY = "parquet-mr version 1.13.1 (build db4183109d5b734ec5930d870cdae161e408ddba)"


@pytest.fixture
def lake(s3: S3Env) -> Iterator[S3Env]:
    yield from fresh_lake(s3, DATA, RESULTS)


def put(s3: S3Env, key: str, data: bytes) -> str:
    s3.client.put_object(Bucket=DATA, Key=key, Body=data)
    return f"s3://{DATA}/{key}"


# ------------------------------------------------------------------ INT96, independently

def days_since_unix_epoch(year: int, month: int, day: int) -> int:
    """Proleptic Gregorian days from 1970-01-01, for any year (400-year cycles)."""
    cycles, year_in = divmod(year - 2000, 400)
    return (dt.date(2000 + year_in, month, day) - dt.date(1970, 1, 1)).days + cycles * 146_097


def int96_of(iso: str, nanos: int = 0) -> tuple[int, int]:
    """(Julian day, nanoseconds of the day) of ``YYYY-MM-DDThh:mm:ss±hh:mm`` (+``nanos``),
    the instant Spark stores (UTC)."""
    date, _, clock = iso.rpartition("T")
    year, month, day = (int(p) for p in date.rsplit("-", 2))
    hh, mm, ss = (int(p) for p in clock[:8].split(":"))
    oh, om = (int(p) for p in clock[9:].split(":"))
    seconds = hh * 3600 + mm * 60 + ss - (1 if clock[8] == "+" else -1) * (oh * 3600 + om * 60)
    days = days_since_unix_epoch(year, month, day) + seconds // 86_400
    return days + JULIAN_UNIX_EPOCH, (seconds % 86_400) * 1_000_000_000 + nanos


def micros_of(value: tuple[int, int]) -> int:
    """What Spark reads: whole days from the epoch, plus the nanoseconds truncated."""
    day, nanos = value
    return (day - JULIAN_UNIX_EPOCH) * 86_400_000_000 + nanos // 1_000


def spark_int96_file(values: list[tuple[int, int] | None], *, page_index: bool = False,
                     rows_per_page: int | None = None) -> bytes:
    """A Parquet file as Spark 3.4 writes INT96: ``id`` (int64) and ``ts`` (optional INT96,
    no logical type), created by parquet-mr 1.13.1, no Arrow schema, no statistics."""
    base = dt.datetime(2000, 1, 1)
    placeholders = [base + dt.timedelta(seconds=i) for i in range(len(values))]
    table = pa.table({
        "id": pa.array(range(len(values)), pa.int64()),
        "ts": pa.array([None if v is None else p for v, p in zip(values, placeholders,
                                                                strict=True)],
                       pa.timestamp("ns"))})
    options: dict[str, Any] = {}
    if rows_per_page is not None:
        options = {"data_page_size": 1, "write_batch_size": rows_per_page}
    data = bytearray(malformed.write(
        table, use_deprecated_int96_timestamps=True, store_schema=False, use_dictionary=False,
        compression="NONE", write_statistics=["id"] if page_index else False,
        write_page_index=page_index, **options))
    for value, p in zip(values, placeholders, strict=True):
        if value is None:
            continue
        seconds = int((p - dt.datetime(1970, 1, 1)).total_seconds())
        old = struct.pack("<qi", (seconds % 86_400) * 1_000_000_000,
                          seconds // 86_400 + JULIAN_UNIX_EPOCH)
        at = data.find(old)
        assert at > 0 and data.find(old, at + 1) < 0, "each placeholder once, in its page"
        data[at:at + 12] = struct.pack("<qi", value[1], value[0])
    fmd = malformed.thrift_footer(bytes(data))
    t = _thrift.thrift()
    assert fmd.schema[2].type == t.Type.INT96
    fmd.created_by = SPARK_CREATED_BY
    fmd.key_value_metadata = [
        t.KeyValue(key="org.apache.spark.version", value="3.4.1"),
        t.KeyValue(key="org.apache.spark.sql.parquet.row.metadata", value=json.dumps(
            {"type": "struct", "fields": [
                {"name": "id", "type": "long", "nullable": True, "metadata": {}},
                {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}}]}))]
    return malformed.with_thrift_footer(bytes(data), fmd)


#: The issue's two values, and others near the edges of what is read.
SPARK_NEAR = "9999-12-31T01:00:00-02:00"
SPARK_FAR = "290000-12-31T01:00:00+02:00"
READABLE = [int96_of(SPARK_NEAR), int96_of("1970-01-01T00:00:00+00:00"),
            int96_of("2262-04-12T00:00:00+00:00"), None,
            int96_of("2500-01-01T00:00:00+00:00", nanos=123_456_789),
            int96_of("1600-03-01T00:00:00+00:00", nanos=999),
            int96_of("0001-01-01T00:00:00+00:00"),
            int96_of("262141-12-31T23:59:59+00:00", nanos=999_999_999),
            int96_of("-262142-01-01T00:00:00+00:00")]


def expected_micros(values: list[tuple[int, int] | None]) -> list[int | None]:
    return [None if v is None else micros_of(v) for v in values]


def test_the_reference_arithmetic() -> None:
    # Spark's own reading of the values, checked by hand: 9999-12-31 03:00 UTC.
    assert micros_of(int96_of(SPARK_NEAR)) == (
        dt.datetime(9999, 12, 31, 3) - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
    assert int96_of("1970-01-01T00:00:00+00:00") == (JULIAN_UNIX_EPOCH, 0)
    assert int96_of("2000-01-01T00:00:00+00:00") == (2_451_545, 0)  # J2000's day
    day, nanos = int96_of(SPARK_FAR)
    assert nanos == 23 * 3600 * 10**9  # 290000-12-30T23:00 UTC
    assert day - int96_of("290000-12-30T00:00:00+00:00")[0] == 0
    data = spark_int96_file([*READABLE, int96_of(SPARK_FAR)])
    assert struct.pack("<qi", 3 * 3600 * 10**9, int96_of(SPARK_NEAR)[0]) in data
    for value in [*READABLE, int96_of(SPARK_FAR)]:
        assert value is None or struct.pack("<qi", value[1], value[0]) in data
    md = pq.read_metadata(pa.BufferReader(data))
    assert md.schema.column(1).physical_type == "INT96"
    assert md.created_by == SPARK_CREATED_BY
    assert b"ARROW:schema" not in data


@pytest.mark.parametrize("query", [
    {}, {"filter": "id >= 0"}, {"columns": ["ts"]}, {"columns": ["id", "ts"]},
    {"sql": "SELECT id, ts FROM s3object WHERE id < 100"}])
@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_int96_from_spark_reads_exactly_at_microseconds(lake: S3Env, query: dict[str, Any],
                                                        fmt: str) -> None:
    data = spark_int96_file(READABLE)
    uri = put(lake, "spark/part-00000.parquet", data)
    response = invoke({"source": uri, **query,
                       "output": {"uri": f"s3://{RESULTS}/out/", "format": fmt}})
    [out] = response["outputs"]
    body = lake.get(out["uri"])
    want = expected_micros(READABLE)
    if fmt == "parquet":
        got = pl.read_parquet(body)["ts"]
        assert got.dtype == pl.Datetime("us")
        assert got.cast(pl.Int64).to_list() == want
    else:
        texts = [json.loads(line)["ts"] for line in body.decode().split("\n")[:-1]]
        shown = [None if m is None or not 0 < m // 86_400_000_000 + 719_163 < 3_652_059
                 else dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=m) for m in want]
        for text, value, m in zip(texts, shown, want, strict=True):
            if value is not None:  # Python's datetime shows years 1 to 9999
                assert dt.datetime.fromisoformat(text) == value
            else:
                assert (text is None) == (m is None)
        assert texts[0] == "9999-12-31T03:00:00"  # ISO 8601, no zone: a naive column


@pytest.mark.parametrize("columns", [["ts"], ["id", "ts"]])
def test_int96_columns_are_decoded_not_copied(lake: S3Env, columns: list[str]) -> None:
    """A plain column selection to Parquet copies column chunks without decoding them
    (``chunk_copy``); an INT96 chunk is decoded instead, so the output holds microsecond
    timestamps any reader reads alike, and a value out of range is refused as above."""
    values = [READABLE[i % len(READABLE)] for i in range(3_000)]
    uri = put(lake, "spark/large.parquet", spark_int96_file(values))
    response = invoke({"source": uri, "columns": columns, "output": f"s3://{RESULTS}/out/"})
    assert response["stats"]["strategy"] != "copy"
    got = pl.read_parquet(lake.get(response["outputs"][0]["uri"]))
    assert got.columns == columns
    assert got["ts"].cast(pl.Int64).to_list() == expected_micros(values)
    far = put(lake, "spark/large-far.parquet",
              spark_int96_file([*values, int96_of(SPARK_FAR)]))
    with pytest.raises(ObjectFormatError, match="column 'ts'.*INT96"):
        invoke({"source": far, "columns": columns, "output": f"s3://{RESULTS}/far/"})
    assert lake.keys(RESULTS, "far/") == []


def test_int96_rows_returned_inline_are_exact(lake: S3Env) -> None:
    values = [int96_of(SPARK_NEAR), None, int96_of("2500-01-01T00:00:00+00:00", 123_456_789)]
    uri = put(lake, "spark/inline.parquet", spark_int96_file(values))
    response = invoke({"source": uri, "return_rows": True})
    assert [r["ts"] for r in response["rows"]] == [
        "9999-12-31T03:00:00", None, "2500-01-01T00:00:00.123456"]


@pytest.mark.parametrize("value", [
    int96_of(SPARK_FAR), int96_of("262142-01-01T00:00:00+00:00"),
    int96_of("-262143-12-31T23:59:59+00:00"), (JULIAN_UNIX_EPOCH, -1),
    (JULIAN_UNIX_EPOCH, 86_400 * 10**9), (2**31 - 1, 0), (-(2**31), 0)])
@pytest.mark.parametrize("query", [
    {"columns": ["id", "ts"]}, {"columns": ["id", "ts"], "filter": "id >= 1"},
    {"columns": ["ts"]}, {"sql": "SELECT MAX(ts) AS m FROM s3object"}])
@pytest.mark.parametrize("answer", [{"return_rows": True},
                                    {"output": f"s3://{RESULTS}/out/"},
                                    {"output": {"uri": f"s3://{RESULTS}/out/", "format": "json"}}])
def test_an_int96_value_polars_cannot_show_is_a_typed_error(
        lake: S3Env, value: tuple[int, int], query: dict[str, Any],
        answer: dict[str, Any]) -> None:
    uri = put(lake, "spark/far.parquet",
              spark_int96_file([int96_of(SPARK_NEAR), value, None]))
    with pytest.raises(ObjectFormatError, match="column 'ts'.*INT96") as info:
        invoke({"source": uri, **query, **answer})
    assert info.value.uri == uri
    assert lake.keys(RESULTS) == []


def test_int96_through_the_page_index_is_exact(lake: S3Env, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    monkeypatch.setattr(s3slice.parquet.pages, "MAX_FOOTER_SHARE", math.inf)
    monkeypatch.setenv("S3SLICE_STRATEGY", "ranges")
    monkeypatch.setenv("S3SLICE_PAGE_INDEX_RATIO", "1.0")
    _entry.reset()
    values = [READABLE[i % len(READABLE)] for i in range(400)]
    uri = put(lake, "spark/paged.parquet",
              spark_int96_file(values, page_index=True, rows_per_page=20))
    response = invoke({"source": uri, "columns": ["id", "ts"],
                       "filter": "id >= 100 AND id < 130", "return_rows": True})
    assert response["stats"]["strategy_inputs"]["decoder"] == "pyarrow-pages"
    want = expected_micros(values)[100:130]
    assert [r["id"] for r in response["rows"]] == list(range(100, 130))
    far = [v if i != 5 else int96_of(SPARK_FAR) for i, v in enumerate(values)]
    uri = put(lake, "spark/paged-far.parquet",
              spark_int96_file(far, page_index=True, rows_per_page=20))
    with pytest.raises(ObjectFormatError, match="'ts'"):
        invoke({"source": uri, "columns": ["id", "ts"], "filter": "id < 10",
                "output": f"s3://{RESULTS}/out/"})
    response = invoke({"source": f"s3://{DATA}/spark/paged.parquet", "columns": ["id", "ts"],
                       "filter": "id >= 100 AND id < 130", "output": f"s3://{RESULTS}/p/"})
    got_ts = pl.read_parquet(lake.get(response["outputs"][0]["uri"]))["ts"]
    assert got_ts.cast(pl.Int64).to_list() == want


def nested_int96_file(values: list[tuple[int, int]], *, store_schema: bool) -> bytes:
    """INT96 leaves inside a struct, a list, a list of structs and a map's items (each row
    holds ``values[row]`` in each), beside a true FIXED_LEN_BYTE_ARRAY(12) in the same
    struct: placeholders written by pyarrow, then overwritten in place as above."""
    n = len(values)
    base = dt.datetime(2000, 1, 1)
    ph = {(leaf, row): base + dt.timedelta(seconds=leaf * 10_000 + row)
          for leaf in range(4) for row in range(n)}
    table = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "s": pa.array([{"t": ph[0, r], "raw": b"twelve bytes"} for r in range(n)],
                      pa.struct([("t", pa.timestamp("ns")), ("raw", pa.binary(12))])),
        "l": pa.array([[ph[1, r]] for r in range(n)], pa.list_(pa.timestamp("ns"))),
        "ls": pa.array([[{"t": ph[2, r], "x": r}] for r in range(n)],
                       pa.list_(pa.struct([("t", pa.timestamp("ns")), ("x", pa.int64())]))),
        "m": pa.array([[("k", ph[3, r])] for r in range(n)],
                      pa.map_(pa.string(), pa.timestamp("ns")))})
    data = bytearray(malformed.write(
        table, use_deprecated_int96_timestamps=True, store_schema=store_schema,
        use_dictionary=False, compression="NONE", write_statistics=False))
    for (_leaf, row), p in ph.items():
        seconds = int((p - dt.datetime(1970, 1, 1)).total_seconds())
        old = struct.pack("<qi", (seconds % 86_400) * 1_000_000_000,
                          seconds // 86_400 + JULIAN_UNIX_EPOCH)
        at = data.find(old)
        assert at > 0 and data.find(old, at + 1) < 0
        value = values[row]
        data[at:at + 12] = struct.pack("<qi", value[1], value[0])
    return bytes(data)


@pytest.mark.parametrize("store_schema", [False, True])
def test_int96_inside_structs_and_lists_reads_exactly(lake: S3Env, store_schema: bool) -> None:
    values = [v for v in READABLE if v is not None]
    uri = put(lake, "spark/nested.parquet", nested_int96_file(values, store_schema=store_schema))
    response = invoke({"source": uri, "output": f"s3://{RESULTS}/out/"})
    body = lake.get(response["outputs"][0]["uri"])
    got = pl.read_parquet(body)
    want = expected_micros(values)
    maps = pq.read_table(pa.BufferReader(body))["m"].combine_chunks()
    assert maps.offsets.to_pylist() == list(range(len(values) + 1))
    assert maps.items.cast(pa.int64()).to_pylist() == want
    assert got["s"].struct.field("t").cast(pl.Int64).to_list() == want
    assert got["s"].struct.field("raw").to_list() == [b"twelve bytes"] * len(values)
    assert [v[0] for v in got["l"].list.eval(pl.element().cast(pl.Int64)).to_list()] == want
    assert got["ls"].list.first().struct.field("t").cast(pl.Int64).to_list() == want
    assert got["ls"].list.first().struct.field("x").to_list() == list(range(len(values)))
    rows = invoke({"source": uri, "columns": ["id", "s"], "filter": "id = 0",
                   "return_rows": True})["rows"]
    assert rows == [{"id": 0, "s": {"t": "9999-12-31T03:00:00",
                                    "raw": base64.b64encode(b"twelve bytes").decode()}}]
    far = put(lake, "spark/nested-far.parquet", nested_int96_file(
        [*values, int96_of(SPARK_FAR)], store_schema=store_schema))
    for column in ("s", "l", "ls", "m"):
        with pytest.raises(ObjectFormatError, match=f"column '{column}'.*INT96"):
            invoke({"source": far, "columns": [column], "return_rows": True})


@pytest.mark.parametrize("answer", [
    {"return_rows": True}, {"output": {"uri": f"s3://{RESULTS}/out/", "format": "json"}},
    {"output": {"uri": f"s3://{RESULTS}/out/", "format": "csv"}}])
def test_a_datetime_polars_cannot_show_is_a_typed_error_in_text_answers(
        lake: S3Env, answer: dict[str, Any]) -> None:
    """An INT64 timestamp polars holds but cannot show (year 290000): a text answer of it
    is an OutputError, never a native panic; a Parquet answer holds it exactly."""
    far = micros_of(int96_of(SPARK_FAR))
    table = pa.table({"ts": pa.array([0, far], pa.int64()).cast(pa.timestamp("us"))})
    uri = put(lake, "far/x.parquet", malformed.write(table))
    with pytest.raises(OutputError, match="datetime"):
        invoke({"source": uri, **answer})
    assert lake.keys(RESULTS) == []
    response = invoke({"source": uri, "output": f"s3://{RESULTS}/p/"})
    got = pl.read_parquet(lake.get(response["outputs"][0]["uri"]))
    assert got["ts"].cast(pl.Int64).to_list() == [0, far]
