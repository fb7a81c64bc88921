"""One answer over a whole prefix, through the handler on the local S3 server: map batches
of a combining query write partial answers, the reduce step merges them into one output
equal to polars over every object at once, and refuses when a batch is missing."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from s3slice import AccessDeniedError, ObjectNotFoundError, QueryError, RequestError, S3Fetcher
from s3slice.cli.demo import sample_table
from s3slice.entry import dispatch as _entry
from tests.support import S3Env, invoke

pytestmark = pytest.mark.integration

DATA, RESULTS = "reduce-data", "reduce-results"
OUTPUT = f"s3://{RESULTS}/out/"
OBJECTS = 20
BATCH = 7  # the last batch is short


@pytest.fixture(scope="module")
def frames() -> list[pl.DataFrame]:
    return [sample_table(400, seed=i) for i in range(OBJECTS)]


@pytest.fixture
def lake(s3: S3Env, frames: list[pl.DataFrame], monkeypatch: pytest.MonkeyPatch) -> S3Env:
    for bucket in (DATA, RESULTS):
        s3.empty_bucket(bucket)
    for i, frame in enumerate(frames):
        s3.put_frame(DATA, f"in/part-{i:02}.parquet", frame)
    monkeypatch.delenv("S3SLICE_QUERY", raising=False)
    monkeypatch.delenv("S3SLICE_OUTPUT_URI", raising=False)
    _entry.reset()
    return s3


def batches(s3: S3Env, sql: str, run: str) -> list[dict[str, Any]]:
    listed = s3.client.list_objects_v2(Bucket=DATA, Prefix="in/")["Contents"]
    items = [{"Key": o["Key"], "Size": o["Size"], "Etag": o["ETag"]} for o in listed]
    return [{"Items": items[i:i + BATCH],
             "BatchInput": {"bucket": DATA, "query": {"sql": sql}, "output": OUTPUT,
                            "run": run}}
            for i in range(0, len(items), BATCH)]



def reduce_event(sql: str, run: str, n: int) -> dict[str, Any]:
    return {"Reduce": {"run": run, "query": {"sql": sql}, "output": OUTPUT, "batches": n}}


CASES = [
    "SELECT region, COUNT(*) AS n, SUM(col_1) AS s, AVG(col_2) AS m, MIN(col_3) AS lo, "
    "MAX(col_4) AS hi FROM s3object WHERE col_1 < 700000 GROUP BY region ORDER BY region",
    "SELECT COUNT(*) AS n, STDDEV(col_2) AS sd, COUNT(DISTINCT region) AS r FROM s3object",
    "SELECT region, COUNT(*) AS n FROM s3object WHERE col_1 < 50 GROUP BY region "
    "HAVING COUNT(*) > 0 ORDER BY region",  # most batches match nothing
    "SELECT col_1, col_2 FROM s3object ORDER BY col_1 DESC, col_2 LIMIT 15",
    "SELECT DISTINCT region FROM s3object ORDER BY region",
]


@pytest.mark.parametrize("sql", CASES)
def test_batches_and_a_reduce_give_the_answer_over_every_object(
        lake: S3Env, frames: list[pl.DataFrame], sql: str) -> None:
    run = "exec-1"
    events = batches(lake, sql, run)
    assert len(events) == 3 and len(events[-1]["Items"]) == OBJECTS - 2 * BATCH
    partials = [invoke(e) for e in events]
    assert all(p["status"] == "ok" and p["partial"].startswith(f"{OUTPUT}_partials/{run}/")
               for p in partials)
    response = invoke(reduce_event(sql, run, len(events)))
    [output] = response["outputs"]
    got = pl.read_parquet(lake.get(output["uri"]))
    want = pl.SQLContext(s3object=pl.concat(frames)).execute(sql, eager=True)
    # Floating-point sums are regrouped batch by batch: equal within rounding.
    assert_frame_equal(got, want, check_dtypes=False, check_exact=False, rel_tol=1e-9)
    assert response["stats"]["objects"] == OBJECTS
    # the partials are gone; the run's manifest stays (a retried reduce answers from it)
    assert lake.keys(RESULTS, f"out/_partials/{run}/") == [f"out/_partials/{run}/reduced.json"]
    assert output["uri"].startswith(f"{OUTPUT}combined.")


def test_a_missing_batch_makes_the_reduce_refuse(lake: S3Env) -> None:
    sql = CASES[0]
    events = batches(lake, sql, "exec-2")
    for event in events[:-1]:  # the last batch failed
        invoke(event)
    with pytest.raises(ObjectNotFoundError, match="2 partial answer.* the map ran 3"):
        invoke(reduce_event(sql, "exec-2", len(events)))
    assert [k for k in lake.keys(RESULTS) if "combined" in k] == []


def test_a_map_that_ran_no_batch_is_refused_by_name(lake: S3Env) -> None:
    with pytest.raises(ObjectNotFoundError, match="ran no batch"):
        invoke(reduce_event(CASES[0], "exec-empty", 0))
    assert lake.keys(RESULTS) == []


def test_partials_that_cannot_be_deleted_leave_the_answer_standing(
        lake: S3Env, frames: list[pl.DataFrame], monkeypatch: pytest.MonkeyPatch) -> None:
    sql = CASES[0]
    events = batches(lake, sql, "exec-6")
    for event in events:
        invoke(event)
    real = S3Fetcher.delete

    def refuse_one(self: S3Fetcher, bucket: str, key: str) -> None:
        if key.endswith(".parquet") and "_partials/" in key and not refused:
            refused.append(f"s3://{bucket}/{key}")
            raise AccessDeniedError("access denied", uri=refused[-1])
        real(self, bucket, key)
    refused: list[str] = []
    monkeypatch.setattr(S3Fetcher, "delete", refuse_one)
    response = invoke(reduce_event(sql, "exec-6", len(events)))
    assert response["partials_left"] == refused
    [output] = response["outputs"]
    assert lake.keys(RESULTS, "out/_partials/exec-6/") == sorted(
        [refused[0].split("/", 3)[3], "out/_partials/exec-6/reduced.json"])
    got = pl.read_parquet(lake.get(output["uri"]))
    want = pl.SQLContext(s3object=pl.concat(frames)).execute(sql, eager=True)
    assert_frame_equal(got, want, check_dtypes=False, check_exact=False, rel_tol=1e-9)


def test_a_retried_batch_overwrites_its_own_partial(lake: S3Env) -> None:
    sql = CASES[0]
    events = batches(lake, sql, "exec-3")
    first = invoke(events[0])
    again = invoke(events[0])
    assert first["partial"] == again["partial"]
    assert len(lake.keys(RESULTS, "out/_partials/exec-3/")) == 1


def test_a_query_that_does_not_combine_keeps_per_object_outputs(lake: S3Env) -> None:
    sql = "SELECT col_1, region FROM s3object WHERE col_1 < 1000"
    [first, *_] = batches(lake, sql, "exec-4")
    response = invoke(first)
    assert len(response["objects"]) == BATCH
    assert invoke(reduce_event(sql, "exec-4", 3)) == {
        "status": "ok", "reduced": False, "outputs": [], "stats": {}}


@pytest.mark.parametrize(("sql", "combines"), [
    (CASES[0], True),
    ("SELECT col_1, region FROM s3object WHERE col_1 < 1000", False),
])
def test_the_check_step_says_whether_a_query_combines_objects(
        lake: S3Env, sql: str, combines: bool) -> None:
    event = {"Check": {"query": {"sql": sql}, "output": OUTPUT}}
    assert invoke(event) == {"status": "ok", "combines": combines}


@pytest.mark.parametrize(("sql", "construct"), [
    ("SELECT MEDIAN(col_1) AS m FROM s3object", "MEDIAN"),
    ("SELECT col_1, ROW_NUMBER() OVER (ORDER BY col_1) AS r FROM s3object", "ROW_NUMBER"),
])
def test_the_check_step_refuses_a_query_that_cannot_be_split(
        lake: S3Env, sql: str, construct: str) -> None:
    with pytest.raises(QueryError, match=construct):
        invoke({"Check": {"query": {"sql": sql}, "output": OUTPUT}})
    assert lake.keys(RESULTS) == []


def test_the_check_step_refuses_unknown_fields(lake: S3Env) -> None:
    with pytest.raises(RequestError, match="unknown field"):
        invoke({"Check": {"query": {"sql": CASES[0]}, "batches": 3}})
