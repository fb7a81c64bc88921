"""An output URI that names one object (``s3://b/out/result.parquet``) is written exactly,
for a single result; a request that makes several results, a triggered configuration and
a map batch refuse it by name, before anything is written."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import polars as pl
import pytest

from s3slice import ConfigurationError, RequestError
from s3slice.cli.demo import sample_table
from s3slice.cli.invoke import LambdaContext
from s3slice.cli.local_s3 import LOCAL_CREDENTIALS
from s3slice.entry import dispatch as _entry
from s3slice.entry.config import Config
from s3slice.handler import lambda_handler
from tests.support import S3Env

pytestmark = pytest.mark.integration

SRC, OUT = "file-src", "file-out"


@pytest.fixture
def world(s3: S3Env) -> S3Env:
    s3.bucket(SRC)
    s3.empty_bucket(OUT)
    for i in range(2):
        s3.put_frame(SRC, f"d/part-{i}.parquet", sample_table(2_000, seed=i))
    _entry.reset()
    return s3


@pytest.mark.parametrize(("uri", "reader"), [
    ("out/result.parquet", pl.read_parquet),
    ("out/result.csv", pl.read_csv),
    ("out/result.ndjson", pl.read_ndjson),
])
def test_a_single_result_goes_to_exactly_the_key_named(world: S3Env, uri: str,
                                                       reader: object) -> None:
    response = lambda_handler({"source": f"s3://{SRC}/d/part-0.parquet", "columns": ["col_1"],
                               "output": f"s3://{OUT}/{uri}"}, LambdaContext())
    assert [o["uri"] for o in response["outputs"]] == [f"s3://{OUT}/{uri}"]
    assert world.keys(OUT) == [uri]
    got = reader(io.BytesIO(world.get(f"s3://{OUT}/{uri}")))  # type: ignore[operator]
    assert got.equals(sample_table(2_000, seed=0).select("col_1"))


def test_a_gzip_extension_names_the_compression(world: S3Env) -> None:
    response = lambda_handler({"source": f"s3://{SRC}/d/part-0.parquet", "columns": ["col_1"],
                               "output": f"s3://{OUT}/r.csv.gz"}, LambdaContext())
    [out] = response["outputs"]
    assert out["uri"] == f"s3://{OUT}/r.csv.gz" and out["format"] == "csv"
    assert world.get(out["uri"])[:2] == b"\x1f\x8b"


def test_a_combined_result_may_name_its_key(world: S3Env) -> None:
    response = lambda_handler({"source": f"s3://{SRC}/d/", "sql":
                               "SELECT COUNT(*) AS n FROM s3object",
                               "output": f"s3://{OUT}/count.parquet"}, LambdaContext())
    assert [o["uri"] for o in response["outputs"]] == [f"s3://{OUT}/count.parquet"]
    assert pl.read_parquet(io.BytesIO(world.get(f"s3://{OUT}/count.parquet")))["n"][0] == 4_000


def test_several_results_to_one_named_object_are_refused_before_writing(world: S3Env) -> None:
    with pytest.raises(RequestError, match=r"names one object, but this request makes a result "
                                           r"for each of 2 objects: end the URI with '/'"):
        lambda_handler({"source": f"s3://{SRC}/d/", "columns": ["col_1"],
                        "output": f"s3://{OUT}/out/result.parquet"}, LambdaContext())
    assert world.keys(OUT) == []


def test_a_format_that_contradicts_the_extension_is_refused(world: S3Env) -> None:
    with pytest.raises(RequestError, match="names a csv object, but the format is parquet"):
        lambda_handler({"source": f"s3://{SRC}/d/part-0.parquet", "columns": ["col_1"],
                        "output": {"uri": f"s3://{OUT}/r.csv", "format": "parquet"}},
                       LambdaContext())


def test_triggered_runs_and_map_batches_refuse_a_named_object() -> None:
    with pytest.raises(ConfigurationError, match="S3SLICE_OUTPUT_URI: .* names one object"):
        Config.from_env({"S3SLICE_OUTPUT_URI": "s3://o/result.parquet"})
    with pytest.raises(RequestError, match="BatchInput.output: .* names one object"):
        lambda_handler({"Items": [{"Key": "d/part-0.parquet"}],
                        "BatchInput": {"bucket": SRC, "query": {"columns": ["col_1"]},
                                       "output": "s3://o/result.parquet"}}, LambdaContext())


def test_the_command_line_writes_the_named_key(world: S3Env) -> None:
    env = {**os.environ, **LOCAL_CREDENTIALS, "AWS_ENDPOINT_URL_S3": world.endpoint_url}
    done = subprocess.run([sys.executable, "-m", "s3slice", "query", "--source",
                           f"s3://{SRC}/d/part-1.parquet", "--columns", "col_2", "--output",
                           f"s3://{OUT}/x/result.parquet"], capture_output=True, text=True,
                          timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [o["uri"] for o in json.loads(done.stdout)["outputs"]] == [
        f"s3://{OUT}/x/result.parquet"]
    assert world.keys(OUT) == ["x/result.parquet"]
