"""``s3slice.read_parquet``: polars' vocabulary (source, ``columns=``, ``filter=`` as SQL or
a polars expression, ``n_rows=``, ``storage_options=``, ``credential_provider=``), a
``DataFrame`` back with what the read did on it, against the local S3 server and a plain
polars read as the oracle."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import polars as pl
import pytest

import s3slice
from s3slice import RequestError
from s3slice.cli.demo import sample_table
from s3slice.cli.local_s3 import LOCAL_CREDENTIALS
from tests.support import S3Env, invoke

pytestmark = pytest.mark.integration

BUCKET = "frames"
URI = f"s3://{BUCKET}/sorted.parquet"


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return sample_table(40_000, seed=3).sort("col_1")


@pytest.fixture
def world(s3: S3Env, table: pl.DataFrame) -> S3Env:
    s3.bucket(BUCKET)
    s3.put_frame(BUCKET, "sorted.parquet", table, row_group_size=5_000)
    s3.log.clear()
    return s3


def test_a_sql_filter_is_pushed_down_and_the_stats_are_on_the_frame(
        world: S3Env, table: pl.DataFrame) -> None:
    frame = s3slice.read_parquet(URI, columns=["col_1", "region"], filter="col_1 <= 20000")
    expected = table.filter(pl.col("col_1") <= 20_000).select("col_1", "region")
    assert frame.equals(expected)
    stats = frame.s3slice.stats
    assert stats is not None
    assert stats.row_groups == 8 and stats.row_groups_read == 1  # sorted: one group holds them
    assert stats.rows_out == expected.height
    assert pl.DataFrame({"a": [1]}).s3slice.stats is None


def test_a_polars_expression_filters_the_rows_read(world: S3Env, table: pl.DataFrame) -> None:
    expr = (pl.col("col_2") % 7 == 0) & pl.col("region").is_in(["north", "east"])
    frame = s3slice.read_parquet(URI, columns=["col_1"], filter=expr, n_rows=50)
    assert frame.equals(table.filter(expr).select("col_1").head(50))
    assert frame.s3slice.stats is not None


def test_n_rows_and_every_column(world: S3Env, table: pl.DataFrame) -> None:
    assert s3slice.read_parquet(URI, n_rows=7).equals(table.head(7))


def test_storage_options_give_the_credentials(world: S3Env, table: pl.DataFrame,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION",
                 "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    options = {"aws_access_key_id": LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
               "aws_secret_access_key": LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
               "aws_region": "us-east-1", "aws_endpoint_url": world.endpoint_url}
    frame = s3slice.read_parquet(URI, columns=["col_3"], storage_options=options)
    assert frame.equals(table.select("col_3"))
    assert world.log.gets()  # read from this server, with the keys given


def test_a_polars_credential_provider_is_called(world: S3Env, table: pl.DataFrame,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    calls: list[float] = []

    def provider() -> tuple[dict[str, Any], int | None]:
        calls.append(time.time())
        return ({"aws_access_key_id": LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                 "aws_secret_access_key": LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]},
                int(time.time()) + 3600)

    frame = s3slice.read_parquet(URI, columns=["col_4"], credential_provider=provider)
    assert frame.equals(table.select("col_4"))
    assert calls


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"storage_options": {"aws_secrets": "x"}}, "unknown S3 option"),
    ({"storage_options": {"aws_access_key_id": "x"}}, "aws_secret_access_key"),
    ({"storage_options": {"aws_access_key_id": "x", "aws_secret_access_key": "y"},
      "credential_provider": lambda: ({}, None)}, "not both"),
])
def test_bad_options_are_request_errors(world: S3Env, kwargs: dict[str, Any],
                                        named: str) -> None:
    with pytest.raises(RequestError, match=named):
        s3slice.read_parquet(URI, **kwargs)


def test_the_frame_stats_read_like_the_response_stats(world: S3Env) -> None:
    """``frame.s3slice.stats`` is the mapping a response's ``stats`` is: the same keys and
    counts, printed and dumped as a dict; its keys read as attributes too."""
    frame = s3slice.read_parquet(URI, columns=["col_1"], filter="col_1 <= 20000")
    stats = frame.s3slice.stats
    response = invoke({"source": URI, "columns": ["col_1"], "filter": "col_1 <= 20000",
                       "return_rows": True})
    assert isinstance(stats, Mapping) and isinstance(stats, dict)
    assert set(stats) == set(response["stats"])
    for key in ("objects", "row_groups", "row_groups_read", "rows_in", "rows_out"):
        assert stats[key] == response["stats"][key] == getattr(stats, key), key
    assert repr(stats) == repr(dict(stats)) and str(stats) == str(dict(stats))
    assert json.loads(json.dumps(stats)) == dict(stats)
    with pytest.raises(AttributeError, match="no_such"):
        _ = stats.no_such
