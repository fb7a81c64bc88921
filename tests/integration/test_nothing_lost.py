"""Nothing lost, nothing escapes: every case through the real handler on the local S3
server. No result is built from fewer rows than the object holds, outputs never collide,
and stale event metadata never makes a permanent error. (Native panics become typed
errors: ``test_native_panics.py``.)"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3slice import ObjectFormatError, OutputError, RequestError
from s3slice.cli.demo import sample_table
from s3slice.entry import dispatch as _entry
from tests import malformed
from tests.integration.event_lake import (
    DATA,
    GOOD,
    RESULTS,
    load,
    map_items,
    open_lake,
    put,
    rows_of,
    s3_records,
)
from tests.support import EVENTS, S3Env, invoke

pytestmark = pytest.mark.integration


@pytest.fixture
def lake(s3: S3Env, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Env]:
    yield from open_lake(s3, monkeypatch)


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
