"""End to end against a real S3 endpoint on loopback (moto's server mode)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from s3slice import (
    AccessDeniedError,
    FilterSyntaxError,
    ForbiddenQueryError,
    ObjectFormatError,
    ObjectNotFoundError,
    RequestError,
    UnknownColumnError,
)
from s3slice.cli.demo import sample_table
from tests.support import EVENTS, S3Env, invoke

pytestmark = pytest.mark.integration

ROWS = 400_000


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return sample_table(ROWS)


@pytest.fixture
def source(s3: S3Env, table: pl.DataFrame) -> tuple[str, bytes]:
    bucket = s3.bucket("src")
    data = s3.put_frame(bucket, "data/t.parquet", table, row_group_size=50_000,
                        compression="snappy")
    s3.bucket("out")
    s3.log.clear()
    return "s3://src/data/t.parquet", data



def test_columns_and_filter_end_to_end(s3: S3Env, source: tuple[str, bytes],
                                       table: pl.DataFrame) -> None:
    uri, data = source
    response = invoke({"source": uri, "columns": ["col_1", "col_2"], "filter": "col_1 <= 1000",
                       "output": {"uri": "s3://out/results/"}})
    assert response["status"] == "ok"
    stats = response["stats"]
    gets = s3.log.gets()  # before the test reads the output back
    expected = table.filter(pl.col("col_1") <= 1000).select("col_1", "col_2")
    [out] = response["outputs"]
    assert out["uri"].startswith("s3://out/results/data/t.") and out["uri"].endswith(".parquet")
    written = pl.read_parquet(io.BytesIO(s3.get(out["uri"])))
    assert written.sort("col_1", "col_2").equals(expected.sort("col_1", "col_2"))
    assert out["rows"] == stats["rows_out"] == expected.height
    assert stats["object_bytes"] == len(data)
    assert stats["objects"] == 1 and stats["row_groups"] == 8
    assert set(stats["timings_ms"]) == {"plan", "fetch", "execute", "write", "total"}

    # Honest stats: what the service counted is what the server served.
    assert stats["requests"] == len(gets)
    assert stats["bytes_fetched"] == sum(r.body_bytes for r in gets)
    assert s3.log.count("HEAD") == 0
    first = gets[0]
    assert first.range is not None and first.range.startswith("bytes=-")
    assert stats["bytes_fetched"] < len(data) * 0.4


def test_sql_with_return_rows(s3: S3Env, source: tuple[str, bytes], table: pl.DataFrame) -> None:
    uri, _ = source
    response = invoke({"source": uri, "return_rows": True,
                       "sql": "SELECT region, COUNT(*) AS n, MAX(col_3) AS top FROM s3object "
                              "WHERE col_1 <= 20000 GROUP BY region ORDER BY region"})
    expected = (table.filter(pl.col("col_1") <= 20000).group_by("region")
                .agg(n=pl.len(), top=pl.col("col_3").max()).sort("region"))
    assert response["rows"] == expected.to_dicts()
    assert response["outputs"] == []
    assert response["stats"]["row_groups_read"] == 8


def test_retry_overwrites_the_same_output_key(s3: S3Env, source: tuple[str, bytes]) -> None:
    uri, _ = source
    event = {"source": uri, "columns": ["col_1"], "filter": "col_1 < 100",
             "output": {"uri": "s3://out/retry/"}}
    first = invoke(event)["outputs"][0]["uri"]
    second = invoke(event)["outputs"][0]["uri"]
    assert first == second
    assert s3.keys("out", "retry/") == [first[len("s3://out/"):]]


@pytest.mark.parametrize(("fmt", "reader"), [
    ("csv", pl.read_csv), ("json", pl.read_ndjson), ("parquet", pl.read_parquet)])
def test_output_formats(s3: S3Env, source: tuple[str, bytes], table: pl.DataFrame, fmt: str,
                        reader: Any) -> None:
    uri, _ = source
    response = invoke({"source": uri, "columns": ["col_1", "region"], "filter": "col_1 < 300",
                       "output": {"uri": f"s3://out/{fmt}/", "format": fmt}})
    written = reader(io.BytesIO(s3.get(response["outputs"][0]["uri"])))
    expected = table.filter(pl.col("col_1") < 300).select("col_1", "region")
    assert written.sort("col_1", "region").equals(expected.sort("col_1", "region"))


@pytest.mark.parametrize(("event", "error", "names"), [
    ({"source": "s3://src/data/t.parquet", "columns": ["col_1", "colX"]},
     UnknownColumnError, "colX"),
    ({"source": "s3://src/data/t.parquet", "filter": "col_1 <=> > 3"},
     FilterSyntaxError, "filter"),
    ({"source": "s3://src/data/missing.parquet"}, ObjectNotFoundError, "missing.parquet"),
    ({"source": "s3://nobucket/x.parquet"}, ObjectNotFoundError, "nobucket"),
    ({"source": "s3://src/data/t.parquet", "sql": "SELECT * FROM read_csv('/etc/passwd')"},
     ForbiddenQueryError, "read_csv"),
    ({"source": "s3://src/data/t.parquet", "sql": "SELECT * FROM other_table"},
     ForbiddenQueryError, "other_table"),
    ({"sql": "SELECT 1"}, RequestError, "source"),
    ({"source": "s3://src/data/t.parquet", "limit": -5}, RequestError, "limit"),
])
def test_errors_are_typed_and_write_nothing(s3: S3Env, source: tuple[str, bytes],
                                            event: dict[str, Any], error: type[Exception],
                                            names: str) -> None:
    before = s3.keys("out")
    event = {**event, "output": {"uri": "s3://out/errors/"}}
    with pytest.raises(error) as info:
        invoke(event)
    assert names in str(info.value)
    assert s3.keys("out") == before
    assert s3.log.count("PUT") == 0


def test_object_that_is_not_parquet(s3: S3Env, source: tuple[str, bytes]) -> None:
    s3.client.put_object(Bucket="src", Key="data/notes.parquet", Body=b"id,name\n1,x\n" * 50)
    with pytest.raises(ObjectFormatError, match="data/notes.parquet"):
        invoke({"source": "s3://src/data/notes.parquet", "output": {"uri": "s3://out/x/"}})
    assert "x/" not in "".join(s3.keys("out"))


def test_truncated_object(s3: S3Env, source: tuple[str, bytes]) -> None:
    _, data = source
    s3.client.put_object(Bucket="src", Key="data/cut.parquet", Body=data[: len(data) // 2])
    with pytest.raises(ObjectFormatError, match="cut.parquet"):
        invoke({"source": "s3://src/data/cut.parquet"})


def test_denied_request_is_access_denied(s3: S3Env, source: tuple[str, bytes],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # moto enforces bucket policies when credentials are not its default; deny GetObject.
    policy = {"Version": "2012-10-17", "Statement": [{
        "Effect": "Deny", "Principal": "*", "Action": "s3:GetObject",
        "Resource": "arn:aws:s3:::denied/*"}]}
    s3.bucket("denied")
    s3.client.put_object(Bucket="denied", Key="k.parquet", Body=source[1])
    s3.client.put_bucket_policy(Bucket="denied", Policy=json.dumps(policy))
    try:
        with pytest.raises((AccessDeniedError, ObjectNotFoundError)) as info:
            invoke({"source": "s3://denied/k.parquet"})
        assert "denied/k.parquet" in str(info.value)
    finally:
        s3.client.delete_bucket_policy(Bucket="denied")


def test_prefix_source_one_output_per_object(s3: S3Env, table: pl.DataFrame) -> None:
    s3.bucket("many")
    for i in range(3):
        s3.put_frame("many", f"in/part-{i}.parquet", table.slice(i * 1000, 1000))
    s3.bucket("out")
    response = invoke({"source": "s3://many/in/", "columns": ["col_1"],
                       "filter": "col_1 < 500000", "output": {"uri": "s3://out/many/"}})
    assert len(response["outputs"]) == 3
    total = sum(o["rows"] for o in response["outputs"])
    expected = table.slice(0, 3000).filter(pl.col("col_1") < 500000)
    assert total == response["stats"]["rows_out"] == expected.height


def test_invoke_command_on_the_sample_event(s3: S3Env, table: pl.DataFrame,
                                            tmp_path: Path) -> None:
    sample = json.loads((EVENTS / "direct-invoke.json").read_text())
    bucket, _, key = sample["source"][5:].partition("/")
    s3.bucket(bucket)
    s3.put_frame(bucket, key, table.slice(0, 50_000), row_group_size=10_000)
    out_bucket = sample["output"]["uri"][5:].partition("/")[0]
    s3.bucket(out_bucket)
    proc = subprocess.run([sys.executable, "-m", "s3slice", "invoke",
                           str(EVENTS / "direct-invoke.json"), "--endpoint-url", s3.endpoint_url],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    response = json.loads(proc.stdout)
    assert response["status"] == "ok"
    assert response["stats"]["rows_out"] == table.slice(0, 50_000).filter(
        pl.sql_expr(sample["filter"])).height


def test_query_command(s3: S3Env, source: tuple[str, bytes], table: pl.DataFrame) -> None:
    uri, _ = source
    proc = subprocess.run([sys.executable, "-m", "s3slice", "query", "--source", uri,
                           "--columns", "col_1,region", "--filter", "col_1 <= 50",
                           "--return-rows", "--endpoint-url", s3.endpoint_url],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    response = json.loads(proc.stdout)
    expected = table.filter(pl.col("col_1") <= 50).select("col_1", "region")
    got = pl.DataFrame(response["rows"])
    assert got.sort("col_1", "region").equals(expected.sort("col_1", "region"))


def test_query_command_reports_typed_errors(s3: S3Env, source: tuple[str, bytes]) -> None:
    proc = subprocess.run([sys.executable, "-m", "s3slice", "query", "--source", source[0],
                           "--columns", "nope", "--endpoint-url", s3.endpoint_url],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 3  # a typed error of the service
    assert json.loads(proc.stdout)["errorType"] == "UnknownColumnError"


def test_a_page_index_cuts_the_bytes_end_to_end(s3: S3Env, table: pl.DataFrame) -> None:
    import pyarrow.parquet as pq

    bucket = s3.bucket("src")
    s3.bucket("out")
    buf = io.BytesIO()
    pq.write_table(table.sort("col_1").to_arrow(), buf, row_group_size=200_000,
                   write_page_index=True, use_dictionary=False, data_page_size=32 * 1024)
    s3.client.put_object(Bucket=bucket, Key="indexed/t.parquet", Body=buf.getvalue())
    s3.log.clear()
    response = invoke({"source": "s3://src/indexed/t.parquet", "columns": ["col_1", "col_2"],
                       "filter": "col_1 BETWEEN 500000 AND 502000",
                       "output": {"uri": "s3://out/indexed/"}})
    assert response["status"] == "ok"
    stats = response["stats"]
    gets = s3.log.gets()
    [out] = response["outputs"]
    written = pl.read_parquet(io.BytesIO(s3.get(out["uri"])))
    expected = table.filter(pl.col("col_1").is_between(500_000, 502_000)).select(
        "col_1", "col_2")
    assert written.sort("col_1", "col_2").equals(expected.sort("col_1", "col_2"))
    page_index = stats["strategy_inputs"]["page_index"]
    assert page_index["used"] is True
    assert stats["strategy_inputs"]["decoder"] == "pyarrow-pages"
    # the kept pages are a small part of the row group's two column chunks
    assert stats["needed_bytes"] == page_index["page_bytes"]
    assert page_index["page_bytes"] < page_index["row_group_bytes"] / 10
    assert stats["requests"] == len(gets) and s3.log.count("HEAD") == 0
    assert stats["bytes_fetched"] == sum(r.body_bytes for r in gets)


@pytest.mark.parametrize("output", [
    {"compression": "zstd"},  # not the source's codec: decoded, a row group at a time
    {},  # the source's: its column chunks copied
], ids=["streamed", "copied"])
def test_a_large_streamed_output_goes_up_in_parts(s3: S3Env, table: pl.DataFrame,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  output: dict[str, str]) -> None:
    """Every column of a 2M-row object, written as it is computed (or copied) and uploaded
    as a multipart upload of 5 MiB parts: the object read back is the whole table, and the
    PUT requests the stats count are those the server saw."""
    monkeypatch.setenv("S3SLICE_UPLOAD_PART_SIZE", str(5 * 1024 * 1024))
    monkeypatch.setenv("S3SLICE_MEMORY_BUDGET_MB", "200")  # a row group at a time
    big = pl.concat([table.with_columns(pl.col("col_1") + i) for i in range(5)])
    bucket = s3.bucket("src")
    s3.put_frame(bucket, "data/big.parquet", big, row_group_size=250_000, compression="snappy")
    s3.bucket("out")
    s3.log.clear()
    response = invoke({"source": "s3://src/data/big.parquet",
                       "output": {"uri": "s3://out/big/", "format": "parquet", **output}})
    puts = [r for r in s3.log.requests if r.method in ("PUT", "POST")]
    [out] = response["outputs"]
    if output:
        # Every row group is in the image: polars decodes each one's slice of rows.
        assert response["stats"]["strategy_inputs"]["decoder"] == "polars-streamed"
    else:
        assert response["stats"]["strategy"] == "copy"
    assert out["bytes"] > 2 * 5 * 1024 * 1024
    assert len(puts) == -(-out["bytes"] // (5 * 1024 * 1024)) + 2  # create, parts, complete
    # The cost counts the upload's requests at PUT's price, the read's at GET's.
    gets = response["stats"]["requests"]
    assert response["stats"]["cost"]["s3_requests_usd"] == pytest.approx(
        (gets * 0.0004 + len(puts) * 0.005) / 1000)
    written = pl.read_parquet(io.BytesIO(s3.get(out["uri"])))
    assert written.height == out["rows"] == big.height
    assert written.sort("col_1", "col_2").equals(big.sort("col_1", "col_2"))
