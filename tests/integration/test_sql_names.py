"""Output names as S3 Select gives them (issue 28 §5), through the real handler on the
local S3 server: two outputs of one name are ``a`` and ``a:1`` (polars refused the first
with a DuplicateError, and renamed the wrong column of ``SELECT s.a, s.b AS a``), by a
direct ``sql`` request, S3 Select's ``Expression`` and a query split over many objects.
Values are compared with polars over the same rows, column by column in SELECT order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import polars as pl
import pytest

from s3slice import FOOTER_CACHE
from s3slice.entry import dispatch as _entry
from tests.support import S3Env, invoke

pytestmark = pytest.mark.integration

BUCKET, RESULTS = "names-data", "names-results"
PARTS = [pl.DataFrame({"a": [1, 2, 3], "b": [10, 20, 30]}),
         pl.DataFrame({"a": [1, 4], "b": [40, 50]})]
ALL = pl.concat(PARTS)



@pytest.fixture
def lake(s3: S3Env, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Env]:
    for bucket in (BUCKET, RESULTS):
        s3.empty_bucket(bucket)
    for i, part in enumerate(PARTS):
        s3.put_frame(BUCKET, f"in/part-{i}.parquet", part)
    for name in ("S3SLICE_QUERY", "S3SLICE_OUTPUT_URI", "S3SLICE_SOURCE_URIS"):
        monkeypatch.delenv(name, raising=False)
    _entry.reset()
    FOOTER_CACHE.clear()
    yield s3
    _entry.reset()


def rows(names: list[str], *columns: pl.Series) -> list[dict[str, Any]]:
    """The oracle's records: the columns, in SELECT order, under the expected names."""
    return pl.DataFrame(dict(zip(names, columns, strict=True))).to_dicts()


def direct(sql: str, source: str = "in/part-0.parquet") -> list[dict[str, Any]]:
    response = invoke({"source": f"s3://{BUCKET}/{source}", "sql": sql, "return_rows": True,
                       "output": f"s3://{RESULTS}/out/"})
    got: list[dict[str, Any]] = response["rows"]
    return got


def test_two_outputs_of_one_name_by_a_direct_request(lake: S3Env) -> None:
    p = PARTS[0]
    got = direct("SELECT a, a FROM s3object")
    assert got == rows(["a", "a:1"], p["a"], p["a"])
    assert list(got[0]) == ["a", "a:1"]
    got = direct("SELECT s.a, s.b AS a FROM s3object s")
    assert got == rows(["a", "a:1"], p["a"], p["b"])  # a is a, b is the second
    got = direct("SELECT a, b AS a, a + 1 AS a FROM s3object")
    assert got == rows(["a", "a:1", "a:2"], p["a"], p["b"], p["a"] + 1)


def test_two_outputs_of_one_name_by_s3_select(lake: S3Env) -> None:
    p = PARTS[0]
    for sql, want in [
            ("SELECT s.a, s.a FROM S3Object s", rows(["a", "a:1"], p["a"], p["a"])),
            ("SELECT s.a, s.b AS a FROM S3Object s", rows(["a", "a:1"], p["a"], p["b"])),
            ("SELECT s.b AS a, s.a FROM S3Object s", rows(["a", "a:1"], p["b"], p["a"]))]:
        response = invoke({"Bucket": BUCKET, "Key": "in/part-0.parquet",
                           "ExpressionType": "SQL", "Expression": sql,
                           "InputSerialization": {"Parquet": {}},
                           "OutputSerialization": {"JSON": {}}})
        got = [json.loads(line) for line in response["Payload"].split("\n") if line]
        assert got == want, sql
        assert all(list(r) == list(want[0]) for r in got)


def test_two_outputs_of_one_name_over_many_objects(lake: S3Env) -> None:
    got = direct("SELECT a, COUNT(*) AS n, SUM(b) AS n FROM s3object GROUP BY a ORDER BY a",
                 source="in/")
    oracle = ALL.group_by("a").agg(pl.len().alias("n"), pl.col("b").sum().alias("s")).sort("a")
    assert got == rows(["a", "n", "n:1"], oracle["a"], oracle["n"], oracle["s"])
    got = direct("SELECT a, a FROM s3object ORDER BY a LIMIT 3", source="in/")
    first = ALL.sort("a").head(3)
    assert got == rows(["a", "a:1"], first["a"], first["a"])
