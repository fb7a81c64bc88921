"""CSV and JSON inputs through the direct contract: the format from the key's extension or
the request, the compression from the data's magic bytes; results equal a polars oracle."""

from __future__ import annotations

import bz2
import gzip
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

import s3slice.text.reader
from s3slice import Engine, FooterCache, LocalFetcher, ObjectFormatError, RecordingFetcher, Settings
from tests.support import read_request

BUCKET = "data"


def zstd(data: bytes) -> bytes:
    out = pa.BufferOutputStream()
    with pa.CompressedOutputStream(out, "zstd") as stream:
        stream.write(data)
    return bytes(out.getvalue().to_pybytes())


CODECS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "none": ("", lambda b: b),
    "gzip": (".gz", gzip.compress),
    "bzip2": (".bz2", bz2.compress),
    "zstd": (".zst", zstd),
}


@pytest.fixture(scope="module")
def frame() -> pl.DataFrame:
    n = 5_000
    return pl.DataFrame({
        "id": list(range(n)),
        "city": [("oslo", "lima", "pune", "kiev")[i % 4] for i in range(n)],
        "amount": [round(i * 0.25, 2) for i in range(n)],
    })


def encode(frame: pl.DataFrame, fmt: str) -> bytes:
    buf = io.BytesIO()
    if fmt == "csv":
        frame.write_csv(buf)
    elif fmt == "tsv":
        frame.write_csv(buf, separator="\t")
    elif fmt == "jsonl":
        frame.write_ndjson(buf)
    else:
        frame.write_json(buf)  # an array of records
    return buf.getvalue()


def engine_for(root: Path) -> tuple[Engine, RecordingFetcher]:
    fetcher = RecordingFetcher(LocalFetcher(root))
    settings = Settings(memory_mb=2048, footer_size=4096, part_size=16 * 1024)
    return Engine(settings, fetcher=fetcher, footer_cache=FooterCache(1 << 20)), fetcher


def put(root: Path, key: str, data: bytes) -> str:
    path = root / BUCKET / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return f"s3://{BUCKET}/{key}"


@pytest.mark.parametrize("codec", sorted(CODECS))
@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl", "json"])
def test_format_from_extension_and_compression_from_magic(
        tmp_path: Path, frame: pl.DataFrame, fmt: str, codec: str) -> None:
    suffix, compress = CODECS[codec]
    uri = put(tmp_path, f"in/t.{fmt}{suffix}", compress(encode(frame, fmt)))
    engine, rec = engine_for(tmp_path)
    result = read_request(engine, {"source": uri, "columns": ["id", "amount"],
                          "filter": "city = 'lima' AND amount > 100"})
    expected = frame.filter((pl.col("city") == "lima") & (pl.col("amount") > 100)).select(
        "id", "amount")
    assert result.frame.equals(expected)
    assert result.stats.strategy == "whole-text"
    inputs = result.stats.strategy_inputs
    assert (inputs["format"], inputs["compression"]) == (
        "csv" if fmt == "tsv" else "json" if fmt == "jsonl" else fmt, codec)
    # Larger than one tail GET: scanned lazily (from memory: far below the budget).
    assert inputs["streamed"] is True
    assert result.stats.rows_in == frame.height
    # The whole object, fetched once: the tail first, then the rest in parts.
    assert result.stats.bytes_fetched == (tmp_path / BUCKET / uri[len("s3://data/"):]
                                             ).stat().st_size
    assert rec.calls[0].kind == "tail"


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_streamed_object_is_parsed_once_and_every_row_counted(
        tmp_path: Path, frame: pl.DataFrame, fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[pl.LazyFrame] = []
    real = s3slice.text.reader.collect_text

    def collect(lf: pl.LazyFrame, *args: Any, **kwargs: Any) -> pl.DataFrame:
        runs.append(lf)
        return real(lf, *args, **kwargs)
    monkeypatch.setattr(s3slice.text.reader, "collect_text", collect)
    uri = put(tmp_path, f"in/t.{fmt}", encode(frame, fmt))
    engine, _ = engine_for(tmp_path)
    result = read_request(engine, {"source": uri, "filter": "amount > 100"})
    assert result.stats.strategy_inputs["streamed"] is True
    assert len(runs) == 1
    assert result.stats.rows_in == frame.height
    assert result.frame.equals(frame.filter(pl.col("amount") > 100))


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_explicit_input_overrides_the_extension(tmp_path: Path, frame: pl.DataFrame,
                                               codec: str) -> None:
    _, compress = CODECS[codec]
    data = compress(encode(frame, "csv").replace(b",", b";"))
    uri = put(tmp_path, "in/export.dat", data)
    engine, _ = engine_for(tmp_path)
    request: dict[str, Any] = {
        "source": uri, "sql": "SELECT city, SUM(amount) AS total FROM s3object GROUP BY city",
        "input": {"format": "csv", "delimiter": ";", "compression": codec}}
    result = read_request(engine, request)
    expected = frame.group_by("city").agg(pl.col("amount").sum().alias("total"))
    assert result.frame.sort("city").equals(expected.sort("city"))


def test_strings_only_and_headerless(tmp_path: Path) -> None:
    uri = put(tmp_path, "in/x.csv", b"1,a\n2,b\n10,c\n")
    engine, _ = engine_for(tmp_path)
    typed = read_request(engine, {"source": uri, "filter": "_1 > 1",
                         "input": {"format": "csv", "header": False}})
    assert typed.frame.to_dict(as_series=False) == {"_1": [2, 10], "_2": ["b", "c"]}
    strings = read_request(engine, {"source": uri, "filter": "_1 > '1'",
                           "input": {"format": "csv", "header": False, "infer_types": False}})
    # Compared as text, as in S3 Select: "10" > "1" and "2" > "1".
    assert strings.frame.to_dict(as_series=False) == {"_1": ["2", "10"], "_2": ["b", "c"]}


@pytest.mark.parametrize("padding", [0, 20_000])
def test_a_json_document_of_one_record(tmp_path: Path, padding: int) -> None:
    uri = put(tmp_path, "in/one.json",
              b'{\n  "a": 1,\n  "b": "x"' + b" " * padding + b"\n}\n")
    engine, _ = engine_for(tmp_path)
    result = read_request(engine, {"source": uri})
    assert result.frame.to_dict(as_series=False) == {"a": [1], "b": ["x"]}
    assert result.stats.strategy_inputs["streamed"] is (padding > 0)


@pytest.mark.parametrize(("key", "data", "message"), [
    ("in/t.csv.zst", b"\x28\xb5\x2f\xfd" + b"\x01" * 40, "cannot decompress as zstd"),
    ("in/t.csv.gz", gzip.compress(b"a,b\n1,2\n" * 100)[:-20], "cannot decompress as gzip"),
    ("in/t.json", b'{"a": 1}\n{"a": \n', "cannot read as JSON"),
    ("in/t.csv", b"a,b\n1,2\n3,4,5\n", "cannot read as CSV"),
    ("in/t.csv", b"a,b\n\xff\xfe,2\n", "cannot read as CSV"),
    ("in/t.gz", gzip.compress(b"a,b\n1,2\n"), "not a Parquet object"),
    ("in/t.txt", b"hello, this is not parquet\n" * 10, "not a Parquet object"),
])
@pytest.mark.parametrize("large", [False, True], ids=["in-memory", "streamed"])
def test_bad_text_objects_are_typed_errors(tmp_path: Path, key: str, data: bytes,
                                           message: str, large: bool) -> None:
    if large and key.endswith((".csv", ".json")):
        # The fault comes after many good records, past the first tail GET.
        good = b'{"a": 1}\n' if key.endswith(".json") else b"1,2\n"
        header, _, rest = data.partition(b"\n")
        data = (header + b"\n" + good * 5_000 + rest if key.endswith(".csv")
                else good * 5_000 + data)
    uri = put(tmp_path, key, data)
    engine, _ = engine_for(tmp_path)
    with pytest.raises(ObjectFormatError, match=message) as info:
        read_request(engine, {"source": uri})
    assert uri in str(info.value)
