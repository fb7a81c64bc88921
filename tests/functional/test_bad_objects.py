"""The catalogue of malformed objects: each is generated from a good one, read through the
engine, and ends in an ``ObjectFormatError`` that names the object and the problem."""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3slice import Engine, FooterCache, LocalFetcher, ObjectFormatError, Settings
from tests.support import read_request

BUCKET = "data"


def good(compression: str = "snappy") -> bytes:
    table = pa.table({"a": list(range(5_000)), "b": [float(i) for i in range(5_000)]})
    buf = io.BytesIO()
    pq.write_table(table, buf, compression=compression, row_group_size=1_000)
    return buf.getvalue()


def footer_length(data: bytes) -> int:
    return int(struct.unpack("<I", data[-8:-4])[0])


def with_footer(data: bytes, footer: bytes) -> bytes:
    body = data[: len(data) - 8 - footer_length(data)]
    return body + footer + struct.pack("<I", len(footer)) + b"PAR1"


def footer_of(data: bytes) -> bytes:
    return data[-8 - footer_length(data):-8]


def unknown_codec(_: bytes) -> bytes:
    """GZIP (2) rewritten to LZO (3) in each column chunk's thrift ``codec`` field (compact
    protocol: field header 0x15, zigzag varint 4 → 6), right after its path."""
    data = good("gzip")
    footer = footer_of(data)
    for column in (b"a", b"b"):
        assert footer.count(b"\x18\x01" + column + b"\x15\x04") == 5
        footer = footer.replace(b"\x18\x01" + column + b"\x15\x04",
                                b"\x18\x01" + column + b"\x15\x06")
    return with_footer(data, footer)


def corrupt_page(data: bytes) -> bytes:
    md = pq.read_metadata(pa.BufferReader(data))
    start = md.row_group(2).column(0).data_page_offset
    return data[:start] + b"\xfe" * 200 + data[start + 200:]


CATALOGUE: list[tuple[str, Callable[[bytes], bytes], str]] = [
    ("zero bytes", lambda d: b"", "0 bytes is too small"),
    ("too small to hold a footer", lambda d: b"PAR1PAR1", "too small"),
    ("wrong magic", lambda d: d[:-4] + b"PAR2", "no PAR1 magic"),
    ("CSV named .parquet", lambda d: b"a,b\n1,2\n" * 100, "no PAR1 magic"),
    ("truncated object", lambda d: d[: len(d) // 2], "no PAR1 magic"),
    ("footer length outside the object",
     lambda d: d[:-8] + struct.pack("<I", len(d) + 1) + b"PAR1", "claims"),
    ("footer length far larger than the object",
     lambda d: d[:-8] + struct.pack("<I", 2**31) + b"PAR1", "claims"),
    ("truncated footer", lambda d: with_footer(d, footer_of(d)[: footer_length(d) // 2]),
     "corrupt Parquet footer"),
    ("footer of garbage", lambda d: with_footer(d, b"\xff" * 300), "corrupt Parquet footer"),
    ("corrupt page", corrupt_page, "corrupt Parquet data"),
    ("unknown codec", unknown_codec, "LZO"),
]


@pytest.mark.parametrize("footer_size", [64 * 1024, 64], ids=["one-tail", "tail-too-small"])
@pytest.mark.parametrize(("name", "make", "message"), CATALOGUE, ids=[c[0] for c in CATALOGUE])
def test_malformed_objects_are_format_errors(tmp_path: Path, name: str,
                                             make: Callable[[bytes], bytes], message: str,
                                             footer_size: int) -> None:
    (tmp_path / BUCKET).mkdir()
    (tmp_path / BUCKET / "x.parquet").write_bytes(make(good()))
    engine = Engine(Settings(memory_mb=1024, footer_size=footer_size),
                    fetcher=LocalFetcher(tmp_path), footer_cache=FooterCache(1 << 20))
    with pytest.raises(ObjectFormatError, match=message) as info:
        read_request(engine, {"source": f"s3://{BUCKET}/x.parquet", "columns": ["a", "b"]})
    assert f"s3://{BUCKET}/x.parquet" in str(info.value)


def test_the_good_object_reads(tmp_path: Path) -> None:
    """The catalogue's base object is itself fine, so each failure is the mutation's."""
    (tmp_path / BUCKET).mkdir()
    (tmp_path / BUCKET / "x.parquet").write_bytes(good())
    engine = Engine(Settings(memory_mb=1024), fetcher=LocalFetcher(tmp_path))
    frame = read_request(engine, {"source": f"s3://{BUCKET}/x.parquet", "filter": "a < 3"}).frame
    assert frame.to_dict(as_series=False) == {"a": [0, 1, 2], "b": [0.0, 1.0, 2.0]}


@pytest.mark.parametrize(("data", "message"), [
    (b'{"a": 1}\n{"a": [1]}\n', "cannot read as JSON"),
    (b'{"a": [1]}\n{"a": {"x": 1}}\n', "cannot read as JSON"),
])
def test_json_with_conflicting_types(tmp_path: Path, data: bytes, message: str) -> None:
    (tmp_path / BUCKET).mkdir()
    (tmp_path / BUCKET / "x.jsonl").write_bytes(data)
    engine = Engine(Settings(memory_mb=1024), fetcher=LocalFetcher(tmp_path))
    with pytest.raises(ObjectFormatError, match=message):
        read_request(engine, {"source": f"s3://{BUCKET}/x.jsonl"})


def test_json_numbers_and_strings_in_one_field_read_as_strings(tmp_path: Path) -> None:
    (tmp_path / BUCKET).mkdir()
    (tmp_path / BUCKET / "x.jsonl").write_bytes(b'{"a": 1}\n{"a": "x"}\n')
    engine = Engine(Settings(memory_mb=1024), fetcher=LocalFetcher(tmp_path))
    frame = read_request(engine, {"source": f"s3://{BUCKET}/x.jsonl"}).frame
    assert frame.schema == pl.Schema({"a": pl.String})
    assert frame["a"].to_list() == ["1", "x"]
