"""The S3 Select request shape end to end: CSV, JSON and Parquet inputs, compression,
scan ranges and both output serializations, against the local S3 server."""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
from typing import Any

import polars as pl
import pytest

from s3slice import ObjectFormatError, RequestError, UnknownColumnError
from s3slice.cli.invoke import LambdaContext
from s3slice.handler import lambda_handler
from tests.support import EVENTS, S3Env

pytestmark = pytest.mark.integration

BUCKET = "example-data"
ROWS = [{"order id": f"o-{i}", "region": ["north", "south", "east"][i % 3],
         "amount": str((i * 37) % 250), "note": "has, comma" if i % 7 == 0 else "plain"}
        for i in range(2_000)]


def csv_bytes(*, header: bool = True, delimiter: str = ",") -> bytes:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(ROWS[0]), delimiter=delimiter,
                            lineterminator="\n")
    if header:
        buf.write("# exported by the orders service\n")
        writer.writeheader()
    writer.writerows(ROWS)
    return buf.getvalue().encode()


def expected(rows: list[dict[str, str]]) -> list[list[str]]:
    return [[r["region"], r["order id"]] for r in rows if int(r["amount"]) > 100]


def parse_csv(payload: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(payload)))


@pytest.fixture
def bucket(s3: S3Env) -> S3Env:
    s3.bucket(BUCKET)
    return s3


def select(event: dict[str, Any]) -> dict[str, Any]:
    response = lambda_handler(event, LambdaContext())
    json.dumps(response)
    return response


def test_the_sample_event_gzip_csv_with_header_and_comments(bucket: S3Env) -> None:
    bucket.client.put_object(Bucket=BUCKET, Key="exports/orders.csv.gz",
                             Body=gzip.compress(csv_bytes()))
    event = json.loads((EVENTS / "s3-select.json").read_text())
    response = select(event)
    assert parse_csv(response["Payload"]) == expected(ROWS)
    assert response["Stats"]["BytesReturned"] == len(response["Payload"].encode())
    assert response["Stats"]["BytesScanned"] == bucket.client.head_object(
        Bucket=BUCKET, Key="exports/orders.csv.gz")["ContentLength"]


@pytest.mark.parametrize(("header", "sql"), [
    ("NONE", "SELECT s._2, s._1 FROM S3Object s WHERE CAST(s._3 AS INT) > 100"),
    ("IGNORE", "SELECT _2, _1 FROM s3object WHERE CAST(_3 AS INT) > 100"),
])
def test_positional_columns_for_headerless_csv(bucket: S3Env, header: str, sql: str) -> None:
    data = csv_bytes(header=False, delimiter="|")
    if header == "IGNORE":
        data = b"order id|region|amount|note\n" + data
    bucket.client.put_object(Bucket=BUCKET, Key="exports/plain.csv.bz2", Body=bz2.compress(data))
    response = select({
        "Bucket": BUCKET, "Key": "exports/plain.csv.bz2", "Expression": sql,
        "ExpressionType": "SQL",
        "InputSerialization": {"CSV": {"FileHeaderInfo": header, "FieldDelimiter": "|"},
                               "CompressionType": "BZIP2"},
        "OutputSerialization": {"CSV": {}}})
    assert parse_csv(response["Payload"]) == expected(ROWS)


@pytest.mark.parametrize("kind", ["LINES", "DOCUMENT"])
def test_json_input_and_json_output(bucket: S3Env, kind: str) -> None:
    records = [dict(r, amount=int(r["amount"])) for r in ROWS]
    body = ("\n".join(json.dumps(r) for r in records) if kind == "LINES"
            else json.dumps(records))
    bucket.client.put_object(Bucket=BUCKET, Key=f"exports/orders-{kind}.json", Body=body.encode())
    response = select({
        "Bucket": BUCKET, "Key": f"exports/orders-{kind}.json", "ExpressionType": "SQL",
        "Expression": "SELECT s.region, s.\"order id\" FROM S3Object s WHERE s.amount > 100",
        "InputSerialization": {"JSON": {"Type": kind}},
        "OutputSerialization": {"JSON": {"RecordDelimiter": ";"}}})
    payload = response["Payload"]
    assert payload.endswith(";")
    got = [json.loads(p) for p in payload[:-1].split(";")]
    assert [[g["region"], g["order id"]] for g in got] == expected(ROWS)


NESTED: list[dict[str, Any]] = [{"a": i, "b": {"c": f"x{i % 3}", "d": {"e": i % 7}},
                                 "tags": [f"t{i}-{j}" for j in range(i % 3)]} for i in range(300)]


@pytest.mark.parametrize(("sql", "want"), [
    ("SELECT s.a, s.b.c FROM S3Object s WHERE s.a > 290",
     [{"a": r["a"], "c": r["b"]["c"]} for r in NESTED if r["a"] > 290]),
    ("SELECT s.a FROM S3Object s WHERE s.b.c = 'x1' AND s.b.d.e = 3",
     [{"a": r["a"]} for r in NESTED if r["b"]["c"] == "x1" and r["b"]["d"]["e"] == 3]),
    # Indexes are 0-based; an element past the end is null; an index names by position.
    ("SELECT s.tags[1] FROM S3Object s WHERE s.a < 9",
     [{"_1": r["tags"][1] if len(r["tags"]) > 1 else None} for r in NESTED if r["a"] < 9]),
    ("SELECT s.a, s.tags[0] AS first FROM S3Object s WHERE s.tags[0] = 't5-0'",
     [{"a": 5, "first": "t5-0"}]),
])
def test_path_expressions_over_json_records(bucket: S3Env, sql: str,
                                            want: list[dict[str, Any]]) -> None:
    body = "\n".join(json.dumps(r) for r in NESTED).encode()
    bucket.client.put_object(Bucket=BUCKET, Key="exports/nested.json", Body=body)
    response = select({
        "Bucket": BUCKET, "Key": "exports/nested.json", "ExpressionType": "SQL",
        "Expression": sql, "InputSerialization": {"JSON": {"Type": "LINES"}},
        "OutputSerialization": {"JSON": {}}})
    got = [json.loads(line) for line in response["Payload"].splitlines()]
    assert got == want


def test_unnamed_expressions_are_named_by_position(bucket: S3Env) -> None:
    body = "\n".join(json.dumps(r) for r in NESTED).encode()
    bucket.client.put_object(Bucket=BUCKET, Key="exports/nested.json", Body=body)
    response = select({
        "Bucket": BUCKET, "Key": "exports/nested.json", "ExpressionType": "SQL",
        "Expression": "SELECT COUNT(*), MAX(s.a) AS top, MIN(s.b.d.e), SUM(s.a) + 1 "
                      "FROM S3Object s WHERE s.a < 10",
        "InputSerialization": {"JSON": {"Type": "LINES"}}, "OutputSerialization": {"JSON": {}}})
    assert json.loads(response["Payload"]) == {"_1": 10, "top": 9, "_3": 0, "_4": 46}


def test_csv_output_writes_records_and_lists_as_json_text(bucket: S3Env) -> None:
    body = "\n".join(json.dumps(r) for r in NESTED).encode()
    bucket.client.put_object(Bucket=BUCKET, Key="exports/nested.json", Body=body)
    response = select({
        "Bucket": BUCKET, "Key": "exports/nested.json", "ExpressionType": "SQL",
        "Expression": "SELECT s.a, s.b, s.tags FROM S3Object s WHERE s.a < 5",
        "InputSerialization": {"JSON": {"Type": "LINES"}}, "OutputSerialization": {"CSV": {}}})
    rows = parse_csv(response["Payload"])
    assert [[int(a), json.loads(b), json.loads(t)] for a, b, t in rows] == [
        [r["a"], r["b"], r["tags"]] for r in NESTED if r["a"] < 5]


def test_path_expressions_over_nested_parquet_read_only_the_root(bucket: S3Env) -> None:
    frame = pl.DataFrame(NESTED).with_columns(pad=pl.lit("p" * 200))
    buf = io.BytesIO()
    frame.write_parquet(buf, row_group_size=50, statistics=True)
    bucket.client.put_object(Bucket=BUCKET, Key="exports/nested.parquet", Body=buf.getvalue())
    response = select({
        "Bucket": BUCKET, "Key": "exports/nested.parquet", "ExpressionType": "SQL",
        "Expression": "SELECT s.b.d.e, s.tags[0] FROM S3Object s WHERE s.a BETWEEN 100 AND 104",
        "InputSerialization": {"Parquet": {}}, "OutputSerialization": {"CSV": {}}})
    assert parse_csv(response["Payload"]) == [
        [str(r["b"]["d"]["e"]), r["tags"][0] if r["tags"] else ""]
        for r in NESTED if 100 <= r["a"] <= 104]
    assert response["stats"]["row_groups_read"] == 1  # a's statistics still prune


def test_parquet_input_still_prunes(bucket: S3Env) -> None:
    frame = pl.DataFrame({"k": range(100_000), "v": [i % 11 for i in range(100_000)]})
    buf = io.BytesIO()
    frame.write_parquet(buf, row_group_size=10_000, statistics=True)
    bucket.client.put_object(Bucket=BUCKET, Key="exports/sorted.parquet", Body=buf.getvalue())
    response = select({
        "Bucket": BUCKET, "Key": "exports/sorted.parquet", "ExpressionType": "SQL",
        "Expression": "SELECT s.k FROM S3Object s WHERE s.k BETWEEN 25000 AND 25009",
        "InputSerialization": {"Parquet": {}},
        "OutputSerialization": {"CSV": {"QuoteFields": "ALWAYS"}}})
    assert response["Payload"] == "".join(f'"{k}"\n' for k in range(25_000, 25_010))
    assert response["stats"]["row_groups_read"] == 1
    assert response["stats"]["row_groups"] == 10


@pytest.mark.parametrize(("start", "end"), [(0, 100), (50, 4000), (1000, None), (0, None)])
def test_scan_ranges_pick_records_that_start_inside(bucket: S3Env, start: int,
                                                    end: int | None) -> None:
    data = csv_bytes(header=False)
    bucket.client.put_object(Bucket=BUCKET, Key="exports/ranged.csv", Body=data)
    scan: dict[str, int] = {"Start": start} if end is None else {"Start": start, "End": end}
    response = select({
        "Bucket": BUCKET, "Key": "exports/ranged.csv", "ExpressionType": "SQL",
        "Expression": "SELECT _1 FROM S3Object", "ScanRange": scan,
        "InputSerialization": {"CSV": {"FileHeaderInfo": "NONE"}},
        "OutputSerialization": {"CSV": {}}})
    # The oracle: records whose first byte lies in [start, end].
    last = len(data) - 1 if end is None else end
    starts, pos = [], 0
    for line in data.splitlines(keepends=True):
        starts.append((pos, line))
        pos += len(line)
    want = [next(csv.reader([line.decode()]))[0] for p, line in starts if start <= p <= last]
    assert [row[0] for row in parse_csv(response["Payload"])] == want


def test_records_can_be_written_to_s3_instead(bucket: S3Env) -> None:
    bucket.bucket("example-results")
    bucket.client.put_object(Bucket=BUCKET, Key="exports/orders.csv", Body=csv_bytes())
    event = json.loads((EVENTS / "s3-select.json").read_text())
    event.update(Key="exports/orders.csv", output={"uri": "s3://example-results/select/"})
    event["InputSerialization"]["CompressionType"] = "NONE"
    response = select(event)
    assert "Payload" not in response
    [out] = response["outputs"]
    assert out["uri"].startswith("s3://example-results/select/exports/orders.")
    assert out["uri"].endswith(".csv")
    assert parse_csv(bucket.get(out["uri"]).decode()) == expected(ROWS)


@pytest.mark.parametrize(("change", "error", "needle"), [
    ({"ExpressionType": "XPATH"}, RequestError, "ExpressionType"),
    ({"InputSerialization": {"CSV": {}, "JSON": {}}}, RequestError, "InputSerialization"),
    ({"InputSerialization": {"CSV": {"FileHeaderInfo": "MAYBE"}}}, RequestError,
     "FileHeaderInfo"),
    ({"InputSerialization": {"CSV": {}, "CompressionType": "LZMA"}}, RequestError,
     "CompressionType"),
    ({"OutputSerialization": {"XML": {}}}, RequestError, "OutputSerialization"),
    ({"ScanRange": {"Start": 10, "End": 5}}, RequestError, "ScanRange"),
    ({"Key": 3}, RequestError, "Key"),
    ({"Expression": "SELECT nope FROM S3Object", "InputSerialization":
      {"CSV": {"FileHeaderInfo": "USE", "Comments": "#"}}}, UnknownColumnError, "nope"),
    ({"Expression": "SELECT * FROM read_csv('/etc/passwd')"}, Exception, "not allowed"),
])
def test_bad_select_requests_name_the_problem(bucket: S3Env, change: dict[str, Any],
                                              error: type[Exception], needle: str) -> None:
    bucket.client.put_object(Bucket=BUCKET, Key="exports/orders.csv", Body=csv_bytes())
    event = {"Bucket": BUCKET, "Key": "exports/orders.csv", "ExpressionType": "SQL",
             "Expression": "SELECT * FROM S3Object",
             "InputSerialization": {"CSV": {"Comments": "#"}},
             "OutputSerialization": {"CSV": {}}, **change}
    with pytest.raises(error, match=needle):
        select(event)


def test_a_gzip_claim_on_plain_data_is_a_format_error(bucket: S3Env) -> None:
    bucket.client.put_object(Bucket=BUCKET, Key="exports/orders.csv", Body=csv_bytes())
    with pytest.raises(ObjectFormatError, match="gzip"):
        select({"Bucket": BUCKET, "Key": "exports/orders.csv", "ExpressionType": "SQL",
                "Expression": "SELECT * FROM S3Object",
                "InputSerialization": {"CSV": {}, "CompressionType": "GZIP"},
                "OutputSerialization": {"CSV": {}}})
