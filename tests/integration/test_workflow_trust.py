"""The workflow trusts only what it checks (issue 28 §5 and §6), through the real handler on
the local S3 server:

- a Distributed Map's items that a read of the prefix skips (a folder marker ``spark/``
  and the empty ``_SUCCESS`` of a Spark output folder) are skipped by a batch too, by the
  engine's own rule, and counted in its stats, whether the query combines objects or not
  and however the items are batched; an empty object that is named explicitly is a
  permanent ``ObjectFormatError``, never a retryable error;
- a batch's query error is the query's typed error, not an ``ObjectFormatError`` of the
  object it was reading;
- a partial names its query and its run, and the reduce refuses a partial of another
  query (a batch run again with another query) or another run with a typed error;
- a reduce run again after it completed (the workflow retries the reduce) answers with
  the answer it wrote, and refuses when that answer has been removed since.

Answers are compared with polars over the objects' frames (the oracle), never with an
earlier answer of s3slice.
"""

from __future__ import annotations

import io
import json
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

from s3slice import (
    FOOTER_CACHE,
    AccessDeniedError,
    ObjectFormatError,
    ObjectNotFoundError,
    QueryError,
    S3Fetcher,
    S3SliceError,
)
from s3slice.cli.demo import sample_table
from s3slice.entry import dispatch as _entry
from tests.support import EVENTS, S3Env, invoke

pytestmark = pytest.mark.integration

DATA, RESULTS = "trust-data", "trust-results"
OUTPUT = f"s3://{RESULTS}/out/"
#: A Spark output folder: its marker, its _SUCCESS, and two parts.
SPARK = ["spark/", "spark/_SUCCESS", "spark/part-00000.parquet", "spark/part-00001.parquet"]
COMBINING = ("SELECT region, COUNT(*) AS n, SUM(col_1) AS s FROM s3object "
             "GROUP BY region ORDER BY region")
PER_OBJECT = "SELECT col_1, region FROM s3object WHERE col_1 < 300000"


@pytest.fixture(scope="module")
def frames() -> list[pl.DataFrame]:
    return [sample_table(300, seed=40 + i) for i in range(4)]


@pytest.fixture
def lake(s3: S3Env, frames: list[pl.DataFrame], monkeypatch: pytest.MonkeyPatch) -> S3Env:
    for bucket in (DATA, RESULTS):
        s3.empty_bucket(bucket)
    s3.client.put_object(Bucket=DATA, Key="spark/", Body=b"")
    s3.client.put_object(Bucket=DATA, Key="spark/_SUCCESS", Body=b"")
    s3.put_frame(DATA, "spark/part-00000.parquet", frames[0])
    s3.put_frame(DATA, "spark/part-00001.parquet", frames[1])
    for i, frame in enumerate(frames):
        s3.put_frame(DATA, f"in/part-{i}.parquet", frame)
    for name in ("S3SLICE_QUERY", "S3SLICE_OUTPUT_URI", "S3SLICE_SOURCE_URIS"):
        monkeypatch.delenv(name, raising=False)
    _entry.reset()
    FOOTER_CACHE.clear()
    return s3



def items(s3: S3Env, prefix: str) -> list[dict[str, Any]]:
    """The prefix's objects as a Distributed Map's ItemReader lists them."""
    listed = s3.client.list_objects_v2(Bucket=DATA, Prefix=prefix)["Contents"]
    return [{"Key": o["Key"], "Size": o["Size"], "Etag": o["ETag"]} for o in listed]


def batch_events(s3: S3Env, prefix: str, sql: str, run: str | None, size: int
                 ) -> list[dict[str, Any]]:
    listed = items(s3, prefix)
    batch_input: dict[str, Any] = {"bucket": DATA, "query": {"sql": sql}, "output": OUTPUT}
    if run is not None:
        batch_input["run"] = run
    return [{"Items": listed[i:i + size], "BatchInput": batch_input}
            for i in range(0, len(listed), size)]


def reduce_event(sql: str, run: str, batches: int) -> dict[str, Any]:
    return {"Reduce": {"run": run, "query": {"sql": sql}, "output": OUTPUT,
                       "batches": batches}}


def oracle(frames: list[pl.DataFrame], sql: str) -> pl.DataFrame:
    return pl.SQLContext(s3object=pl.concat(frames)).execute(sql, eager=True)


def read(s3: S3Env, uri: str) -> pl.DataFrame:
    return pl.read_parquet(s3.get(uri))


# ------------------------------------------------------- §5: folder markers, empty objects
def test_the_listing_holds_a_marker_and_an_empty_success(lake: S3Env) -> None:
    """The case as S3 lists it: without this the tests below would prove nothing."""
    sizes = {it["Key"]: it["Size"] for it in items(lake, "spark/")}
    assert sorted(sizes) == SPARK
    assert sizes["spark/"] == 0 and sizes["spark/_SUCCESS"] == 0


@pytest.mark.parametrize("size", [1, 2, 4])
def test_a_spark_folder_maps_and_reduces_as_a_read_of_the_prefix(
        lake: S3Env, frames: list[pl.DataFrame], size: int) -> None:
    run = f"spark-{size}"
    events = batch_events(lake, "spark/", COMBINING, run, size)
    partials = [invoke(e) for e in events]
    assert all(p["status"] == "ok" and "partial" in p for p in partials)
    assert sum(p["stats"]["objects_skipped"] for p in partials) == 2
    assert sum(p["stats"]["objects"] for p in partials) == 2
    skipped = sorted(s["source"] for p in partials for s in p.get("skipped", []))
    assert skipped == [f"s3://{DATA}/spark/", f"s3://{DATA}/spark/_SUCCESS"]
    response = invoke(reduce_event(COMBINING, run, len(events)))
    want = oracle(frames[:2], COMBINING)
    assert_frame_equal(read(lake, response["outputs"][0]["uri"]), want, check_dtypes=False)
    assert response["stats"]["objects"] == 2
    assert response["stats"]["objects_skipped"] == 2
    # the direct read of the prefix skips the same two, and gives the same answer
    direct = invoke({"source": f"s3://{DATA}/spark/", "sql": COMBINING, "return_rows": True})
    assert_frame_equal(pl.DataFrame(direct["rows"]), want, check_dtypes=False)


@pytest.mark.parametrize("run", [None, "spark-per-object"])
def test_a_spark_folder_per_object_skips_the_marker_and_success(
        lake: S3Env, frames: list[pl.DataFrame], run: str | None) -> None:
    [event] = batch_events(lake, "spark/", PER_OBJECT, run, 4)
    response = invoke(event)
    by_source = {o["source"]: o for o in response["objects"]}
    for key in ("spark/", "spark/_SUCCESS"):
        assert by_source[f"s3://{DATA}/{key}"]["status"] == "skipped"
        assert "empty object" in by_source[f"s3://{DATA}/{key}"]["reason"]
    assert response["stats"]["objects_skipped"] == 2
    assert response["stats"]["objects"] == 2
    for i in range(2):
        [uri] = by_source[f"s3://{DATA}/spark/part-0000{i}.parquet"]["outputs"]
        assert_frame_equal(read(lake, uri), oracle([frames[i]], PER_OBJECT))


def test_a_single_item_that_is_a_success_marker_is_skipped(lake: S3Env) -> None:
    [success] = [it for it in items(lake, "spark/") if it["Key"] == "spark/_SUCCESS"]
    response = invoke({"Item": success, "BatchInput": {"bucket": DATA, "output": OUTPUT,
                                                       "query": {"sql": PER_OBJECT}}})
    assert [o["status"] for o in response["objects"]] == ["skipped"]
    assert lake.keys(RESULTS) == []


def test_a_run_whose_batches_had_nothing_to_read_is_refused_by_name(lake: S3Env) -> None:
    listed = [it for it in items(lake, "spark/") if it["Size"] == 0]
    events = [{"Items": [it], "BatchInput": {"bucket": DATA, "query": {"sql": COMBINING},
                                             "output": OUTPUT, "run": "nothing"}}
              for it in listed]
    partials = [invoke(e) for e in events]
    assert [p["stats"]["objects"] for p in partials] == [0, 0]
    with pytest.raises(ObjectNotFoundError, match="no batch of run 'nothing' had an object"):
        invoke(reduce_event(COMBINING, "nothing", len(events)))
    assert [k for k in lake.keys(RESULTS) if "combined" in k] == []


def success_notification(size: int | None) -> dict[str, Any]:
    obj: dict[str, Any] = {"key": "spark/_SUCCESS", "eTag": "d41d8cd98f00b204e9800998ecf8427e"}
    if size is not None:
        obj["size"] = size
    return {"Records": [{"eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
                         "s3": {"bucket": {"name": DATA}, "object": obj}}]}


def success_eventbridge() -> dict[str, Any]:
    event = json.loads((EVENTS / "eventbridge-object-created.json").read_text())
    event["detail"]["bucket"]["name"] = DATA
    event["detail"]["object"].update(key="spark/_SUCCESS", size=0,
                                     etag="d41d8cd98f00b204e9800998ecf8427e")
    return dict(event)


@pytest.mark.parametrize("event", [
    pytest.param(success_notification(0), id="s3-notification-size-0"),
    pytest.param(success_eventbridge(), id="eventbridge-size-0"),
    pytest.param(success_notification(None), id="s3-notification-no-size"),
    pytest.param({"source": f"s3://{DATA}/spark/_SUCCESS", "columns": ["col_1"],
                  "output": OUTPUT}, id="direct"),
])
def test_an_empty_object_named_explicitly_is_a_permanent_format_error(
        lake: S3Env, monkeypatch: pytest.MonkeyPatch, event: dict[str, Any]) -> None:
    monkeypatch.setenv("S3SLICE_QUERY", json.dumps({"columns": ["col_1"]}))
    monkeypatch.setenv("S3SLICE_OUTPUT_URI", OUTPUT)
    _entry.reset()
    with pytest.raises(S3SliceError) as info:
        invoke(event)
    assert type(info.value) is ObjectFormatError, info.value
    assert info.value.to_dict()["retryable"] is False
    assert "spark/_SUCCESS" in str(info.value)
    assert lake.keys(RESULTS) == []


# ---------------------------------------------------------------- §5: a batch's query error
def error_of(event: dict[str, Any]) -> S3SliceError | None:
    try:
        invoke(event)
    except S3SliceError as e:
        return e
    return None


@pytest.mark.parametrize("sql", [
    "SELECT CAST(col_1 AS DECIMAL(2, 5)) AS d FROM s3object",        # a native panic
    "SELECT CAST(col_1 AS DECIMAL(2, 5)) AS d, COUNT(*) AS n FROM s3object GROUP BY d",
    "SELECT col_1 AS x, region AS x FROM s3object",                  # a duplicate name
    "SELECT region, COUNT(*) AS x, MAX(col_2) AS x FROM s3object GROUP BY region",
])
@pytest.mark.parametrize("run", [None, "query-error"])
def test_a_batch_reports_the_query_error_as_the_query_s(
        lake: S3Env, sql: str, run: str | None) -> None:
    """What the direct read of the same objects says is what the batch says: a
    ``QueryError`` (or one of its kinds), never an ``ObjectFormatError`` of an object
    (and if the query runs, it runs in the batch too). Without a run the batch answers
    each object on its own, as a direct read of one object does; with one, it reads
    them together, as a direct read of the prefix does."""
    [event] = batch_events(lake, "in/", sql, run, 4)
    source = f"s3://{DATA}/in/" if run else f"s3://{DATA}/in/part-0.parquet"
    direct = error_of({"source": source, "sql": sql, "return_rows": True})
    in_batch = error_of(event)
    assert type(in_batch) is type(direct), (direct, in_batch)
    assert not isinstance(in_batch, ObjectFormatError)
    if in_batch is not None:
        assert isinstance(in_batch, QueryError) and not in_batch.to_dict()["retryable"]
        assert [k for k in lake.keys(RESULTS) if "_partials" not in k] == []


def test_a_batch_s_native_query_panic_is_a_query_error(lake: S3Env) -> None:
    """The panic case alone, so that the comparison above is never between two answers."""
    [event] = batch_events(lake, "in/", "SELECT CAST(col_1 AS DECIMAL(2, 5)) AS d "
                           "FROM s3object", None, 4)
    with pytest.raises(QueryError):
        invoke(event)


# ------------------------------------------------------------------- §6: partials' identity
def partial_identity(s3: S3Env, uri: str) -> dict[str, Any]:
    metadata = pq.read_metadata(io.BytesIO(s3.get(uri))).metadata
    assert metadata is not None
    identity: dict[str, Any] = json.loads(metadata[b"s3slice.partial"])
    return identity


def test_a_partial_names_its_query_and_its_run(lake: S3Env) -> None:
    events = batch_events(lake, "in/", COMBINING, "named", 2)
    first, second = (invoke(e) for e in events)
    one = partial_identity(lake, first["partial"])
    assert one["run"] == "named" and one["empty"] is False
    assert partial_identity(lake, second["partial"])["query"] == one["query"]
    other = batch_events(lake, "in/", "SELECT region, COUNT(*) AS n FROM s3object "
                         "GROUP BY region", "named-2", 2)
    assert partial_identity(lake, invoke(other[0])["partial"])["query"] != one["query"]


def test_a_batch_run_again_with_another_query_makes_the_reduce_refuse(
        lake: S3Env, frames: list[pl.DataFrame]) -> None:
    run = "requeried"
    events = batch_events(lake, "in/", COMBINING, run, 2)
    for event in events:
        invoke(event)
    other_sql = COMBINING.replace("COUNT(*)", "COUNT(col_2)").replace("SUM(col_1)",
                                                                      "SUM(col_2)")
    assert not oracle(frames, other_sql).equals(oracle(frames, COMBINING))
    again = {**events[0], "BatchInput": {**events[0]["BatchInput"],
                                         "query": {"sql": other_sql}}}
    invoke(again)  # overwrites the first batch's partial with another query's
    with pytest.raises(QueryError, match="partial answer of query .* where this reduce is"):
        invoke(reduce_event(COMBINING, run, len(events)))
    assert [k for k in lake.keys(RESULTS) if "combined" in k] == []
    # the batch run once more with the run's query: the reduce answers
    invoke(events[0])
    response = invoke(reduce_event(COMBINING, run, len(events)))
    assert_frame_equal(read(lake, response["outputs"][0]["uri"]), oracle(frames, COMBINING),
                       check_dtypes=False)


def test_a_partial_of_another_run_makes_the_reduce_refuse(lake: S3Env) -> None:
    for event in batch_events(lake, "in/", COMBINING, "run-a", 2):
        invoke(event)
    [first, *_] = batch_events(lake, "in/", COMBINING, "run-b", 2)
    invoke(first)
    # the same batch's partial of another run, copied over this run's
    [key] = lake.keys(RESULTS, "out/_partials/run-b/")
    target = key.replace("run-b", "run-a")
    assert target in lake.keys(RESULTS, "out/_partials/run-a/")
    lake.client.copy_object(Bucket=RESULTS, Key=target,
                            CopySource={"Bucket": RESULTS, "Key": key})
    assert len(lake.keys(RESULTS, "out/_partials/run-a/")) == 2
    with pytest.raises(QueryError, match="in run 'run-b', where this reduce is .* 'run-a'"):
        invoke(reduce_event(COMBINING, "run-a", 2))


# ----------------------------------------------------------------- §6: a reduce run again
def test_a_reduce_run_again_after_it_completed_answers_the_same(
        lake: S3Env, frames: list[pl.DataFrame]) -> None:
    run = "twice"
    events = batch_events(lake, "in/", COMBINING, run, 3)
    for event in events:
        invoke(event)
    first = invoke(reduce_event(COMBINING, run, len(events)))
    assert not [k for k in lake.keys(RESULTS, f"out/_partials/{run}/")
                if k.endswith(".parquet")]  # the partials are gone
    lake.log.clear()
    again = invoke(reduce_event(COMBINING, run, len(events)))
    assert again == first
    assert lake.log.count("PUT") == 0  # nothing written again
    # and nothing read or listed outside the run's partials folder, the only part of the
    # output prefix the function's role may read (cdk/s3slice_cdk/stack.py)
    assert lake.log.requests
    for seen in lake.log.requests:
        if "list-type" in seen.query:
            assert f"prefix=out%2F_partials%2F{run}%2F" in seen.query, seen
        else:
            assert seen.path.startswith(f"/{RESULTS}/out/_partials/{run}/"), seen
    assert_frame_equal(read(lake, again["outputs"][0]["uri"]), oracle(frames, COMBINING),
                       check_dtypes=False)


def test_a_reduce_interrupted_before_its_manifest_writes_the_same_answer_again(
        lake: S3Env, frames: list[pl.DataFrame]) -> None:
    run = "interrupted"
    events = batch_events(lake, "in/", COMBINING, run, 3)
    for event in events:
        invoke(event)
    first = invoke(reduce_event(COMBINING, run, len(events)))
    # as if it had stopped after writing the answer: partials back, no manifest
    lake.client.delete_object(Bucket=RESULTS, Key=f"out/_partials/{run}/reduced.json")
    for event in events:
        invoke(event)
    again = invoke(reduce_event(COMBINING, run, len(events)))
    assert again["outputs"] == first["outputs"]
    assert_frame_equal(read(lake, again["outputs"][0]["uri"]), oracle(frames, COMBINING),
                       check_dtypes=False)


def test_a_reduce_run_again_deletes_a_partial_left_and_answers_the_same(
        lake: S3Env, monkeypatch: pytest.MonkeyPatch) -> None:
    run = "left"
    events = batch_events(lake, "in/", COMBINING, run, 3)
    for event in events:
        invoke(event)
    real = S3Fetcher.delete
    refused: list[str] = []

    def refuse_one(self: S3Fetcher, bucket: str, key: str) -> None:
        if key.endswith(".parquet") and not refused:
            refused.append(f"s3://{bucket}/{key}")
            raise AccessDeniedError("access denied", uri=refused[-1])
        real(self, bucket, key)
    monkeypatch.setattr(S3Fetcher, "delete", refuse_one)
    first = invoke(reduce_event(COMBINING, run, len(events)))
    assert first["partials_left"] == refused
    again = invoke(reduce_event(COMBINING, run, len(events)))
    assert "partials_left" not in again
    assert again == {k: v for k, v in first.items() if k != "partials_left"}
    assert lake.keys(RESULTS, f"out/_partials/{run}/") == [f"out/_partials/{run}/reduced.json"]


def test_a_reduce_run_again_with_another_query_is_refused(lake: S3Env) -> None:
    run = "reduced-once"
    events = batch_events(lake, "in/", COMBINING, run, 3)
    for event in events:
        invoke(event)
    invoke(reduce_event(COMBINING, run, len(events)))
    other = COMBINING.replace("SUM(col_1)", "SUM(col_2)")
    with pytest.raises(QueryError, match="was reduced for query"):
        invoke(reduce_event(other, run, len(events)))
