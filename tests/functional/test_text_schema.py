"""CSV and JSON lines through the engine: column types and columns from every record of the
object, as polars infers them reading the whole object in memory (the oracle), on every
path (one GET in memory, streamed from memory, streamed from /tmp, compressed, many
objects, a large CSV typed by its first rows and widened); and what a text object decodes
to is bounded (its longest line, what it decompresses to), refused typed and fast."""

from __future__ import annotations

import bz2
import gzip
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from polars.testing import assert_frame_equal

import s3slice.text.formats
import s3slice.text.reader
from s3slice import Engine, FooterCache, LocalFetcher, ObjectFormatError, Settings
from s3slice.text.formats import decompressed_file
from tests.support import read_request

BUCKET = "data"
ROWS = 12_000


def zstd(data: bytes) -> bytes:
    out = pa.BufferOutputStream()
    with pa.CompressedOutputStream(out, "zstd") as stream:
        stream.write(data)
    return bytes(out.getvalue().to_pybytes())


CODECS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "none": ("", lambda b: b), "gzip": (".gz", gzip.compress),
    "bzip2": (".bz2", bz2.compress), "zstd": (".zst", zstd)}


def ndjson(value: Callable[[int], dict[str, Any]]) -> bytes:
    return "".join(json.dumps({"id": i, "pad": "p" * 20, **value(i)}) + "\n"
                   for i in range(ROWS)).encode()


def csv(value: Callable[[int], str]) -> bytes:
    return ("id,v,pad\n" + "".join(f"{i},{value(i)},{'p' * 20}\n" for i in range(ROWS))
            ).encode()


#: Objects whose columns or types the first 100 (or 10,000) records do not show.
CASES: dict[str, tuple[str, bytes]] = {
    "json key first at record 101": ("jsonl", ndjson(
        lambda i: {"v": i} if i < 100 else {"v": i, "late": f"x{i}"})),
    "json key first at record 10,001": ("jsonl", ndjson(
        lambda i: {"v": i} if i < 10_000 else {"v": i, "late": i * 2})),
    "json int then 2.5 after row 100": ("jsonl", ndjson(
        lambda i: {"v": 2.5 if i == 150 else i})),
    "json int then 'n/a' after row 100": ("jsonl", ndjson(
        lambda i: {"v": "n/a" if i == 150 else i})),
    "json nested key late": ("jsonl", ndjson(
        lambda i: {"v": {"a": i} if i < 5_000 else {"a": i, "b": [i]}})),
    "csv int then 2.5 after row 100": ("csv", csv(lambda i: "2.5" if i == 150 else str(i))),
    "csv int then n/a after row 100": ("csv", csv(lambda i: "n/a" if i == 150 else str(i))),
    "csv int then 2.5 after row 10,000": ("csv", csv(
        lambda i: "2.5" if i == 11_000 else str(i))),
    "csv empty for 150 rows, then int": ("csv", csv(lambda i: "" if i < 150 else str(i))),
    "csv int then a 128-bit int": ("csv", csv(
        lambda i: "99999999999999999999" if i == 9_000 else str(i))),
}


def oracle(fmt: str, data: bytes) -> pl.DataFrame:
    if fmt == "csv":
        return pl.read_csv(io.BytesIO(data), infer_schema_length=None)
    return pl.read_ndjson(io.BytesIO(data), infer_schema_length=None)


def put(root: Path, key: str, data: bytes) -> str:
    path = root / BUCKET / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return f"s3://{BUCKET}/{key}"


#: How the object is read: one GET parsed in memory; streamed from memory; streamed from a
#: file in /tmp (larger than a quarter of a 1 MB budget).
PATHS: dict[str, dict[str, Any]] = {
    "one GET": {"footer_size": 4 << 20},
    "streamed": {"footer_size": 4096},
    "streamed from tmp": {"footer_size": 4096, "memory_budget_mb": 1},
}


def engine(root: Path, **settings: Any) -> Engine:
    return Engine(Settings(memory_mb=2048, part_size=16 * 1024, **settings),
                  fetcher=LocalFetcher(root), footer_cache=FooterCache(1 << 20))


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_types_and_columns_come_from_every_record(tmp_path: Path, case: str,
                                                  path: str) -> None:
    fmt, data = CASES[case]
    uri = put(tmp_path, f"in/t.{fmt}", data)
    want = oracle(fmt, data)
    got = read_request(engine(tmp_path, **PATHS[path]), {"source": uri})
    assert got.stats.strategy_inputs["streamed"] is (path != "one GET")
    assert got.stats.strategy_inputs["image"] == ("tmp" if path.endswith("tmp") else "memory")
    assert_frame_equal(got.frame, want)
    filtered = read_request(engine(tmp_path, **PATHS[path]),
                            {"source": uri, "filter": "id >= 140 AND id < 10500"})
    assert_frame_equal(filtered.frame, want.filter(pl.col("id").is_between(140, 10_499)))


@pytest.mark.parametrize("codec", ["gzip", "bzip2", "zstd"])
@pytest.mark.parametrize("case", ["json key first at record 101",
                                  "csv int then n/a after row 100",
                                  "csv empty for 150 rows, then int"])
def test_compressed_objects_too(tmp_path: Path, case: str, codec: str) -> None:
    fmt, data = CASES[case]
    suffix, compress = CODECS[codec]
    uri = put(tmp_path, f"in/t.{fmt}{suffix}", compress(data))
    got = read_request(engine(tmp_path, footer_size=4096), {"source": uri})
    assert got.stats.strategy_inputs["compression"] == codec
    assert_frame_equal(got.frame, oracle(fmt, data))


def test_many_objects_each_typed_by_all_its_records(tmp_path: Path) -> None:
    late, typed = CASES["json key first at record 101"][1], CASES[
        "json int then 2.5 after row 100"][1]
    put(tmp_path, "in/a.jsonl", late)
    put(tmp_path, "in/b.jsonl", typed)
    got = read_request(engine(tmp_path, footer_size=4096), {"source": f"s3://{BUCKET}/in/"})
    want = pl.concat([oracle("jsonl", late), oracle("jsonl", typed)], how="diagonal_relaxed")
    assert_frame_equal(got.frame.sort("id", "v"), want.select(got.frame.columns).sort("id", "v"))


# --------------------------------------------- a large CSV, typed by its first rows, widened
@pytest.fixture
def sampled(monkeypatch: pytest.MonkeyPatch) -> list[pl.LazyFrame]:
    """Every CSV counts as large (typed by the rows of its first 4 KiB, about 130); the
    scans run, recorded."""
    monkeypatch.setattr(s3slice.text.formats, "CSV_WHOLE_INFERENCE_BYTES", 0)
    monkeypatch.setattr(s3slice.text.formats, "CSV_SAMPLE_BYTES", 4096)
    runs: list[pl.LazyFrame] = []
    real = s3slice.text.reader.collect_text

    def collect(lf: pl.LazyFrame, *args: Any, **kwargs: Any) -> pl.DataFrame:
        runs.append(lf)
        return real(lf, *args, **kwargs)
    monkeypatch.setattr(s3slice.text.reader, "collect_text", collect)
    return runs


@pytest.mark.parametrize(("case", "runs"), [
    ("csv int then 2.5 after row 10,000", 2),
    ("csv int then 2.5 after row 100", 2), ("csv int then n/a after row 100", 2),
    ("csv int then a 128-bit int", 2),
    # Empty in the first rows: typed by every row from the start.
    ("csv empty for 150 rows, then int", 1)])
def test_a_large_csv_typed_by_its_first_rows_widens(
        tmp_path: Path, sampled: list[pl.LazyFrame], case: str, runs: int) -> None:
    fmt, data = CASES[case]
    uri = put(tmp_path, f"in/t.{fmt}", data)
    got = read_request(engine(tmp_path, footer_size=4096), {"source": uri})
    assert_frame_equal(got.frame, oracle(fmt, data))
    assert len(sampled) == runs


def test_a_large_csv_whose_first_rows_type_it_is_parsed_once(
        tmp_path: Path, sampled: list[pl.LazyFrame]) -> None:
    data = csv(lambda i: f"{i}.5")
    uri = put(tmp_path, "in/t.csv", data)
    got = read_request(engine(tmp_path, footer_size=4096), {"source": uri, "filter": "v > 5"})
    assert_frame_equal(got.frame, oracle("csv", data).filter(pl.col("v") > 5))
    assert len(sampled) == 1


# --------------------------------------------------------------------- bounded decoding
#: A 1 MB budget: lines of 64 KiB or more are refused.
LIMIT = 64 << 10


def long_line(fmt: str, length: int) -> bytes:
    if fmt == "csv":
        return b"id,s\n" + b"".join(b"%d,x\n" % i for i in range(100)) + b"100," + \
            b"y" * length + b"\n101,z\n"
    return b"".join(b'{"id": %d, "s": "x"}\n' % i for i in range(100)) + \
        b'{"id": 100, "s": "' + b"y" * length + b'"}\n'


@pytest.mark.parametrize("codec", ["none", "gzip"])
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize("path", ["one GET", "streamed"])
def test_a_line_past_the_limit_is_refused_naming_the_object_and_limit(
        tmp_path: Path, fmt: str, path: str, codec: str) -> None:
    suffix, compress = CODECS[codec]
    uri = put(tmp_path, f"in/long.{fmt}{suffix}", compress(long_line(fmt, 3 * LIMIT)))
    settings = {**PATHS[path], "memory_budget_mb": 1}
    with pytest.raises(ObjectFormatError, match="65,536 bytes") as info:
        read_request(engine(tmp_path, **settings), {"source": uri})
    assert uri in str(info.value)


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_line_under_the_limit_is_read(tmp_path: Path, fmt: str) -> None:
    data = long_line(fmt, LIMIT // 2)
    uri = put(tmp_path, f"in/long.{fmt}", data)
    got = read_request(engine(tmp_path, footer_size=4096, memory_budget_mb=1),
                       {"source": uri})
    assert_frame_equal(got.frame, oracle("csv" if fmt == "csv" else "jsonl", data))


def test_a_json_document_on_one_line_is_no_long_line(tmp_path: Path) -> None:
    records = [{"id": i, "s": "x" * 50} for i in range(3_000)]  # ~190 KB on one line
    uri = put(tmp_path, "in/doc.json", json.dumps(records).encode())
    got = read_request(engine(tmp_path, footer_size=4096, memory_budget_mb=1),
                       {"source": uri})
    assert_frame_equal(got.frame, pl.DataFrame(records))


@pytest.mark.parametrize("codec", ["gzip", "bzip2", "zstd"])
def test_a_compression_bomb_read_in_memory_is_refused(tmp_path: Path, codec: str) -> None:
    suffix, compress = CODECS[codec]
    # 32 MB of lines, a few KB compressed: concatenated streams (bzip2 of a long run of
    # one byte is slow to make).
    bomb = compress(b"a\n") + compress(b"1\n" * (512 << 10)) * 32
    uri = put(tmp_path, f"in/bomb.csv{suffix}", bomb)
    with pytest.raises(ObjectFormatError, match="more than 262,144 bytes") as info:
        read_request(engine(tmp_path, footer_size=4 << 20, memory_budget_mb=1),
                     {"source": uri})
    assert uri in str(info.value)


def test_a_streamed_decompression_stops_at_its_limit(tmp_path: Path) -> None:
    bomb = gzip.compress(b"1\n" * (16 << 20))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ObjectFormatError, match="more than 1,000,000 bytes"), \
            decompressed_file(bomb, "gzip", str(out), uri="s3://b/k", limit=1_000_000):
        pass
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("path", ["one GET", "streamed"])
def test_a_csv_record_of_too_many_fields_is_refused_before_it_is_parsed(
        tmp_path: Path, path: str) -> None:
    fields = 200_001  # polars would take minutes over these columns
    header = ",".join(f"c{i}" for i in range(fields)).encode()
    uri = put(tmp_path, "in/wide.csv", b"# exported\n" + header + b"\n" + b"1," * (fields - 1)
              + b"1\n")
    with pytest.raises(ObjectFormatError, match="200,001 fields: at most 100,000") as info:
        read_request(engine(tmp_path, footer_size=PATHS[path]["footer_size"]),
                     {"source": uri, "input": {"format": "csv", "comment": "#"}})
    assert uri in str(info.value)


def test_a_csv_of_many_columns_under_the_bound_is_read(tmp_path: Path) -> None:
    frame = pl.DataFrame({f"c{i}": [i, i + 1] for i in range(2_000)})
    buf = io.BytesIO()
    frame.write_csv(buf)
    uri = put(tmp_path, "in/wide.csv", buf.getvalue())
    got = read_request(engine(tmp_path, footer_size=4096), {"source": uri})
    assert_frame_equal(got.frame, frame)


@pytest.mark.parametrize("path", ["one GET", "streamed"])
def test_a_json_document_takes_every_records_keys_and_types(tmp_path: Path, path: str) -> None:
    records = [{"id": i, "v": 2.5 if i == 150 else i, **({"late": f"x{i}"} if i > 200 else {})}
               for i in range(3_000)]
    data = json.dumps(records).encode()
    uri = put(tmp_path, "in/doc.json", data)
    got = read_request(engine(tmp_path, footer_size=PATHS[path]["footer_size"]), {"source": uri})
    assert_frame_equal(got.frame, pl.read_json(io.BytesIO(data), infer_schema_length=None))
    assert got.frame.columns == ["id", "v", "late"]
