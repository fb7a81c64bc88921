"""CSV and JSON inputs: the format from the key, the compression from the data, decompression
(in memory and streamed to a file), S3 Select's scan ranges, and the reading options."""

from __future__ import annotations

import bz2
import dataclasses
import gzip
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from polars.testing import assert_frame_equal

from s3slice import ObjectFormatError, RequestError
from s3slice.core.model import Compression, InputFormat, InputSpec
from s3slice.text.formats import (
    collect_text,
    decompress,
    decompressed_file,
    detect_compression,
    input_for_key,
    read_text,
    scan,
    scan_text,
)

URI = "s3://b/k"
TEXT = b"a,b\n" + b"".join(b"%d,x%d\n" % (i, i) for i in range(300))


CODECS: dict[Compression, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress, "bzip2": bz2.compress,
    "zstd": lambda data: pa.compress(data, "zstd", asbytes=True)}


# ------------------------------------------------------------------------ format and codec

@pytest.mark.parametrize(("key", "fmt", "delimiter"), [
    ("a/b.csv", "csv", ","), ("b.CSV.GZ", "csv", ","), ("b.tsv.bz2", "csv", "\t"),
    ("b.json", "json", ","), ("b.jsonl.zst", "json", ","), ("x/b.ndjson", "json", ","),
    ("b.parquet", "parquet", ","), ("b.pq", "parquet", ","), ("b", "parquet", ","),
    ("b.gz", "parquet", ","), (".csv", "parquet", ","), ("dir.csv/b", "parquet", ","),
    ("b.txt", "parquet", ","),
])
def test_format_from_the_key(key: str, fmt: str, delimiter: str) -> None:
    spec = input_for_key(key, None)
    assert (spec.format, spec.delimiter) == (fmt, delimiter)
    assert spec.compression == ("none" if fmt == "parquet" else "auto")
    given = InputSpec(format="csv")
    assert input_for_key(key, given) is given


@pytest.mark.parametrize(("key", "fmt", "delimiter"), [
    ("d/b.csv.gzip", "csv", ","), ("d/b.json.zstd", "json", ","), ("d/b.TSV.Zst", "csv", "\t"),
    ("d/b.csv.gz.gz", "parquet", ","),  # one compression extension, not two
    ("d/b.parquet.gz", "parquet", ","),
])
def test_the_spec_a_key_gets_past_its_compression_extension(key: str, fmt: InputFormat,
                                                             delimiter: str) -> None:
    spec = input_for_key(key, None)
    if fmt == "parquet":
        assert spec == InputSpec(format="parquet")
    else:  # values typed, a JSON array or lines alike, the codec read from the data
        assert spec == InputSpec(format=fmt, compression="auto", strings_only=False,
                                 json_type="auto", delimiter=delimiter)


@pytest.mark.parametrize(("data", "compression"), [
    (gzip.compress(b"a\n1\n"), "gzip"), (bz2.compress(b"a\n1\n"), "bzip2"),
    (b"\x28\xb5\x2f\xfd" + b"\0" * 8, "zstd"), (b"a\n1\n", "none"), (b"", "none"),
])
def test_compression_from_magic_bytes(data: bytes, compression: str) -> None:
    assert detect_compression(data) == compression


# ---------------------------------------------------------------------------- decompress

@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("declared", ["given", "auto"])
def test_each_codec_decompresses_to_the_original_bytes(codec: Compression,
                                                       declared: str) -> None:
    packed = CODECS[codec](TEXT)
    assert decompress(packed, codec if declared == "given" else "auto", uri=URI) == TEXT


@pytest.mark.parametrize("compression", ["none", "auto"])
def test_plain_data_is_passed_through(compression: Compression) -> None:
    assert decompress(TEXT, compression, uri=URI) == TEXT
    assert decompress(b"", compression, uri=URI) == b""


def test_concatenated_streams_decompress_as_one() -> None:
    first, second = TEXT[:100], TEXT[100:]
    assert decompress(gzip.compress(first) + gzip.compress(second), "gzip", uri=URI) == TEXT
    assert decompress(bz2.compress(first) + bz2.compress(second), "bzip2", uri=URI) == TEXT
    packed = CODECS["zstd"]
    assert decompress(packed(first) + packed(second), "zstd", uri=URI) == TEXT


CORRUPTIONS: dict[str, Callable[[bytes], bytes]] = {
    "cut in half": lambda b: b[:len(b) // 2],
    "trailer lost": lambda b: b[:-3],
    "body zeroed": lambda b: b[:4] + bytes(len(b) - 4),
    "not compressed": lambda b: TEXT,
}


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("corrupt", list(CORRUPTIONS))
def test_corrupt_data_is_an_object_format_error(codec: Compression, corrupt: str) -> None:
    bad = CORRUPTIONS[corrupt](CODECS[codec](TEXT))
    with pytest.raises(ObjectFormatError, match=f"cannot decompress as {codec}") as info:
        decompress(bad, codec, uri=URI)
    assert info.value.uri == URI
    assert info.value.__cause__ is not None


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("source", ["bytes", "file"])
def test_streamed_decompression_gives_the_same_bytes_and_leaves_no_file(
        codec: Compression, source: str, tmp_path: Path) -> None:
    packed = CODECS[codec](TEXT)
    given: str | bytes = packed
    if source == "file":
        (tmp_path / "object").write_bytes(packed)
        given = str(tmp_path / "object")
    out_dir = tmp_path / "tmp"
    out_dir.mkdir()
    with decompressed_file(given, codec, str(out_dir), uri=URI) as out:
        assert isinstance(out, str)
        assert Path(out).parent == out_dir
        assert Path(out).read_bytes() == decompress(packed, codec, uri=URI)
    assert list(out_dir.iterdir()) == []


def test_uncompressed_data_is_streamed_as_itself(tmp_path: Path) -> None:
    with decompressed_file(TEXT, "none", str(tmp_path), uri=URI) as out:
        assert out is TEXT
    with decompressed_file("/some/path", "auto", str(tmp_path), uri=URI) as out:
        assert out == "/some/path"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("corrupt", ["cut in half", "trailer lost", "body zeroed"])
def test_corrupt_data_streamed_is_an_object_format_error_and_leaves_no_file(
        codec: Compression, corrupt: str, tmp_path: Path) -> None:
    bad = CORRUPTIONS[corrupt](CODECS[codec](TEXT))
    with pytest.raises(ObjectFormatError, match=f"cannot decompress as {codec}") as info, \
            decompressed_file(bad, codec, str(tmp_path), uri=URI):
        pass
    assert info.value.uri == URI
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------- scan ranges

def picked_by_s3_select(data: bytes, start: int, end: int | None) -> bytes:
    """The oracle: split into records (each ends after its newline), keep those whose first
    byte lies within [start, end]."""
    last = len(data) - 1 if end is None else end
    out, at = [], 0
    for record in data.splitlines(keepends=True):
        if start <= at <= last:
            out.append(record)
        at += len(record)
    return b"".join(out)


SCANNED = b"h1,h2\n1,a\n22,bb\n\n333,ccc\nlast,no-newline"


def test_every_scan_range_picks_the_records_that_start_within_it() -> None:
    header = SCANNED[:SCANNED.index(b"\n") + 1]
    n = len(SCANNED)
    for start in range(n + 2):
        for end in [*range(start, n + 2), None]:
            body = picked_by_s3_select(SCANNED, start, end)
            assert scan(SCANNED, (start, end), keep_header=False) == body, (start, end)
            with_header = body if start == 0 else header + body
            assert scan(SCANNED, (start, end), keep_header=True) == with_header, (start, end)


def test_a_scan_range_with_end_only_picks_the_records_that_start_in_the_last_bytes() -> None:
    n = len(SCANNED)
    for last_n in range(n + 3):
        body = b"" if last_n == 0 else picked_by_s3_select(SCANNED, max(0, n - last_n), None)
        assert scan(SCANNED, (None, last_n), keep_header=False) == body, last_n
        header = SCANNED[:SCANNED.index(b"\n") + 1]
        with_header = body if last_n >= n else header + body
        assert scan(SCANNED, (None, last_n), keep_header=True) == with_header, last_n


@pytest.mark.parametrize(("spec", "data"), [
    (InputSpec(format="csv", header="none"), b"1,a\n2,b\n"),
    (InputSpec(format="csv", header="use", strings_only=False), b"n,s\n1,a\n2,b\n"),
    (InputSpec(format="json", json_type="lines"), b'{"n":1,"s":"a"}\n{"n":2,"s":"b"}\n'),
])
def test_a_scan_range_holding_no_record_is_no_rows_in_the_objects_columns(
        spec: InputSpec, data: bytes) -> None:
    whole = read_text(data, spec, uri=URI)
    for scan_range in ((len(data) + 5, None), (len(data) + 5, len(data) + 9), (None, 0),
                       (3, 3)):
        got = read_text(data, dataclasses.replace(spec, scan_range=scan_range), uri=URI)
        assert got.height == 0, scan_range
        assert got.schema == whole.schema, scan_range


@pytest.mark.parametrize(("scan_range", "expected"), [
    ((0, 0), b"h1,h2\n"),
    ((0, 5), b"h1,h2\n"),            # the header's newline
    ((0, 6), b"h1,h2\n1,a\n"),       # the first byte of the first record
    ((1, 6), b"1,a\n"),              # a record started before the range is skipped
    ((7, 7), b""),                   # inside a record, none starts here
    ((6, 100), SCANNED[6:]),
    ((16, 16), b"\n"),               # an empty line is a record too
    ((17, None), b"333,ccc\nlast,no-newline"),
    ((len(SCANNED), None), b""),
])
def test_scan_range_examples(scan_range: tuple[int, int | None], expected: bytes) -> None:
    assert scan(SCANNED, scan_range, keep_header=False) == expected


def test_a_scan_range_of_csv_keeps_the_header_for_the_column_names() -> None:
    data = b"n,s\n1,a\n2,b\n3,c\n"
    spec = InputSpec(format="csv", scan_range=(5, 12))  # from inside "1,a" to "3": rows 2, 3
    assert read_text(data, spec, uri=URI).rows() == [("2", "b"), ("3", "c")]
    assert read_text(data, spec, uri=URI).columns == ["n", "s"]
    headerless = InputSpec(format="csv", header="none", scan_range=(5, 12))
    assert read_text(data, headerless, uri=URI).rows() == [("2", "b"), ("3", "c")]
    lines = InputSpec(format="json", json_type="lines", scan_range=(1, 9))
    assert read_text(b'{"n":1}\n{"n":2}\n{"n":3}\n', lines, uri=URI).rows() == [(2,)]


@pytest.mark.parametrize("spec", [
    InputSpec(format="csv", compression="gzip", scan_range=(0, 5)),
    InputSpec(format="csv", compression="bzip2", scan_range=(0, 5)),
    InputSpec(format="json", json_type="document", scan_range=(0, 5)),
    InputSpec(format="json", json_type="auto", scan_range=(0, 5)),
])
def test_a_scan_range_applies_only_to_uncompressed_csv_and_json_lines(
        spec: InputSpec) -> None:
    with pytest.raises(RequestError, match="scan range") as info:
        read_text(b"a\n1\n", spec, uri=URI)
    assert info.value.field == "ScanRange"


# ---------------------------------------------------------------------------- read_text

READS: list[tuple[bytes, InputSpec, pl.DataFrame]] = [
    (b"a,b\n1,x\n2,y\n", InputSpec(format="csv"),
     pl.DataFrame({"a": ["1", "2"], "b": ["x", "y"]})),
    (b"a,b\n1,x\n2,y\n", InputSpec(format="csv", strings_only=False),
     pl.DataFrame({"a": [1, 2], "b": ["x", "y"]})),
    (b"a,b\n1,x\n", InputSpec(format="csv", header="ignore"),
     pl.DataFrame({"_1": ["1"], "_2": ["x"]})),
    (b"a,b\n1,x\n", InputSpec(format="csv", header="none"),
     pl.DataFrame({"_1": ["a", "1"], "_2": ["b", "x"]})),
    (b"a;b\n1;'x;y'\n", InputSpec(format="csv", delimiter=";", quote="'"),
     pl.DataFrame({"a": ["1"], "b": ["x;y"]})),
    (b"a\tb\n1\t2\n", InputSpec(format="csv", delimiter="\t"),
     pl.DataFrame({"a": ["1"], "b": ["2"]})),
    (b"a,b\n#1,2\n3,4\n", InputSpec(format="csv", comment="#", strings_only=False),
     pl.DataFrame({"a": [3], "b": [4]})),
    (b"a,b\n", InputSpec(format="csv"),
     pl.DataFrame(schema={"a": pl.String, "b": pl.String})),
    (b"", InputSpec(format="csv"), pl.DataFrame()),
    (b'{"a":1,"b":"x"}\n{"a":2,"b":null}\n', InputSpec(format="json"),
     pl.DataFrame({"a": [1, 2], "b": ["x", None]})),
    (b'[{"a":1},{"a":2}]', InputSpec(format="json", json_type="document"),
     pl.DataFrame({"a": [1, 2]})),
    (b' [{"a":1},{"a":2}]', InputSpec(format="json", json_type="auto"),
     pl.DataFrame({"a": [1, 2]})),
    (b'{"a":1}\n{"a":2}\n', InputSpec(format="json", json_type="auto"),
     pl.DataFrame({"a": [1, 2]})),
    (b'{\n  "a": 1\n}\n', InputSpec(format="json", json_type="auto"),  # one record, pretty
     pl.DataFrame({"a": [1]})),
    (b"\n", InputSpec(format="json"), pl.DataFrame()),
]


@pytest.mark.parametrize(("data", "spec", "expected"), READS)
def test_read_text_options(data: bytes, spec: InputSpec, expected: pl.DataFrame) -> None:
    assert_frame_equal(read_text(data, spec, uri=URI), expected)


@pytest.mark.parametrize(("data", "spec", "expected"), [
    r for r in READS if r[0].strip()])  # a lazy scan of nothing has no schema to give
def test_the_streamed_scan_reads_what_read_text_reads(data: bytes, spec: InputSpec,
                                                      expected: pl.DataFrame) -> None:
    assert_frame_equal(collect_text(scan_text(data, spec, uri=URI), spec, uri=URI), expected)


@pytest.mark.parametrize(("data", "spec", "needle"), [
    (b"a,b\n1,2,3\n", InputSpec(format="csv"), "cannot read as CSV"),
    (b'{"a":1}\n{"a":', InputSpec(format="json"), "cannot read as JSON"),
    (b"not json", InputSpec(format="json", json_type="auto"), "cannot read as JSON"),
    (b'[{"a":1}', InputSpec(format="json", json_type="document"), "cannot read as JSON"),
])
def test_unreadable_text_is_an_object_format_error(data: bytes, spec: InputSpec,
                                                   needle: str) -> None:
    with pytest.raises(ObjectFormatError, match=needle) as info:
        read_text(data, spec, uri=URI)
    assert info.value.uri == URI
    assert "\n" not in info.value.message
