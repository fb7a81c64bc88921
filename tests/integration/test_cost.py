"""``stats.cost``: what a request cost as AWS bills it, checked against the requests the
S3 server saw and the duration the response reports."""

from __future__ import annotations

import json
import platform

import pytest

from s3slice import ConfigurationError
from s3slice.cli.demo import sample_table
from s3slice.cli.invoke import LambdaContext
from s3slice.core.settings import LAMBDA_GB_SECOND_PRICES, Settings
from s3slice.entry import dispatch as _entry
from s3slice.handler import lambda_handler
from tests.support import S3Env

pytestmark = pytest.mark.integration

BUCKET = "costs"


@pytest.fixture
def priced(s3: S3Env, monkeypatch: pytest.MonkeyPatch) -> S3Env:
    s3.bucket(BUCKET)
    s3.put_frame(BUCKET, "in/t.parquet", sample_table(40_000, seed=4), row_group_size=10_000)
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1536")
    monkeypatch.setenv("S3SLICE_PRICE_GB_SECOND", "0.00002")
    monkeypatch.setenv("S3SLICE_PRICE_GET_PER_1000", "0.0004")
    monkeypatch.setenv("S3SLICE_PRICE_PUT_PER_1000", "0.005")
    _entry.reset()
    s3.log.clear()
    return s3


def test_a_request_reports_its_gb_seconds_and_dollars(priced: S3Env) -> None:
    response = lambda_handler({"source": f"s3://{BUCKET}/in/t.parquet",
                               "columns": ["col_1"], "filter": "col_1 < 5000",
                               "output": f"s3://{BUCKET}/out/"}, LambdaContext())
    json.dumps(response)
    cost, total_ms = response["stats"]["cost"], response["stats"]["timings_ms"]["total"]
    gb_s = 1.5 * total_ms / 1000
    gets, puts = priced.log.count("GET"), priced.log.count("PUT")
    assert gets >= 1 and puts == 1
    assert cost["memory_mb"] == 1536
    assert cost["gb_s"] == pytest.approx(gb_s, abs=1e-6)
    assert cost["lambda_usd"] == pytest.approx(gb_s * 0.00002, rel=1e-6)
    assert cost["s3_requests_usd"] == pytest.approx((gets * 0.0004 + puts * 0.005) / 1000)
    assert cost["usd"] == pytest.approx(cost["lambda_usd"] + cost["s3_requests_usd"])


def test_a_batch_reports_the_sum_of_its_objects_costs(priced: S3Env, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    priced.put_frame(BUCKET, "in/u.parquet", sample_table(10_000, seed=5))
    monkeypatch.setenv("S3SLICE_QUERY", json.dumps({"columns": ["col_1"]}))
    monkeypatch.setenv("S3SLICE_OUTPUT_URI", f"s3://{BUCKET}/out/")
    _entry.reset()
    event = {"Items": [{"Key": "in/t.parquet"}, {"Key": "in/u.parquet"}],
             "BatchInput": {"bucket": BUCKET}}
    response = lambda_handler(event, LambdaContext())
    assert response["stats"]["cost"]["usd"] > 0
    assert response["stats"]["cost"]["gb_s"] > 0


def test_the_default_price_is_the_list_price_of_the_functions_architecture() -> None:
    assert LAMBDA_GB_SECOND_PRICES == {"arm64": 0.0000133334, "x86_64": 0.0000166667}
    # Outside Lambda the function's architecture is the stack's default, whatever this
    # machine is; on Lambda it is the machine's; a setting names it anywhere.
    assert Settings.from_env({}).gb_second_price == 0.0000133334
    assert Settings.from_env({"S3SLICE_ARCHITECTURE": "x86_64"}).gb_second_price == 0.0000166667
    on_lambda = Settings.from_env({"AWS_LAMBDA_FUNCTION_NAME": "f"})
    assert on_lambda.architecture == ("arm64" if platform.machine() in ("aarch64", "arm64")
                                      else "x86_64")
    assert Settings(price_gb_second=1.0).gb_second_price == 1.0
    with pytest.raises(ConfigurationError, match="S3SLICE_ARCHITECTURE"):
        Settings.from_env({"S3SLICE_ARCHITECTURE": "sparc"})


def test_without_a_known_memory_size_the_duration_cost_is_unknown(
        s3: S3Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside Lambda, with no memory size given, nothing is priced from this machine's RAM:
    gb_s and the dollars that depend on it are null; the S3 requests are still priced."""
    s3.bucket(BUCKET)
    s3.put_frame(BUCKET, "in/t.parquet", sample_table(10_000, seed=4))
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", raising=False)
    _entry.reset()
    s3.log.clear()
    response = lambda_handler({"source": f"s3://{BUCKET}/in/t.parquet", "columns": ["col_1"],
                               "output": f"s3://{BUCKET}/out/"}, LambdaContext())
    cost = response["stats"]["cost"]
    assert cost["gb_s"] is None and cost["memory_mb"] is None
    assert cost["lambda_usd"] is None and cost["usd"] is None
    gets, puts = s3.log.count("GET"), s3.log.count("PUT")
    assert cost["s3_requests_usd"] == pytest.approx((gets * 0.0004 + puts * 0.005) / 1000)
    event = {"Items": [{"Key": "in/t.parquet"}], "BatchInput": {"bucket": BUCKET, "query":
             {"columns": ["col_1"]}, "output": f"s3://{BUCKET}/out/"}}
    batch = lambda_handler(event, LambdaContext())
    assert batch["stats"]["cost"] == {"gb_s": None, "usd": None}


def test_a_memory_size_given_by_the_caller_prices_the_duration() -> None:
    settings = Settings.from_env({}, memory_mb=1024)
    assert settings.function_memory_mb == 1024
    assert Settings.from_env({}).function_memory_mb is None
