"""Every entry point end to end, from the sample events in ``events/``, against the local
S3 server: S3 notifications, EventBridge, SQS (with a partial batch failure), Step
Functions items and Distributed Map batches, the recursion guard and the deadline."""

from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Iterator
from typing import Any

import polars as pl
import pytest

from s3slice import (
    FOOTER_CACHE,
    ConfigurationError,
    ObjectFormatError,
    ObjectNotFoundError,
    RequestError,
    TimeoutBudgetError,
)
from s3slice.cli.demo import sample_table
from s3slice.cli.invoke import LambdaContext
from s3slice.entry import dispatch as _entry
from tests.support import EVENTS, S3Env, invoke

pytestmark = pytest.mark.integration

SOURCE_BUCKET, OUTPUT_BUCKET = "example-data", "example-results"
KEYS = ("incoming/year=2024/orders 01.parquet", "incoming/year=2024/orders 02.parquet")
QUERY = {"columns": ["col_1", "col_2", "region"], "filter": "col_1 <= 1000"}


def load(name: str) -> Any:
    return json.loads((EVENTS / name).read_text())


@pytest.fixture(scope="module")
def tables() -> dict[str, pl.DataFrame]:
    return {key: sample_table(30_000, seed=i) for i, key in enumerate(KEYS)}


@pytest.fixture
def world(s3: S3Env, tables: dict[str, pl.DataFrame],
          monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Env]:
    """Source objects uploaded, the function configured as the CDK stack configures it."""
    s3.bucket(SOURCE_BUCKET)
    s3.empty_bucket(OUTPUT_BUCKET)
    for key, table in tables.items():
        s3.put_frame(SOURCE_BUCKET, key, table, row_group_size=10_000)
    monkeypatch.setenv("S3SLICE_QUERY", json.dumps(QUERY))
    monkeypatch.setenv("S3SLICE_OUTPUT_URI", f"s3://{OUTPUT_BUCKET}/results/")
    monkeypatch.setenv("S3SLICE_SOURCE_URIS", f"s3://{SOURCE_BUCKET}/incoming/")
    _entry.reset()
    FOOTER_CACHE.clear()  # each test sees a cold container's first read
    s3.log.clear()
    yield s3
    _entry.reset()


def head(s3: S3Env, key: str) -> tuple[int, str]:
    meta = s3.client.head_object(Bucket=SOURCE_BUCKET, Key=key)
    return int(meta["ContentLength"]), str(meta["ETag"])


def oracle(table: pl.DataFrame) -> pl.DataFrame:
    return table.filter(pl.col("col_1") <= 1000).select(QUERY["columns"])


def read_output(s3: S3Env, uri: str) -> pl.DataFrame:
    return pl.read_parquet(s3.get(uri))


def source_gets(s3: S3Env, key: str) -> list[Any]:
    return [r for r in s3.log.gets() if r.path.endswith(key)]



# ----------------------------------------------------------------- S3 notifications

def s3_event(s3: S3Env, *keys: str) -> dict[str, Any]:
    event = load("s3-put.json")
    template = event["Records"][0]
    event["Records"] = []
    for key in keys:
        record = copy.deepcopy(template)
        size, etag = head(s3, key) if key in KEYS else (123, '"0"')
        obj = record["s3"]["object"]
        obj["key"] = key.replace(" ", "+").replace("=", "%3D")  # as S3 encodes keys
        obj["size"], obj["eTag"] = size, etag.strip('"')  # notifications carry bare ETags
        event["Records"].append(record)
    return event


def test_s3_notification_reads_the_object_in_one_get_and_writes_its_result(
        world: S3Env, tables: dict[str, pl.DataFrame]) -> None:
    response = invoke(s3_event(world, KEYS[0]))
    [result] = response["objects"]
    assert result["status"] == "ok"
    [uri] = result["outputs"]
    assert uri.startswith(f"s3://{OUTPUT_BUCKET}/results/incoming/year=2024/orders 01.")
    assert read_output(world, uri).equals(oracle(tables[KEYS[0]]))
    # The size came with the event, and the object is small: one GET, no footer round trip.
    gets = source_gets(world, KEYS[0])
    assert len(gets) == 1
    assert gets[0].range == f"bytes=0-{head(world, KEYS[0])[0] - 1}"
    assert response["stats"]["bytes_fetched"] == gets[0].body_bytes


def test_many_records_each_get_an_output(world: S3Env, tables: dict[str, pl.DataFrame]) -> None:
    response = invoke(s3_event(world, *KEYS))
    assert [o["status"] for o in response["objects"]] == ["ok", "ok"]
    for key, result in zip(KEYS, response["objects"], strict=True):
        assert read_output(world, result["outputs"][0]).equals(oracle(tables[key]))


def test_a_failed_record_raises_its_typed_error_after_the_others(world: S3Env) -> None:
    with pytest.raises(ObjectNotFoundError, match="1 of 2 objects failed") as info:
        invoke(s3_event(world, "incoming/missing.parquet", KEYS[0]))
    assert "incoming/missing.parquet" in str(info.value)
    outputs = world.keys(OUTPUT_BUCKET)
    assert len(outputs) == 1
    assert "orders 01" in outputs[0]


def test_eventbridge_object_created(world: S3Env, tables: dict[str, pl.DataFrame]) -> None:
    event = load("eventbridge-object-created.json")
    size, etag = head(world, KEYS[0])
    event["detail"]["object"].update(key=KEYS[0], size=size, etag=etag.strip('"'))
    [result] = invoke(event)["objects"]
    assert read_output(world, result["outputs"][0]).equals(oracle(tables[KEYS[0]]))


# ----------------------------------------------------------------------------- SQS

def sqs_message(template: dict[str, Any], message_id: str, body: Any) -> dict[str, Any]:
    return dict(template, messageId=message_id, body=json.dumps(body))


def test_sqs_reports_only_the_failed_messages(world: S3Env,
                                              tables: dict[str, pl.DataFrame]) -> None:
    event = load("sqs-s3-notification.json")
    good, test_event = event["Records"]
    good = sqs_message(good, good["messageId"], s3_event(world, KEYS[0]))
    world.client.put_object(Bucket=SOURCE_BUCKET, Key="incoming/not-parquet.parquet",
                            Body=b"id,name\n1,a\n" * 100)
    missing = sqs_message(good, "msg-missing", s3_event(world, "incoming/missing.parquet"))
    corrupt = sqs_message(good, "msg-corrupt", s3_event(world, "incoming/not-parquet.parquet"))
    event["Records"] = [good, test_event, missing, corrupt]

    response = invoke(event)

    assert response == {"batchItemFailures": [{"itemIdentifier": "msg-missing"},
                                              {"itemIdentifier": "msg-corrupt"}]}
    [output] = world.keys(OUTPUT_BUCKET)
    assert "orders 01" in output
    assert read_output(world, f"s3://{OUTPUT_BUCKET}/{output}").equals(
        oracle(tables[KEYS[0]]))


# ------------------------------------------------------------------ Step Functions

def listed(s3: S3Env, *keys: str) -> list[dict[str, Any]]:
    """Items exactly as the Distributed Map's ItemReader (listObjectsV2) gives them."""
    items = load("sfn-map-batch.json")["Items"]
    contents = {o["Key"]: o for o in s3.client.list_objects_v2(
        Bucket=SOURCE_BUCKET, Prefix="incoming/").get("Contents", [])}
    out = []
    for key in keys:
        item = dict(items[0], Key=key)
        if key in contents:
            item.update(Size=contents[key]["Size"], Etag=contents[key]["ETag"])
        out.append(item)
    return out


def test_distributed_map_batch(world: S3Env, tables: dict[str, pl.DataFrame]) -> None:
    event = load("sfn-map-batch.json")
    event["Items"] = listed(world, *KEYS)
    response = invoke(event)
    assert [o["status"] for o in response["objects"]] == ["ok", "ok"]
    for key, result in zip(KEYS, response["objects"], strict=True):
        [uri] = result["outputs"]
        assert uri.startswith("s3://example-results/map/")
        assert read_output(world, uri).equals(oracle(tables[key]))
    assert response["stats"]["objects"] == 2
    assert response["stats"]["rows_out"] == sum(oracle(t).height for t in tables.values())
    assert len(json.dumps(response)) < 256 * 1024


def test_step_functions_single_item_with_sql(world: S3Env,
                                             tables: dict[str, pl.DataFrame]) -> None:
    event = load("sfn-item.json")
    [event["Item"]] = listed(world, KEYS[1])
    event["BatchInput"]["query"] = {
        "sql": "SELECT region, count(*) AS n FROM s3object WHERE col_1 <= 1000 "
               "GROUP BY region ORDER BY region"}
    [result] = invoke(event)["objects"]
    got = read_output(world, result["outputs"][0])
    expected = (tables[KEYS[1]].filter(pl.col("col_1") <= 1000).group_by("region")
                .agg(pl.len().cast(got["n"].dtype).alias("n")).sort("region"))
    assert got.equals(expected)


def test_a_batch_with_a_bad_object_fails_with_its_type(world: S3Env) -> None:
    event = load("sfn-map-batch.json")
    event["Items"] = [*listed(world, KEYS[0]), *listed(world, "incoming/missing.parquet")]
    with pytest.raises(ObjectNotFoundError, match="1 of 2 objects failed"):
        invoke(event)


def test_batch_input_query_errors_are_request_errors(world: S3Env) -> None:
    event = load("sfn-map-batch.json")
    event["Items"] = listed(world, KEYS[0])
    event["BatchInput"]["query"] = {"columns": ["nope"]}
    with pytest.raises(Exception, match="nope") as info:
        invoke(event)
    assert type(info.value).__name__ == "UnknownColumnError"
    assert world.keys(OUTPUT_BUCKET) == []


# ------------------------------------------------------- recursion guard, configuration

def test_objects_under_the_output_location_are_never_processed(world: S3Env) -> None:
    key = "results/incoming/year=2024/orders 01.abc.parquet"
    world.client.put_object(Bucket=OUTPUT_BUCKET, Key=key, Body=b"PAR1")
    event = s3_event(world, KEYS[0])
    record = event["Records"][0]
    record["s3"]["bucket"]["name"] = OUTPUT_BUCKET
    record["s3"]["object"]["key"] = key.replace(" ", "+")
    world.log.clear()
    [result] = invoke(event)["objects"]
    assert result == {"source": f"s3://{OUTPUT_BUCKET}/{key}", "status": "skipped",
                      "reason": "under the output location"}
    assert world.log.gets() == []
    assert world.keys(OUTPUT_BUCKET) == [key]


def test_a_configuration_that_would_recurse_is_refused_at_start(
        world: S3Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S3SLICE_OUTPUT_URI", f"s3://{SOURCE_BUCKET}/incoming/results/")
    _entry.reset()
    with pytest.raises(ConfigurationError, match="S3SLICE_OUTPUT_URI"):
        invoke(s3_event(world, KEYS[0]))
    assert world.keys(SOURCE_BUCKET, "incoming/results/") == []


def test_triggered_runs_without_a_query_fail_clearly(world: S3Env,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("S3SLICE_QUERY")
    _entry.reset()
    with pytest.raises(ConfigurationError, match="S3SLICE_QUERY"):
        invoke(s3_event(world, KEYS[0]))


def test_a_corrupt_object_from_an_event_is_a_format_error(world: S3Env) -> None:
    world.client.put_object(Bucket=SOURCE_BUCKET, Key="incoming/bad.parquet", Body=b"x" * 5000)
    with pytest.raises(ObjectFormatError, match="incoming/bad.parquet"):
        invoke(s3_event(world, "incoming/bad.parquet"))
    assert world.keys(OUTPUT_BUCKET) == []


def test_malformed_events_are_request_errors(world: S3Env) -> None:
    with pytest.raises(RequestError, match=r"Records\[0\]"):
        invoke({"Records": [{"eventSource": "aws:s3"}]})


# ------------------------------------------------------------------------ deadline

class Dwindling(LambdaContext):
    """Plenty of time for the first few checks, then almost none."""

    def __init__(self, checks_before: int) -> None:
        super().__init__()
        self.left = checks_before

    def get_remaining_time_in_millis(self) -> int:
        self.left -= 1
        return 60_000 if self.left >= 0 else 1_000


@pytest.mark.parametrize("checks_before", [0, 2, 3, 5])
def test_running_out_of_time_stops_cleanly_and_leaves_no_partial_output(
        world: S3Env, tables: dict[str, pl.DataFrame], checks_before: int) -> None:
    event = load("sfn-map-batch.json")
    event["Items"] = listed(world, *KEYS)
    with pytest.raises(TimeoutBudgetError, match="ms left") as info:
        invoke(event, Dwindling(checks_before))
    # Time can run out between objects: an object finished before it keeps its complete
    # output, the one in progress has none, and no output is ever partial.
    outputs = world.keys(OUTPUT_BUCKET)
    assert len(outputs) < len(KEYS)
    if checks_before == 0:
        assert outputs == []
    # The message says what is true: which objects finished, and that nothing is partial.
    message = str(info.value)
    assert "no partial output" in message and "nothing was written" not in message
    assert ("1 object(s) before it were processed" in message) == bool(outputs)
    for key in outputs:
        source = next(k for k in KEYS if k.removesuffix(".parquet") in key)
        assert read_output(world, f"s3://{OUTPUT_BUCKET}/{key}").equals(
            oracle(tables[source]))


def test_direct_invoke_is_unchanged(world: S3Env, tables: dict[str, pl.DataFrame]) -> None:
    response = invoke({"source": f"s3://{SOURCE_BUCKET}/{KEYS[0]}", **QUERY,
                       "return_rows": True})
    assert pl.DataFrame(response["rows"]).equals(oracle(tables[KEYS[0]]))
    assert response["outputs"][0]["uri"].startswith(f"s3://{OUTPUT_BUCKET}/results/")


def test_metrics_are_emitted_as_emf(world: S3Env, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    invoke(s3_event(world, KEYS[0]))
    with warnings.catch_warnings(record=True) as caught, pytest.raises(ObjectNotFoundError):
        invoke(s3_event(world, "incoming/missing.parquet"))
    assert not caught  # the failure is published as its Errors metric, with no warning
    blobs = [json.loads(line) for line in capsys.readouterr().out.splitlines()
             if line.startswith("{") and "_aws" in line]
    names = {m["Name"] for b in blobs for d in b["_aws"]["CloudWatchMetrics"]
             for m in d["Metrics"]}
    assert {"BytesFetched", "Requests", "RowsIn", "RowsOut", "FetchTime", "Errors",
            "ObjectsByStrategy"} <= names
    errors = [b for b in blobs if "Errors" in b]
    assert any(b.get("ErrorType") == "ObjectNotFoundError" for b in errors)
    fetched = [b["BytesFetched"] for b in blobs if "BytesFetched" in b]
    assert fetched[0] == [head(world, KEYS[0])[0]]  # the small object, whole, in one GET


def test_each_phase_is_a_trace_subsegment_when_tracing_is_on(
        world: S3Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """As in Lambda with active tracing: subsegments go to the X-Ray daemon's UDP port."""
    import socket

    from s3slice.entry.observe import tracing

    daemon = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    daemon.bind(("127.0.0.1", 0))
    port = daemon.getsockname()[1]
    monkeypatch.setenv("AWS_XRAY_DAEMON_ADDRESS", f"127.0.0.1:{port}")
    monkeypatch.setenv("LAMBDA_TASK_ROOT", "/var/task")
    monkeypatch.setenv("_X_AMZN_TRACE_ID",
                       "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;"
                       "Sampled=1")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "false")
    monkeypatch.setattr(tracing, "_checked", False)
    _entry.reset()
    try:
        invoke(s3_event(world, KEYS[0]))
        names = set()
        daemon.settimeout(2)
        while True:
            try:
                packet = daemon.recv(65536).decode()
            except TimeoutError:
                break
            names.add(json.loads(packet.split("\n", 1)[1])["name"])
    finally:
        daemon.close()
        monkeypatch.setattr(tracing, "_checked", False)
        _entry.reset()
    assert {"plan", "execute", "write"} <= names
    # nothing patched: the X-Ray SDK's patch_all would import every module it supports
    from aws_xray_sdk.core import patcher

    assert not patcher._PATCHED_MODULES
