"""Selecting columns of a Parquet object, over S3: the answer is the object's column chunks
copied without decoding, equal to the oracle, fetched in the needed bytes only; a request
that filters, or names another codec, is decoded as before; a corrupt chunk writes
nothing."""

from __future__ import annotations

import io
import json
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import pytest

from s3slice import ObjectFormatError, Settings
from s3slice.cli.demo import sample_table
from s3slice.cli.invoke import LambdaContext
from s3slice.handler import lambda_handler
from tests.support import S3Env

pytestmark = pytest.mark.integration

ROWS = 200_000
SOURCE = "s3://copy-src/data/t.parquet"


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return sample_table(ROWS)


@pytest.fixture
def source(s3: S3Env, table: pl.DataFrame) -> bytes:
    s3.bucket("copy-src")
    s3.bucket("copy-out")
    for key in s3.keys("copy-out"):
        s3.client.delete_object(Bucket="copy-out", Key=key)
    data = s3.put_frame("copy-src", "data/t.parquet", table, row_group_size=30_000,
                        compression="snappy")
    s3.log.clear()
    return data


def invoke(**request: Any) -> dict[str, Any]:
    response = lambda_handler({"source": SOURCE, **request}, LambdaContext())
    json.dumps(response)
    return response


def written(s3: S3Env, response: dict[str, Any]) -> bytes:
    (output,) = response["outputs"]
    return s3.get(output["uri"])


@pytest.mark.parametrize("columns", [["col_2"], ["col_3", "col_1"], None])
def test_selected_columns_are_copied_and_equal_the_oracle(
        s3: S3Env, source: bytes, table: pl.DataFrame, columns: list[str] | None) -> None:
    request: dict[str, Any] = {"output": {"uri": "s3://copy-out/r/"}}
    if columns is not None:
        request["columns"] = columns
    response = invoke(**request)
    stats = response["stats"]
    assert stats["strategy"] == "copy"
    data = written(s3, response)
    # The request's order (the file's when every column is asked for).
    in_order = table.columns if columns is None else columns
    assert pl.read_parquet(data).equals(table.select(in_order))
    assert response["outputs"][0]["rows"] == stats["rows_out"] == ROWS
    md = pq.read_metadata(io.BytesIO(source))
    wanted = [i for i, n in enumerate(md.schema.names) if n in in_order]
    chunks = sum(md.row_group(g).column(i).total_compressed_size
                 for g in range(md.num_row_groups) for i in wanted)
    assert stats["needed_bytes"] == chunks
    # The footer's suffix GET, and the chunks: nothing else was fetched.
    assert stats["bytes_fetched"] - chunks <= Settings.from_env().footer_size
    assert pq.read_metadata(io.BytesIO(data)).row_group(0).column(0).compression == "SNAPPY"


@pytest.mark.parametrize(("request_extra", "strategy"), [
    ({"filter": "col_1 <= 20000"}, "ranges"),
    ({"output": {"uri": "s3://copy-out/z/", "compression": "zstd"}}, "ranges"),
    ({"output": {"uri": "s3://copy-out/s/", "compression": "snappy"}}, "copy"),
    ({"limit": 10}, "ranges"),
])
def test_only_a_plain_selection_in_its_own_codec_is_copied(
        s3: S3Env, source: bytes, table: pl.DataFrame, request_extra: dict[str, Any],
        strategy: str) -> None:
    request: dict[str, Any] = {"columns": ["col_1", "col_2"],
                               "output": {"uri": "s3://copy-out/r/"}, **request_extra}
    response = invoke(**request)
    assert response["stats"]["strategy"] == strategy
    frame = pl.read_parquet(written(s3, response))
    oracle = table.select("col_1", "col_2")
    if "filter" in request:
        oracle = oracle.filter(pl.col("col_1") <= 20000)
    if "limit" in request:
        assert frame.height == 10
        return
    assert frame.sort("col_1", "col_2").equals(oracle.sort("col_1", "col_2"))
    given = request["output"].get("compression")
    codec = pq.read_metadata(io.BytesIO(written(s3, response))).row_group(0).column(0)
    # A copy keeps the source's codec; a decoded answer is written in the one named, or zstd.
    assert codec.compression == (given or ("snappy" if strategy == "copy" else "zstd")).upper()


@pytest.mark.parametrize("where", ["header", "payload"])
def test_a_corrupt_chunk_is_an_error_and_writes_nothing(s3: S3Env, source: bytes,
                                                        where: str) -> None:
    """A copy in doubt is not written: the object is decoded as any other, and its damage
    is a typed error."""
    md = pq.read_metadata(io.BytesIO(source))
    col = md.row_group(1).column(md.schema.names.index("col_2"))
    start = col.dictionary_page_offset or col.data_page_offset
    if where == "payload":  # the header intact, the compressed bytes after it not
        start += 100
    broken = bytearray(source)
    broken[start:start + 16] = b"\x00" * 16
    s3.client.put_object(Bucket="copy-src", Key="data/t.parquet", Body=bytes(broken))
    with pytest.raises(ObjectFormatError):
        invoke(columns=["col_2"], output={"uri": "s3://copy-out/r/"})
    assert s3.keys("copy-out") == []


def test_a_footer_over_a_sixteenth_of_the_chunks_is_decoded_instead(s3: S3Env,
                                                                     source: bytes) -> None:
    """Parsing the footer's Thrift form in Python would cost more than decoding the few
    bytes it describes."""
    frame = pl.DataFrame({f"c{i}": range(10_000) for i in range(20)})
    data = s3.put_frame("copy-src", "data/groups.parquet", frame, row_group_size=50)
    md = pq.read_metadata(io.BytesIO(data))
    assert md.serialized_size * 16 > sum(md.row_group(g).column(0).total_compressed_size
                                         for g in range(md.num_row_groups))
    response = lambda_handler({"source": "s3://copy-src/data/groups.parquet",
                               "columns": ["c0"], "output": {"uri": "s3://copy-out/g/"}},
                              LambdaContext())
    assert response["stats"]["strategy"] != "copy"
    assert pl.read_parquet(written(s3, response)).equals(frame.select("c0"))
