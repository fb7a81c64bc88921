"""Nothing lost, nothing escapes: every case through the real handler on the local S3
server. Native panics become typed errors in every phase and every batch shape, no result
is built from fewer rows than the object holds, outputs never collide, and stale event
metadata never makes a permanent error."""

from __future__ import annotations

import copy
import gzip
import json
from collections.abc import Iterator
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3slice import (
    FOOTER_CACHE,
    ObjectFormatError,
    OutputError,
    QueryError,
    RequestError,
    _output,
)
from s3slice.answer.spool import ParquetSpool
from s3slice.cli.demo import sample_table
from s3slice.entry import dispatch as _entry
from s3slice.parquet import footer as _footer
from s3slice.query.analysis import Analysis
from tests import malformed
from tests.support import EVENTS, S3Env, invoke

pytestmark = pytest.mark.integration

DATA, RESULTS = "lost-data", "lost-results"
GOOD = pa.table({"id": pa.array(range(1_000), pa.int64()),
                 "v": pa.array([float(i % 97) for i in range(1_000)])})



def load(name: str) -> Any:
    return json.loads((EVENTS / name).read_text())


def native_panic() -> BaseException:
    """A real ``pyo3_runtime.PanicException``, raised by polars on an object whose footer
    claims more rows than its pages hold."""
    data, _ = malformed.inflated_row_count()
    with pytest.raises(BaseException) as info:  # noqa: PT011 - the panic is what it returns
        pl.read_parquet(data)
    assert type(info.value).__name__ == "PanicException"
    return info.value


@pytest.fixture
def lake(s3: S3Env, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Env]:
    for bucket in (DATA, RESULTS):
        s3.empty_bucket(bucket)
    s3.client.put_object(Bucket=DATA, Key="in/good.parquet", Body=malformed.write(GOOD))
    inflated, _ = malformed.inflated_row_count()
    s3.client.put_object(Bucket=DATA, Key="in/inflated.parquet", Body=inflated)
    monkeypatch.setenv("S3SLICE_QUERY", json.dumps({"columns": ["id", "v"]}))
    monkeypatch.setenv("S3SLICE_OUTPUT_URI", f"s3://{RESULTS}/out/")
    monkeypatch.setenv("S3SLICE_SOURCE_URIS", f"s3://{DATA}/in/")
    _entry.reset()
    FOOTER_CACHE.clear()
    yield s3
    _entry.reset()


def put(s3: S3Env, key: str, data: bytes) -> str:
    s3.client.put_object(Bucket=DATA, Key=key, Body=data)
    return f"s3://{DATA}/{key}"


def rows_of(s3: S3Env, uri: str) -> pl.DataFrame:
    return pl.read_parquet(s3.get(uri))


def s3_records(s3: S3Env, *keys: str) -> dict[str, Any]:
    event = load("s3-put.json")
    template = event["Records"][0]
    event["Records"] = []
    for key in keys:
        record = copy.deepcopy(template)
        head = s3.client.head_object(Bucket=DATA, Key=key)
        record["s3"]["bucket"]["name"] = DATA
        record["s3"]["object"].update(key=key, size=head["ContentLength"],
                                      eTag=head["ETag"].strip('"'))
        event["Records"].append(record)
    return event


def map_items(s3: S3Env, *keys: str) -> dict[str, Any]:
    event = load("sfn-map-batch.json")
    event["BatchInput"] = {"bucket": DATA}
    event["Items"] = []
    for key in keys:
        head = s3.client.head_object(Bucket=DATA, Key=key)
        event["Items"].append({"Key": key, "Size": head["ContentLength"],
                               "Etag": head["ETag"]})
    return event


def sqs(s3: S3Env, *keys: str) -> dict[str, Any]:
    event = load("sqs-s3-notification.json")
    template = event["Records"][0]
    event["Records"] = [dict(copy.deepcopy(template), messageId=f"msg-{i}",
                             body=json.dumps(s3_records(s3, key)))
                        for i, key in enumerate(keys)]
    return event


# ----------------------------------------------------------------- 1. native panics

def test_a_panicking_object_is_a_typed_error_on_direct_invoke(lake: S3Env) -> None:
    with pytest.raises(ObjectFormatError, match="inflated.parquet") as info:
        invoke({"source": f"s3://{DATA}/in/inflated.parquet"})
    assert "holds 10 rows by the footer, but pyarrow decoded 6" in str(info.value)
    assert lake.keys(RESULTS) == []
    # The warm process keeps working.
    ok = invoke({"source": f"s3://{DATA}/in/good.parquet", "return_rows": True})
    assert pl.DataFrame(ok["rows"]).height == GOOD.num_rows


@pytest.mark.parametrize("bad_first", [True, False])
def test_sqs_reports_the_panicking_message_and_processes_the_other(lake: S3Env,
                                                                   bad_first: bool) -> None:
    keys = ["in/inflated.parquet", "in/good.parquet"]
    if not bad_first:
        keys.reverse()
    response = invoke(sqs(lake, *keys))
    bad = f"msg-{keys.index('in/inflated.parquet')}"
    assert response == {"batchItemFailures": [{"itemIdentifier": bad}]}
    [output] = lake.keys(RESULTS)
    assert "good.parquet" in output
    assert rows_of(lake, f"s3://{RESULTS}/{output}").equals(pl.from_arrow(GOOD))


@pytest.mark.parametrize("shape", ["s3", "map"])
def test_a_batch_processes_every_object_around_a_panicking_one(lake: S3Env,
                                                               shape: str) -> None:
    keys = ("in/inflated.parquet", "in/good.parquet")
    event = s3_records(lake, *keys) if shape == "s3" else map_items(lake, *keys)
    with pytest.raises(ObjectFormatError,
                       match=r"inflated.*\(1 of 2 objects failed; the other 1 were processed\)"):
        invoke(event)
    [output] = lake.keys(RESULTS)
    assert rows_of(lake, f"s3://{RESULTS}/{output}").equals(pl.from_arrow(GOOD))


def _raise(e: BaseException) -> Any:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise e
    return fail


class _Spilling(ParquetSpool):
    """A spool that holds nothing: every piece goes to its file."""

    def __init__(self, directory: str, compression: str, *, hold_bytes: int) -> None:
        super().__init__(directory, compression, hold_bytes=0)


@pytest.mark.parametrize(("phase", "target", "error", "output_format"), [
    ("footer", (_footer, "parse_footer"), ObjectFormatError, "parquet"),
    ("execute", (Analysis, "finish"), QueryError, "parquet"),
    ("write", (_output, "serialize"), OutputError, "json"),
    ("write", (_output, "serialize"), OutputError, "parquet"),
    ("write spilled", (ParquetSpool, "_write"), OutputError, "parquet"),
    ("write spilled", (ParquetSpool, "_finish"), OutputError, "parquet"),
])
def test_a_panic_in_any_phase_is_the_typed_error_of_that_phase(
        lake: S3Env, phase: str, target: tuple[Any, str], error: type[Exception],
        output_format: str) -> None:
    """A real panic raised where each phase calls native code: the handler answers with the
    phase's typed error, writes nothing, and the next request succeeds. (A Parquet output
    of one object goes through the spool: a small answer is serialized, a large one
    written to the spool's file as it is computed.)"""
    with pytest.MonkeyPatch.context() as patch:
        if phase == "write spilled":
            patch.setattr(_output, "ParquetSpool", _Spilling)
        patch.setattr(*target, _raise(native_panic()))
        with pytest.raises(error, match="assertion"):
            invoke({"source": f"s3://{DATA}/in/good.parquet",
                    "output": {"uri": f"s3://{RESULTS}/out/", "format": output_format}})
    assert lake.keys(RESULTS) == []
    assert invoke({"source": f"s3://{DATA}/in/good.parquet"})["status"] == "ok"


def test_a_time_zone_polars_cannot_parse_is_read_exactly_in_utc(lake: S3Env) -> None:
    data, table = malformed.fixed_offset_time_zone()
    uri = put(lake, "in/offset.parquet", data)
    for query in ({}, {"filter": "id >= 2"}):
        response = invoke({"source": uri, **query, "output": f"s3://{RESULTS}/out/"})
        got = rows_of(lake, response["outputs"][0]["uri"])
        assert got.schema["at"] == pl.Datetime("us", "UTC")
        instants = table.column("at").cast(pa.timestamp("us", tz="UTC")).to_pylist()
        first = 2 if query else 0
        assert got["at"].to_list() == instants[first:]
        assert got["id"].to_list() == list(range(first, 5))


# ------------------------------------------------------------ 2. no silent row loss

def test_a_footer_claiming_more_rows_than_the_pages_hold_fails_typed(lake: S3Env) -> None:
    with pytest.raises(ObjectFormatError, match="no result is built from fewer rows"):
        invoke({"source": f"s3://{DATA}/in/inflated.parquet", "columns": ["id"]})


@pytest.mark.parametrize("query", [{}, {"filter": "id > 2"}, {"columns": ["phoneNumbers"]},
                                   {"columns": ["id", "phoneNumbers"], "filter": "id <= 4"}])
def test_a_legacy_two_level_list_reads_every_row(lake: S3Env, query: dict[str, Any]) -> None:
    data, rows = malformed.legacy_two_level_list()
    uri = put(lake, "in/legacy.parquet", data)
    response = invoke({"source": uri, **query, "return_rows": True})
    expected = [r for r in rows if "filter" not in query or eval(  # noqa: S307 - test's own
        query["filter"].replace("id", str(r["id"])))]
    columns = query.get("columns", ["id", "phoneNumbers"])
    assert response["rows"] == [{c: r[c] for c in columns} for r in expected]
    assert response["stats"]["rows_in"] == len(rows)


def test_int96_timestamps_past_2262_are_exact(lake: S3Env) -> None:
    data, values = malformed.int96_after_2262()
    assert pq.read_metadata(pa.BufferReader(data)).schema.column(1).physical_type == "INT96"
    uri = put(lake, "in/spark.parquet", data)
    for query in ({}, {"filter": "id >= 0"}):
        response = invoke({"source": uri, **query, "output": f"s3://{RESULTS}/out/"})
        got = rows_of(lake, response["outputs"][0]["uri"])
        assert got["ts"].to_list() == values


# -------------------------------------------------------------- 3. output keys

def test_sources_differing_by_extension_or_bucket_get_distinct_outputs(lake: S3Env) -> None:
    other = lake.bucket("lost-data-2")
    put(lake, "x/data.parquet", malformed.write(GOOD))
    lake.client.put_object(Bucket=DATA, Key="x/data.csv", Body=b"id,v\n1,2.0\n")
    lake.client.put_object(Bucket=other, Key="x/data.parquet",
                           Body=malformed.write(GOOD.slice(0, 10)))
    by_prefix = invoke({"source": f"s3://{DATA}/x/", "output": f"s3://{RESULTS}/out/"})
    by_list = invoke({"source": [f"s3://{DATA}/x/data.parquet",
                                 f"s3://{other}/x/data.parquet"],
                      "output": f"s3://{RESULTS}/out/"})
    for response, rows in ((by_prefix, [1, 1_000]), (by_list, [1_000, 10])):
        uris = [o["uri"] for o in response["outputs"]]
        assert len(set(uris)) == len(uris) == 2
        assert sorted(rows_of(lake, u).height for u in uris) == sorted(rows)
    # s3://lost-data/x/data.parquet was in both requests: one key, rewritten (idempotent).
    assert len(lake.keys(RESULTS)) == 3


def test_an_object_named_twice_fails_before_anything_is_written(lake: S3Env) -> None:
    put(lake, "twice/a.parquet", malformed.write(GOOD))
    with pytest.raises(RequestError, match="would both be written"):
        invoke({"source": [f"s3://{DATA}/twice/", f"s3://{DATA}/twice/a.parquet"],
                "output": f"s3://{RESULTS}/out/"})
    assert lake.keys(RESULTS) == []


# ------------------------------------------------------------ 4. limits

def test_a_limit_beyond_32_bits_is_accepted(lake: S3Env) -> None:
    response = invoke({"source": f"s3://{DATA}/in/good.parquet", "columns": ["id"],
                       "limit": 2**40, "return_rows": True})
    assert [r["id"] for r in response["rows"]] == list(range(1_000))


# ---------------------------------------------------- 5. stale event metadata

@pytest.mark.parametrize("factor", [0.5, 3.0])
@pytest.mark.parametrize("shape", ["s3", "map", "eventbridge"])
def test_an_event_describing_another_version_of_the_object_reads_the_current_one(
        lake: S3Env, shape: str, factor: float) -> None:
    """The event names the object as it was (size and ETag); it has since been replaced by
    a smaller or a larger one. The read restarts on what is there now."""
    key = "in/replaced.parquet"
    put(lake, key, malformed.write(GOOD))
    event = (s3_records(lake, key) if shape == "s3" else map_items(lake, key)
             if shape == "map" else load("eventbridge-object-created.json"))
    if shape == "eventbridge":
        head = lake.client.head_object(Bucket=DATA, Key=key)
        event["detail"]["bucket"]["name"] = DATA
        event["detail"]["object"].update(key=key, size=head["ContentLength"],
                                         etag=head["ETag"].strip('"'))
    now = pa.table({"id": pa.array(range(int(1_000 * factor)), pa.int64()),
                    "v": pa.array([1.5] * int(1_000 * factor))})
    put(lake, key, malformed.write(now))
    response = invoke(event)
    [result] = response["objects"]
    assert result["status"] == "ok"
    assert rows_of(lake, result["outputs"][0]).equals(pl.from_arrow(now))


# ------------------------------------------------------- 6. exactly the object named

GLOBS = {
    "g/m=2/part-*.parquet": ["g/m=2/part-1.parquet", "g/m=2/part-2.parquet"],
    "g/m=*/part-1.parquet": ["g/m=1/part-1.parquet", "g/m=2/part-1.parquet"],
    "g/m=?/part-2.parquet": ["g/m=2/part-2.parquet"],
    "g/*/part-[12].parquet": ["g/m=1/part-1.parquet", "g/m=2/part-1.parquet",
                              "g/m=2/part-2.parquet"],
    "g/**/part-1.parquet": ["g/m=1/part-1.parquet", "g/m=2/part-1.parquet"],
    "g/m=1/small_?.parquet": ["g/m=1/small_a.parquet"],
    "g*/m=1/part-1.parquet": ["g/m=1/part-1.parquet"],
    "*/m=1/small_a.parquet": ["g/m=1/small_a.parquet"],
}


@pytest.mark.parametrize("pattern", sorted(GLOBS))
def test_a_wildcard_anywhere_in_a_segment_matches(lake: S3Env, pattern: str) -> None:
    for key in ("g/m=1/part-1.parquet", "g/m=2/part-1.parquet", "g/m=2/part-2.parquet",
                "g/m=1/small_a.parquet", "g/m=1/small_ab.parquet"):
        put(lake, key, malformed.write(GOOD.slice(0, 3)))
    response = invoke({"source": f"s3://{DATA}/{pattern}", "columns": ["id"],
                       "output": f"s3://{RESULTS}/out/"})
    assert sorted(o["source"] for o in response["outputs"]) == [
        f"s3://{DATA}/{k}" for k in GLOBS[pattern]]


@pytest.mark.parametrize("key", ["/lead.parquet", "a//b.parquet", "a/../c.parquet",
                                 "a/./d.parquet", "e/."])
def test_keys_an_object_store_path_would_rewrite_are_read_exactly(lake: S3Env,
                                                                   key: str) -> None:
    put(lake, key.lstrip("/").replace("//", "/").replace("/../", "/").replace("/./", "/"),
        malformed.write(GOOD.slice(0, 1)))  # the object a normalized path would read
    put(lake, key, malformed.write(GOOD.slice(0, 7)))
    response = invoke({"source": f"s3://{DATA}/{key}", "output": f"s3://{RESULTS}/out/"})
    [out] = response["outputs"]
    assert rows_of(lake, out["uri"]).height == 7
    assert out["uri"] == f"s3://{RESULTS}/out/{key}.{out['uri'].split('.')[-2]}.parquet"


def test_a_prefix_holding_such_keys_lists_them_all(lake: S3Env) -> None:
    for key in ("p/a.parquet", "p//b.parquet", "p/../c.parquet"):
        put(lake, key, malformed.write(GOOD.slice(0, 2)))
    response = invoke({"source": f"s3://{DATA}/p/", "output": f"s3://{RESULTS}/out/"})
    assert sorted(o["source"] for o in response["outputs"]) == sorted(
        f"s3://{DATA}/{k}" for k in ("p//b.parquet", "p/../c.parquet", "p/a.parquet"))


def test_a_bucket_without_a_slash_is_refused(lake: S3Env) -> None:
    with pytest.raises(RequestError, match=f"s3://{DATA}/ for the whole bucket"):
        invoke({"source": f"s3://{DATA}"})


# ------------------------------------------------------------- 8. truthful messages

def test_a_wrong_leading_magic_is_detected_when_the_first_range_reaches_it(
        lake: S3Env) -> None:
    data = malformed.write(GOOD)
    key = "in/bad-head.parquet"
    put(lake, key, b"PAR2" + data[4:])
    event = map_items(lake, key)  # its size is known and small: one GET of the whole
    with pytest.raises(ObjectFormatError, match="no PAR1 magic at its start"):
        invoke(event)


def test_a_batch_where_every_object_failed_says_so(lake: S3Env) -> None:
    put(lake, "in/inflated-2.parquet", malformed.inflated_row_count()[0])
    with pytest.raises(ObjectFormatError, match=r"\(all 2 objects failed\)$"):
        invoke(map_items(lake, "in/inflated.parquet", "in/inflated-2.parquet"))


def test_an_output_error_names_its_uri_once(lake: S3Env) -> None:
    with pytest.raises(OutputError) as info:
        invoke({"source": f"s3://{DATA}/in/good.parquet",
                "output": "s3://lost-no-such-bucket/out/"})
    assert str(info.value).count("s3://lost-no-such-bucket/") == 1


SAMPLES = sorted(p.name for p in EVENTS.glob("*.json"))


@pytest.mark.parametrize("name", SAMPLES)
def test_every_shipped_event_sample_succeeds_once_its_objects_exist(
        lake: S3Env, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The samples carry a made-up size and ETag (1 MiB, the empty string's MD5); nothing
    from them is trusted once the read finds the object is not the one they describe."""
    monkeypatch.setenv("S3SLICE_QUERY", json.dumps({"columns": ["col_1", "region"]}))
    monkeypatch.setenv("S3SLICE_SOURCE_URIS", "s3://example-data/incoming/")
    monkeypatch.setenv("S3SLICE_OUTPUT_URI", "s3://example-results/triggered/")
    _entry.reset()
    lake.bucket("example-data")
    lake.bucket("example-results")
    for seed, key in enumerate(("incoming/year=2024/orders 01.parquet",
                                "incoming/year=2024/orders 02.parquet",
                                "sales/2024/orders.parquet")):
        lake.put_frame("example-data", key, sample_table(2_000, seed=seed))
    csv = "region,order id,amount\nnorth,1,150\nsouth,2,50\n# a comment\neast,3,101\n"
    lake.client.put_object(Bucket="example-data", Key="exports/orders.csv.gz",
                           Body=gzip.compress(csv.encode()))

    event = json.loads((EVENTS / name).read_text())
    if "Reduce" in event:  # the map ran first: one batch a source object, as the sample says
        step = event["Reduce"]
        keys = ["incoming/year=2024/orders 01.parquet", "incoming/year=2024/orders 02.parquet",
                "sales/2024/orders.parquet"][:step["batches"]]
        for key in keys:
            invoke({"Items": [{"Key": key}], "BatchInput": {
                "bucket": "example-data", "query": step["query"], "output": step["output"],
                "run": step["run"]}})
    response = invoke(event)

    if "batchItemFailures" in response:
        assert response == {"batchItemFailures": []}
    elif "objects" in response:
        assert response["objects"] and {o["status"] for o in response["objects"]} == {"ok"}
    elif "Payload" in response:
        assert response["Payload"] == "north,1\neast,3\n"
    elif "Check" in event:
        assert response == {"status": "ok", "combines": True}
    else:
        assert response["status"] == "ok" and response["stats"]["rows_out"] > 0
