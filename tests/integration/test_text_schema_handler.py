"""CSV and JSON lines through ``lambda_handler`` on the local S3 server (issue 36): the
columns and types of every record, as polars reading the whole object in memory gives them,
in direct requests and S3 Select requests (a scan range too); a line past the memory
budget's limit and a compression bomb refused typed, naming the object, nothing written."""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from s3slice import FOOTER_CACHE, ObjectFormatError, S3SliceError
from s3slice.entry import dispatch as _entry
from tests.support import S3Env, invoke

pytestmark = pytest.mark.integration

DATA, RESULTS = "text-data", "text-results"
ROWS = 12_000


@pytest.fixture
def lake(s3: S3Env, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Env]:
    for bucket in (DATA, RESULTS):
        s3.empty_bucket(bucket)
    for name in ("S3SLICE_QUERY", "S3SLICE_OUTPUT_URI", "S3SLICE_SOURCE_URIS"):
        monkeypatch.delenv(name, raising=False)
    # Small enough that these objects are streamed, not one GET.
    monkeypatch.setenv("S3SLICE_FOOTER_SIZE", "4096")
    _entry.reset()
    FOOTER_CACHE.clear()
    yield s3
    _entry.reset()
    FOOTER_CACHE.clear()


def put(s3: S3Env, key: str, data: bytes) -> str:
    s3.client.put_object(Bucket=DATA, Key=key, Body=data)
    return f"s3://{DATA}/{key}"


def ndjson(value: Callable[[int], dict[str, Any]]) -> bytes:
    return "".join(json.dumps({"id": i, **value(i)}) + "\n" for i in range(ROWS)).encode()


def csv(value: Callable[[int], str]) -> bytes:
    return ("id,v\n" + "".join(f"{i},{value(i)}\n" for i in range(ROWS))).encode()


CASES: dict[str, tuple[str, bytes]] = {
    "json key first at record 101": ("jsonl", ndjson(
        lambda i: {"v": i} if i < 100 else {"v": i, "late": f"x{i}"})),
    "json key first at record 10,001": ("jsonl", ndjson(
        lambda i: {"v": i} if i < 10_000 else {"v": i, "late": f"x{i}"})),
    "json int then 2.5 after row 100": ("jsonl", ndjson(
        lambda i: {"v": 2.5 if i == 150 else i})),
    "json int then 'n/a' after row 100": ("jsonl", ndjson(
        lambda i: {"v": "n/a" if i == 150 else i})),
    "csv int then 2.5 after row 100": ("csv", csv(lambda i: "2.5" if i == 150 else str(i))),
    "csv int then n/a after row 100": ("csv", csv(lambda i: "n/a" if i == 150 else str(i))),
}


def oracle(fmt: str, data: bytes) -> pl.DataFrame:
    if fmt == "csv":
        return pl.read_csv(io.BytesIO(data), infer_schema_length=None)
    return pl.read_ndjson(io.BytesIO(data), infer_schema_length=None)


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_direct_request_answers_every_records_columns_and_types(
        lake: S3Env, case: str, compressed: bool) -> None:
    fmt, data = CASES[case]
    uri = put(lake, f"in/t.{fmt}" + (".gz" if compressed else ""),
              gzip.compress(data) if compressed else data)
    response = invoke({"source": uri, "filter": "id >= 90",
                       "output": {"uri": f"s3://{RESULTS}/out/"}})
    [out] = response["outputs"]
    got = pl.read_parquet(lake.get(out["uri"]))
    assert_frame_equal(got, oracle(fmt, data).filter(pl.col("id") >= 90))


def select(key: str, sql: str, **extra: Any) -> list[dict[str, Any]]:
    response = invoke({
        "Bucket": DATA, "Key": key, "ExpressionType": "SQL", "Expression": sql,
        "InputSerialization": {"JSON": {"Type": "LINES"}},
        "OutputSerialization": {"JSON": {}}, **extra})
    return [json.loads(line) for line in response["Payload"].splitlines()]


@pytest.mark.parametrize("case", ["json key first at record 101",
                                  "json key first at record 10,001"])
def test_s3_select_sees_a_key_that_first_appears_late(lake: S3Env, case: str) -> None:
    _, data = CASES[case]
    put(lake, "in/late.jsonl", data)
    want = oracle("jsonl", data)
    got = select("in/late.jsonl", "SELECT s.id, s.late FROM S3Object s WHERE s.late IS NOT NULL")
    assert got == want.filter(pl.col("late").is_not_null()).select("id", "late").to_dicts()
    star = select("in/late.jsonl", "SELECT * FROM S3Object s WHERE s.id >= 9990")
    assert [r.get("late") for r in star] == want.filter(pl.col("id") >= 9990)["late"].to_list()


def test_s3_select_compares_numbers_whose_type_widens_late(lake: S3Env) -> None:
    _, data = CASES["json int then 2.5 after row 100"]
    put(lake, "in/widen.jsonl", data)
    got = select("in/widen.jsonl", "SELECT s.id, s.v FROM S3Object s WHERE s.v < 3")
    want = oracle("jsonl", data).filter(pl.col("v") < 3).select("id", "v")
    assert got == want.to_dicts()


def test_s3_select_scan_range_takes_the_whole_objects_columns(lake: S3Env) -> None:
    _, data = CASES["json key first at record 101"]
    put(lake, "in/late.jsonl", data)
    lines = data.splitlines(keepends=True)
    start = sum(len(line) for line in lines[:150])  # the first byte of record 151
    end = start + sum(len(line) for line in lines[150:160]) - 1
    got = select("in/late.jsonl", "SELECT s.id, s.v, s.late FROM S3Object s",
                 ScanRange={"Start": start, "End": end})
    assert got == oracle("jsonl", data).slice(150, 10).select("id", "v", "late").to_dicts()
    # A range of the records before the late key: its column is still the object's.
    early = select("in/late.jsonl", "SELECT s.id, s.late FROM S3Object s",
                   ScanRange={"Start": 0, "End": 10})
    assert early == [{"id": 0, "late": None}]


# ------------------------------------------------------------------------ bounded decoding
def test_a_line_past_the_limit_is_a_typed_error_naming_the_object(
        lake: S3Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S3SLICE_MEMORY_BUDGET_MB", "1")  # lines under 64 KiB
    _entry.reset()
    data = b"id,s\n" + b"".join(b"%d,x\n" % i for i in range(100)) + \
        b"100," + b"y" * (300 << 10) + b"\n"
    uri = put(lake, "in/long.csv", data)
    with pytest.raises(ObjectFormatError, match="65,536 bytes") as info:
        invoke({"source": uri, "output": {"uri": f"s3://{RESULTS}/out/"}})
    assert uri in str(info.value)
    with pytest.raises(ObjectFormatError, match="65,536 bytes"):
        invoke({"Bucket": DATA, "Key": "in/long.csv", "ExpressionType": "SQL",
                "Expression": "SELECT * FROM S3Object",
                "InputSerialization": {"CSV": {"FileHeaderInfo": "USE"}},
                "OutputSerialization": {"CSV": {}}})
    assert lake.keys(RESULTS) == []


def test_a_compression_bomb_is_a_typed_error_naming_the_object(
        lake: S3Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S3SLICE_MEMORY_BUDGET_MB", "1")
    monkeypatch.setenv("S3SLICE_FOOTER_SIZE", str(1 << 20))  # one GET, parsed in memory
    _entry.reset()
    bomb = gzip.compress(b"a\n") + gzip.compress(b"1\n" * (512 << 10)) * 32
    uri = put(lake, "in/bomb.csv.gz", bomb)
    with pytest.raises(ObjectFormatError, match="more than 262,144 bytes") as info:
        invoke({"source": uri, "output": {"uri": f"s3://{RESULTS}/out/"}})
    assert uri in str(info.value)
    assert lake.keys(RESULTS) == []


# A JSON ``{}`` is a struct with no fields in polars and pyarrow (DuckDB: an empty map).
EMPTY_STRUCTS = (b'{"id":1,"e":{},"n":{"in":{}}}\n{"id":2,"e":{},"n":{"in":{}}}\n'
                 b'{"id":3,"e":null,"n":null}\n')


def test_an_empty_struct_column_keeps_its_empty_values_where_text_can_hold_them(
        lake: S3Env) -> None:
    uri = put(lake, "in/empty.jsonl", EMPTY_STRUCTS)
    expected = [json.loads(line) for line in EMPTY_STRUCTS.splitlines() if b'"id":1' not in line]
    inline = invoke({"source": uri, "filter": "id > 1"})
    assert inline["rows"] == expected
    written = invoke({"source": uri, "filter": "id > 1",
                      "output": {"uri": f"s3://{RESULTS}/json/", "format": "json"}})
    [out] = written["outputs"]
    assert [json.loads(line) for line in lake.get(out["uri"]).splitlines()] == expected
    assert select("in/empty.jsonl", "SELECT s.e, s.n FROM s3object s WHERE s.id > 1") == [
        {"e": row["e"], "n": row["n"]} for row in expected]


def test_an_empty_struct_column_is_refused_by_name_for_parquet_output(lake: S3Env) -> None:
    uri = put(lake, "in/empty.jsonl", EMPTY_STRUCTS)
    with pytest.raises(S3SliceError, match=r"column 'n\.in' is a struct with no fields") as e:
        invoke({"source": uri, "columns": ["id", "n"],
                "output": {"uri": f"s3://{RESULTS}/pq/"}})
    assert type(e.value).__name__ == "OutputError"
    assert lake.keys(RESULTS) == []
    # Left out, the rest is written.
    [out] = invoke({"source": uri, "columns": ["id"],
                    "output": {"uri": f"s3://{RESULTS}/pq/"}})["outputs"]
    assert pl.read_parquet(lake.get(out["uri"]))["id"].to_list() == [1, 2, 3]
