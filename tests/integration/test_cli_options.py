"""The command line's source and output options, in real subprocesses against the local S3
server: CSV ``--header``/``--quote``/``--delimiter`` on a key whose extension says CSV,
``--output-compression`` and ``--parquet-codec``, the delimiter hint on a record with more
fields than its header, an unknown ``--profile`` and a missing output bucket. Expected
answers come from polars reading the same bytes, or from the bytes written."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import pytest

from s3slice.entry import dispatch as _entry
from tests.integration.test_cli import cli_run, describe
from tests.support import S3Env

pytestmark = pytest.mark.integration

DATA, RESULTS = "cli-opts-data", "cli-opts-results"
#: ';'-delimited, quoted by "'", with a header line.
SEMI = "id;name;note\n1;'Zürich';'a;b'\n2;'Oslo';'it''s'\n"
#: A header of two fields, a record of three: a ';' file read with the default ','.
RAGGED = "a,b\n1,2\n3,4,5\n"


@pytest.fixture
def lake(s3: S3Env) -> Iterator[S3Env]:
    for bucket in (DATA, RESULTS):
        s3.empty_bucket(bucket)
    s3.client.put_object(Bucket=DATA, Key="semi.csv", Body=SEMI.encode())
    s3.client.put_object(Bucket=DATA, Key="ragged.csv", Body=RAGGED.encode())
    s3.put_frame(DATA, "t.parquet", pl.DataFrame({"a": list(range(100)),
                                                  "b": [f"é{i}" for i in range(100)]}))
    _entry.reset()
    yield s3
    _entry.reset()


def run_all(lake: S3Env, *commands: list[str]) -> list[Any]:
    with ThreadPoolExecutor(len(commands)) as pool:
        return list(pool.map(lambda argv: cli_run(lake.endpoint_url, *argv), commands))


@pytest.mark.slow  # subprocesses: the CLI's imports, several seconds
def test_csv_options_on_a_csv_key(lake: S3Env) -> None:
    """--delimiter, --quote and --header with a .csv key and no --input-format; the
    answer equals polars' read of the same text with the same options."""
    source = f"s3://{DATA}/semi.csv"
    use, none = run_all(
        lake,
        ["query", "--source", source, "--sql", "SELECT * FROM s3object", "--delimiter", ";",
         "--quote", "'", "--print", "csv"],
        ["query", "--source", source, "--sql", "SELECT _2, _3 FROM s3object",
         "--delimiter", ";", "--quote", "'", "--header", "ignore", "--print", "csv"])
    for proc in (use, none):
        assert proc.returncode == 0, describe(proc)
    want = pl.read_csv(io.StringIO(SEMI), separator=";", quote_char="'",
                       infer_schema=False)
    assert list(csv.reader(io.StringIO(use.stdout))) == [want.columns, *map(list, want.rows())]
    assert list(csv.reader(io.StringIO(none.stdout))) == [
        ["_2", "_3"], *map(list, want.select("name", "note").rows())]


@pytest.mark.slow  # subprocesses: the CLI's imports, several seconds
def test_output_compression_and_parquet_codec(lake: S3Env) -> None:
    source = f"s3://{DATA}/t.parquet"
    gz, snappy = run_all(
        lake,
        ["query", "--source", source, "--columns", "a,b", "--output", f"s3://{RESULTS}/g/",
         "--format", "json", "--output-compression", "gzip"],
        ["query", "--source", source, "--columns", "a,b", "--filter", "a < 50",
         "--output", f"s3://{RESULTS}/s/", "--parquet-codec", "snappy"])
    for proc in (gz, snappy):
        assert proc.returncode == 0, describe(proc)
    [out] = json.loads(gz.stdout)["outputs"]
    assert out["uri"].endswith(".ndjson.gz")
    lines = gzip.decompress(lake.get(out["uri"])).decode().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"a": i, "b": f"é{i}"} for i in range(100)]
    [out] = json.loads(snappy.stdout)["outputs"]
    meta = pq.ParquetFile(io.BytesIO(lake.get(out["uri"]))).metadata
    codecs = {meta.row_group(g).column(c).compression for g in range(meta.num_row_groups)
              for c in range(meta.num_columns)}
    assert codecs == {"SNAPPY"}


def test_a_ragged_csv_names_the_delimiter(lake: S3Env) -> None:
    [proc] = run_all(lake, ["query", "--source", f"s3://{DATA}/ragged.csv", "--columns", "a",
                            "--print", "csv"])
    assert proc.returncode == 3, describe(proc)
    error = json.loads(proc.stdout)
    assert error["errorType"] == "ObjectFormatError"
    assert "more fields than the header" in error["errorMessage"]
    assert "is ',' the delimiter" in error["errorMessage"]
    assert "--delimiter" in error["errorMessage"]


def test_an_unknown_profile_exits_2_naming_it(lake: S3Env, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config"
    config.write_text("[default]\nregion = us-east-1\n")
    # cli_run passes this environment on to the subprocess.
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(config))
    [proc] = run_all(lake, ["query", "--source", f"s3://{DATA}/t.parquet", "--columns",
                            "a", "--profile", "nosuch"])
    assert proc.returncode == 2, describe(proc)
    assert proc.stdout == ""
    assert "s3slice query: error: the profile 'nosuch' is not defined" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_missing_output_bucket_is_named(lake: S3Env) -> None:
    [proc] = run_all(lake, ["query", "--source", f"s3://{DATA}/t.parquet", "--columns", "a",
                            "--output", "s3://no-such-output-bucket/p/"])
    assert proc.returncode == 3, describe(proc)
    error = json.loads(proc.stdout)
    assert error["errorType"] == "OutputError"
    assert error["errorMessage"].startswith(
        "the output bucket no-such-output-bucket does not exist")
