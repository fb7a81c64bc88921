"""S3 Select answers exactly, through the real handler on the local S3 server: records are
split only at their delimiter (never at U+2028 inside a value), NaN and infinities stay
apart from null, binary values are base64 text, ``ScanRange`` with End only is the last
N bytes, a Start past the end is an empty answer, and an output location that holds the
source is refused as in a direct request."""

from __future__ import annotations

import base64
import csv
import io
import json
import math
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3slice import OutputError, RequestError
from s3slice.cli.invoke import LambdaContext
from s3slice.handler import lambda_handler
from tests.support import S3Env

pytestmark = pytest.mark.integration

BUCKET = "select-exact"
#: Every character Python's str.splitlines() splits at, inside values.
LINE_LIKE = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\r"]
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


@pytest.fixture
def bucket(s3: S3Env) -> S3Env:
    s3.empty_bucket(BUCKET)
    return s3


def select(event: dict[str, Any]) -> dict[str, Any]:
    response = lambda_handler(event, LambdaContext())
    json.dumps(response)
    return response


def put_parquet(s3: S3Env, key: str, table: pa.Table) -> None:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    s3.client.put_object(Bucket=BUCKET, Key=key, Body=buf.getvalue())


def parquet_select(key: str, sql: str, output: dict[str, Any]) -> dict[str, Any]:
    return select({"Bucket": BUCKET, "Key": key, "ExpressionType": "SQL", "Expression": sql,
                   "InputSerialization": {"Parquet": {}}, "OutputSerialization": output})


def as_float(value: Any) -> float | None:
    """A JSON record's float, its NaN or infinity given as the documented string."""
    if isinstance(value, str):
        return NON_FINITE[value]
    return None if value is None else float(value)


def strict(constant: str) -> Any:
    """json.loads' hook for NaN and Infinity, which JSON does not have."""
    raise AssertionError(f"not JSON: {constant}")


def same_floats(got: list[float | None], want: list[float | None]) -> bool:
    return len(got) == len(want) and all(
        (g is None and w is None) or (g is not None and w is not None and (
            (math.isnan(g) and math.isnan(w)) or g == w)) for g, w in zip(got, want, strict=True))


# ------------------------------------------------------------ records split at "\n" only

@pytest.mark.parametrize("delimiter", ["\n", ";", "\r\n"])
def test_json_records_split_only_at_newline(bucket: S3Env, delimiter: str) -> None:
    texts = [f"a{c}b" for c in LINE_LIKE] + ["plain", "new\nline"]
    table = pa.table({"id": pa.array(range(len(texts)), pa.int64()), "s": texts})
    put_parquet(bucket, "in/lines.parquet", table)
    response = parquet_select("in/lines.parquet", "SELECT s.id, s.s FROM S3Object s",
                              {"JSON": {"RecordDelimiter": delimiter}})
    payload = response["Payload"]
    assert payload.endswith(delimiter)
    records = [json.loads(r, parse_constant=strict)
               for r in payload[:-len(delimiter)].split(delimiter)]
    assert records == table.to_pylist()  # the oracle: pyarrow's read of the values


# ------------------------------------------------------------ NaN and infinities

FLOATS = [1.5, math.nan, None, math.inf, -math.inf, -0.0, 1e300]


def test_nan_and_infinities_stay_apart_from_null_in_json_records(bucket: S3Env) -> None:
    table = pa.table({"id": pa.array(range(len(FLOATS)), pa.int64()),
                      "x": pa.array(FLOATS, pa.float64()),
                      "f": pa.array(FLOATS, pa.float32()),
                      "l": pa.array([[v, 2.0] for v in FLOATS], pa.list_(pa.float64()))})
    put_parquet(bucket, "in/floats.parquet", table)
    response = parquet_select("in/floats.parquet", "SELECT * FROM S3Object s",
                              {"JSON": {}})
    records = [json.loads(line, parse_constant=strict)
               for line in response["Payload"].split("\n")[:-1]]
    want = pq.read_table(pa.BufferReader(bucket.client.get_object(
        Bucket=BUCKET, Key="in/floats.parquet")["Body"].read())).to_pydict()
    assert [r["id"] for r in records] == want["id"]
    for name in ("x", "f"):
        assert same_floats([as_float(r[name]) for r in records], want[name])
    assert all(same_floats([as_float(v) for v in r["l"]], w)
               for r, w in zip(records, want["l"], strict=True))
    # Only a real null is null.
    assert [r["x"] is None for r in records] == [v is None for v in FLOATS]


def test_nan_inside_a_record_written_to_csv_is_json_text(bucket: S3Env) -> None:
    rows = [{"id": i, "s": {"v": v, "l": [v, 1.0]}} for i, v in enumerate(FLOATS)]
    table = pa.Table.from_pylist(rows)
    put_parquet(bucket, "in/nested-floats.parquet", table)
    response = parquet_select("in/nested-floats.parquet", "SELECT s.id, s.s FROM S3Object s",
                              {"CSV": {}})
    got = list(csv.reader(io.StringIO(response["Payload"])))
    assert [int(i) for i, _ in got] == [r["id"] for r in rows]
    for (_, text), row in zip(got, rows, strict=True):
        record = json.loads(text, parse_constant=strict)  # no bare NaN or Infinity
        assert same_floats([as_float(record["v"]), *map(as_float, record["l"])],
                           [row["s"]["v"], *row["s"]["l"]])


@pytest.mark.parametrize("output", ["JSON", "CSV"])
def test_a_datetime_polars_cannot_show_is_a_typed_error(bucket: S3Env, output: str) -> None:
    far = 9_089_380_393_200_000_000  # 290000-12-30T23:00 in microseconds
    table = pa.table({"ts": pa.array([0, far], pa.int64()).cast(pa.timestamp("us"))})
    put_parquet(bucket, "in/far.parquet", table)
    with pytest.raises(OutputError, match="datetime"):
        parquet_select("in/far.parquet", "SELECT * FROM S3Object s", {output: {}})


# ------------------------------------------------------------ binary values

BLOBS = [b"\x00\xff\xfe", None, b"", b"plain text", bytes(range(256))]


@pytest.mark.parametrize("output", ["JSON", "CSV"])
def test_binary_columns_are_base64_text(bucket: S3Env, output: str) -> None:
    table = pa.table({"id": pa.array(range(len(BLOBS)), pa.int64()),
                      "b": pa.array(BLOBS, pa.binary())})
    put_parquet(bucket, "in/blobs.parquet", table)
    response = parquet_select("in/blobs.parquet", "SELECT s.id, s.b FROM S3Object s",
                              {output: {}})
    if output == "JSON":
        got = [json.loads(line) for line in response["Payload"].split("\n")[:-1]]
        pairs = [(r["id"], r["b"]) for r in got]
    else:
        pairs = [(int(i), b) for i, b in csv.reader(io.StringIO(response["Payload"]))]
    assert [i for i, _ in pairs] == list(range(len(BLOBS)))
    decoded = [None if b is None or (output == "CSV" and b == "" and BLOBS[i] is None)
               else base64.b64decode(b, validate=True) for i, b in pairs]
    assert decoded == BLOBS


# ------------------------------------------------------------ ScanRange

LINES = b"".join(f"{i},row-{i}\n".encode() for i in range(200))


def records_starting_in(data: bytes, first: int, last: int) -> list[str]:
    """The oracle: the first field of each record whose first byte lies in [first, last]."""
    out, pos = [], 0
    for line in data.splitlines(keepends=True):
        if first <= pos <= last:
            out.append(line.decode().split(",")[0])
        pos += len(line)
    return out


def csv_select(scan: dict[str, int], sql: str = "SELECT _1 FROM S3Object",
               header: str = "NONE") -> dict[str, Any]:
    return select({"Bucket": BUCKET, "Key": "in/ranged.csv", "ExpressionType": "SQL",
                   "Expression": sql, "ScanRange": scan,
                   "InputSerialization": {"CSV": {"FileHeaderInfo": header}},
                   "OutputSerialization": {"CSV": {}}})


@pytest.mark.parametrize("n", [1, 7, 100, 1000, len(LINES) - 1, len(LINES), len(LINES) * 2])
def test_a_scan_range_with_end_only_is_the_last_n_bytes(bucket: S3Env, n: int) -> None:
    bucket.client.put_object(Bucket=BUCKET, Key="in/ranged.csv", Body=LINES)
    response = csv_select({"End": n})
    got = [row[0] for row in csv.reader(io.StringIO(response["Payload"]))]
    want = records_starting_in(LINES, max(0, len(LINES) - n), len(LINES) - 1)
    assert got == want
    if n < len(LINES):
        assert "0" not in got  # never the first records


@pytest.mark.parametrize(("header", "body", "sql", "fmt"), [
    ("NONE", LINES, "SELECT _1, _2 FROM S3Object WHERE _1 = '3'", "CSV"),
    ("USE", b"k,v\n" + LINES, "SELECT s.k FROM S3Object s WHERE s.v = 'row-3'", "CSV"),
    ("USE", b"k,v\n" + LINES, "SELECT COUNT(*) FROM S3Object s", "CSV"),
    ("", b"".join(json.dumps({"k": i}).encode() + b"\n" for i in range(50)),
     "SELECT s.k FROM S3Object s WHERE s.k > 3", "JSON"),
])
def test_a_scan_range_starting_past_the_end_is_empty(bucket: S3Env, header: str, body: bytes,
                                                      sql: str, fmt: str) -> None:
    bucket.client.put_object(Bucket=BUCKET, Key="in/ranged.csv", Body=body)
    spec = {"CSV": {"FileHeaderInfo": header}} if fmt == "CSV" else {"JSON": {"Type": "LINES"}}
    for scan in ({"Start": len(body) + 10}, {"Start": len(body) + 10, "End": len(body) + 20},
                 {"End": 0}):
        response = select({"Bucket": BUCKET, "Key": "in/ranged.csv", "ExpressionType": "SQL",
                           "Expression": sql, "ScanRange": scan, "InputSerialization": spec,
                           "OutputSerialization": {"CSV": {}}})
        # The oracle: the same query over no rows.
        want = "0\n" if "COUNT" in sql else ""
        assert response["Payload"] == want, scan


# ------------------------------------------------------------ output inside the source

@pytest.mark.parametrize("prefix", ["", "data/", "data/in"])
def test_an_output_location_holding_the_source_is_refused(bucket: S3Env, prefix: str) -> None:
    bucket.client.put_object(Bucket=BUCKET, Key="data/in/x.csv", Body=b"a\n1\n")
    before = bucket.keys(BUCKET)
    with pytest.raises(RequestError, match="lies under the output location"):
        select({"Bucket": BUCKET, "Key": "data/in/x.csv", "ExpressionType": "SQL",
                "Expression": "SELECT * FROM S3Object",
                "InputSerialization": {"CSV": {"FileHeaderInfo": "USE"}},
                "OutputSerialization": {"CSV": {}},
                "output": {"uri": f"s3://{BUCKET}/{prefix}"}})
    assert bucket.keys(BUCKET) == before  # nothing written


def test_an_output_location_beside_the_source_is_written(bucket: S3Env) -> None:
    bucket.client.put_object(Bucket=BUCKET, Key="data/in/x.csv", Body=b"a\n1\n2\n")
    response = select({"Bucket": BUCKET, "Key": "data/in/x.csv", "ExpressionType": "SQL",
                       "Expression": "SELECT * FROM S3Object",
                       "InputSerialization": {"CSV": {"FileHeaderInfo": "USE"}},
                       "OutputSerialization": {"CSV": {}},
                       "output": {"uri": f"s3://{BUCKET}/data/out/"}})
    [out] = response["outputs"]
    assert out["uri"].startswith(f"s3://{BUCKET}/data/out/")
    assert bucket.get(out["uri"]) == b"1\n2\n"
    assert pl.read_csv(b"a\n1\n2\n")["a"].to_list() == [1, 2]
