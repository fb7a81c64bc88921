"""Typed errors where they used to escape or blame the wrong thing (issue 28 §5), each
through the real handler on the local S3 server, answers compared with polars read
plainly:

- a wrong leading ``PAR1`` is an ``ObjectFormatError`` with nothing written, whichever
  strategy reads the object (the read's first range reaches back to byte 0);
- a top-level column whose name holds a dot (``user.id``) is read, selected and filtered
  on, as any other;
- a column some objects of a prefix lack is null in those objects (a filter, a projection
  and SQL); one that no object has stays an ``UnknownColumnError``.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3slice import FOOTER_CACHE, ObjectError, ObjectFormatError, UnknownColumnError
from s3slice.entry import dispatch as _entry
from s3slice.parquet import pages as _pages
from s3slice.parquet import plan as _plan
from tests.support import S3Env, invoke

pytestmark = pytest.mark.integration

DATA, RESULTS = "typed-data", "typed-results"



def parquet(table: pa.Table, **kwargs: Any) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, **kwargs)
    return buf.getvalue()


@pytest.fixture
def lake(s3: S3Env, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Env]:
    for bucket in (DATA, RESULTS):
        s3.empty_bucket(bucket)
    for name in ("S3SLICE_QUERY", "S3SLICE_OUTPUT_URI", "S3SLICE_SOURCE_URIS"):
        monkeypatch.delenv(name, raising=False)
    _entry.reset()
    FOOTER_CACHE.clear()
    yield s3
    _entry.reset()
    FOOTER_CACHE.clear()


def put(s3: S3Env, key: str, data: bytes) -> str:
    s3.client.put_object(Bucket=DATA, Key=key, Body=data)
    return f"s3://{DATA}/{key}"


def settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
    for name, value in env.items():
        monkeypatch.setenv(f"S3SLICE_{name.upper()}", value)
    _entry.reset()
    FOOTER_CACHE.clear()


def written(s3: S3Env, response: dict[str, Any]) -> pl.DataFrame:
    frames = [pl.read_parquet(s3.get(o["uri"])) for o in response["outputs"]]
    return pl.concat(frames, how="diagonal_relaxed")


def same_rows(got: pl.DataFrame, want: pl.DataFrame) -> None:
    assert got.columns == want.columns
    assert got.height == want.height
    if want.height:
        assert got.sort(got.columns, nulls_last=True).equals(
            want.sort(want.columns, nulls_last=True))


# ------------------------------------------------------------------- wrong leading magic

#: Four row groups of three columns: the first needed range of ``id`` starts at byte 4.
WIDE = pa.table({"id": pa.array(range(40_000), pa.int64()),
                 "v": pa.array([float(i % 997) for i in range(40_000)]),
                 "s": pa.array([f"text {i % 5_000:05d} {'x' * 20}" for i in range(40_000)])})


def wide(*, pages: bool = False) -> bytes:
    """WIDE in four row groups; for ``pages``, in one with a page index (its footer is
    then small enough beside the needed bytes for the index to be read)."""
    if pages:
        return parquet(WIDE, compression="none", write_page_index=True, data_page_size=8192)
    return parquet(WIDE, row_group_size=10_000, compression="none")


#: (settings, request) for each way the object's bytes can be fetched by range.
READS: dict[str, tuple[dict[str, str], dict[str, Any]]] = {
    "ranges": ({"strategy": "ranges"}, {"columns": ["id"], "filter": "id >= 0",
                                        "output": {"format": "json"}}),
    "ranges, pruned to row group 0": (
        {"strategy": "ranges"}, {"columns": ["id", "v"], "filter": "id < 5",
                                 "output": {"format": "json"}}),
    "batches": ({"strategy": "batches", "memory_budget_mb": "1"},
                {"columns": ["id", "v"], "output": {"format": "json"}}),
    "read-ahead windows (streamed)": ({"strategy": "ranges", "read_ahead_mb": "1"},
                                      {"columns": ["id"], "filter": "id >= 0"}),
    "chunk copy": ({}, {"columns": ["id"]}),
    "whole": ({"strategy": "whole"}, {"columns": ["id"], "output": {"format": "json"}}),
    "pages": ({"strategy": "ranges"}, {"columns": ["id", "v"], "filter": "id = 12345",
                                       "output": {"format": "json"}}),
}


@pytest.mark.parametrize("read", sorted(READS))
@pytest.mark.parametrize("head", [b"PAR2", b"\0\0\0\0"])
def test_a_wrong_leading_magic_fails_typed_whatever_reads_the_object(
        lake: S3Env, monkeypatch: pytest.MonkeyPatch, read: str, head: bytes) -> None:
    env, request = READS[read]
    # Not small (no whole-object GET), a footer suffix read that stops short of byte 0.
    settings(monkeypatch, small_object_size="1024", footer_size="4096", **env)
    good = wide(pages=read == "pages")
    assert len(good) > 4 * 4096
    uri = put(lake, "m/good.parquet", good)
    event = {"source": uri, **request,
             "output": {"uri": f"s3://{RESULTS}/out/", **request.get("output", {})}}
    # The same read of the good object answers, and by the strategy named.
    response = invoke(event)
    [out] = response["outputs"]
    got = (pl.read_parquet(lake.get(out["uri"])) if out["uri"].endswith(".parquet")
           else pl.read_ndjson(io.BytesIO(lake.get(out["uri"]))))
    want = pl.read_parquet(good).sql(
        f"SELECT {', '.join(request['columns'])} FROM self"
        + (f" WHERE {request['filter']}" if "filter" in request else ""))
    same_rows(got, want)
    strategy, inputs = response["stats"]["strategy"], response["stats"]["strategy_inputs"]
    expected = {"chunk copy": "copy", "whole": "whole", "batches": "batches"}.get(read, "ranges")
    assert strategy == expected, strategy
    if read == "pages":
        assert inputs["page_index"]["used"] is True
    if read.startswith("read-ahead"):
        assert inputs["decoder"].endswith("-streamed")
    for key in lake.keys(RESULTS):
        lake.client.delete_object(Bucket=RESULTS, Key=key)
    # The object with its first four bytes changed: typed, nothing written.
    put(lake, "m/good.parquet", head + good[4:])
    FOOTER_CACHE.clear()
    lake.log.clear()
    with pytest.raises(ObjectFormatError, match="no PAR1 magic at its start") as info:
        invoke(event)
    assert "m/good.parquet" in str(info.value)
    assert lake.keys(RESULTS) == []
    # Checked at no request's cost: byte 0 came in a GET of the first chunk, which the
    # read makes anyway (from byte 0 instead of byte 4), not in one of its own.
    ranged = [r.range for r in lake.log.gets() if r.range and not r.range.startswith("bytes=-")]
    assert any(r.startswith("bytes=0-") and not r.endswith("-3") for r in ranged), ranged
    assert not [r for r in ranged if r.endswith("-3")]


def test_a_read_needing_nothing_near_the_start_fetches_no_byte_for_the_magic(
        lake: S3Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit of the check, as documented: a ranged read whose first needed byte is past
    byte 4 (here a later column) makes no request and fetches no byte for the magic, so
    a wrong one there goes unseen (the trailing magic and the footer are checked)."""
    settings(monkeypatch, small_object_size="1024", footer_size="4096", strategy="ranges")
    good = wide()
    uri = put(lake, "m/later.parquet", b"PAR2" + good[4:])
    lake.log.clear()
    response = invoke({"source": uri, "columns": ["v"], "output": f"s3://{RESULTS}/out/"})
    same_rows(written(lake, response), pl.read_parquet(good).select("v"))
    starts = [int(r.range[len("bytes="):].split("-")[0]) for r in lake.log.gets()
              if r.range and not r.range.startswith("bytes=-")]
    assert starts and min(starts) > 4


def test_a_wrong_leading_magic_in_a_footer_read_that_holds_the_whole_object(
        lake: S3Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """A small object of unknown size: the footer's suffix read brings all of it."""
    settings(monkeypatch, strategy="ranges")
    data = parquet(WIDE.slice(0, 100))
    uri = put(lake, "m/small.parquet", b"XXXX" + data[4:])
    with pytest.raises(ObjectFormatError, match="no PAR1 magic at its start"):
        invoke({"source": uri, "columns": ["v"], "output": f"s3://{RESULTS}/out/"})
    assert lake.keys(RESULTS) == []


# ------------------------------------------------------------------- a dot in a name

DOTTED = pa.table({
    "user.id": pa.array([i % 7 for i in range(3_000)], pa.int64()),
    "x": pa.array([float(i) for i in range(3_000)]),
    "s": pa.array([{"a": {"b": i % 11}, "user.id": -i} for i in range(3_000)]),
    "user": pa.array([{"id": i % 3} for i in range(3_000)]),
})


@pytest.fixture
def dotted(lake: S3Env, monkeypatch: pytest.MonkeyPatch) -> tuple[str, pl.DataFrame]:
    settings(monkeypatch, small_object_size="0", footer_size="4096")
    data = parquet(DOTTED, row_group_size=1_000)
    return put(lake, "d/dotted.parquet", data), pl.read_parquet(data)


@pytest.mark.parametrize("strategy", ["auto", "ranges", "whole", "batches"])
def test_a_dotted_top_level_column_is_selected(
        lake: S3Env, monkeypatch: pytest.MonkeyPatch, dotted: tuple[str, pl.DataFrame],
        strategy: str) -> None:
    uri, frame = dotted
    settings(monkeypatch, strategy=strategy)
    response = invoke({"source": uri, "columns": ["user.id"],
                       "output": f"s3://{RESULTS}/out/"})
    same_rows(written(lake, response), frame.select("user.id"))
    response = invoke({"source": uri, "columns": ["x", "user.id"], "return_rows": True})
    same_rows(pl.DataFrame(response["rows"]), frame.select("x", "user.id"))


def test_a_dotted_column_of_a_flat_file_is_copied_and_pruned(
        lake: S3Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """A flat file: the column's chunks are copied undecoded, and a filter on it prunes
    row groups by its statistics (no other leaf shares its path)."""
    settings(monkeypatch, small_object_size="0", footer_size="4096")
    table = pa.table({"user.id": pa.array(range(4_000), pa.int64()),
                      "x": pa.array([float(i) for i in range(4_000)])})
    data = parquet(table, row_group_size=1_000)
    uri = put(lake, "d/flat.parquet", data)
    frame = pl.read_parquet(data)
    response = invoke({"source": uri, "columns": ["user.id"],
                       "output": f"s3://{RESULTS}/out/"})
    assert response["stats"]["strategy"] == "copy"
    same_rows(written(lake, response), frame.select("user.id"))
    response = invoke({"source": uri, "columns": ["x", "user.id"],
                       "filter": '"user.id" BETWEEN 1500 AND 1509', "return_rows": True})
    assert response["stats"]["row_groups_read"] == 1
    same_rows(pl.DataFrame(response["rows"]),
              frame.filter(pl.col("user.id").is_between(1500, 1509)).select("x", "user.id"))


@pytest.mark.parametrize("query", [
    {"columns": ["x", "user.id"], "filter": '"user.id" = 3'},
    {"sql": 'SELECT x, "user.id" FROM s3object WHERE "user.id" = 3'},
    {"sql": 'SELECT s.x, s."user.id" FROM S3Object s WHERE s."user.id" = 3'},
])
def test_a_dotted_top_level_column_is_filtered_on(
        lake: S3Env, dotted: tuple[str, pl.DataFrame], query: dict[str, Any]) -> None:
    uri, frame = dotted
    response = invoke({"source": uri, **query, "return_rows": True})
    same_rows(pl.DataFrame(response["rows"]),
              frame.filter(pl.col("user.id") == 3).select("x", "user.id"))


def test_struct_paths_beside_a_dotted_name_still_read_their_leaves(
        lake: S3Env, dotted: tuple[str, pl.DataFrame]) -> None:
    uri, frame = dotted
    response = invoke({"source": uri, "return_rows": True,
                       "sql": 'SELECT t.s.a.b, t.s."user.id" AS sid, t."user.id", '
                              't."user".id AS uid FROM s3object t WHERE t.s.a.b = 4'})
    want = frame.filter(pl.col("s").struct.field("a").struct.field("b") == 4).select(
        pl.col("s").struct.field("a").struct.field("b").alias("b"),
        pl.col("s").struct.field("user.id").alias("sid"), pl.col("user.id"),
        pl.col("user").struct.field("id").alias("uid"))
    same_rows(pl.DataFrame(response["rows"]), want)


# ------------------------------------------------------ a column some objects lack

@pytest.fixture
def ragged(lake: S3Env) -> pl.DataFrame:
    a = pa.table({"x": pa.array(range(50), pa.int64()),
                  "y": pa.array([None if i % 5 == 0 else f"y{i}" for i in range(50)])})
    b = pa.table({"x": pa.array(range(50, 80), pa.int64())})
    put(lake, "r/a.parquet", parquet(a))
    put(lake, "r/b.parquet", parquet(b))
    return pl.concat([pl.DataFrame(a), pl.DataFrame(b)], how="diagonal")


@pytest.mark.parametrize("query", [
    {"columns": ["x", "y"], "filter": "y IS NULL"},
    {"columns": ["x", "y"]},
    {"columns": ["x"], "filter": "y IS NULL"},
    {"sql": "SELECT x, y FROM s3object WHERE y IS NULL"},
    {"sql": "SELECT COUNT(*) AS n, COUNT(y) AS ny FROM s3object"},
])
def test_a_column_some_objects_lack_is_null_there(
        lake: S3Env, ragged: pl.DataFrame, query: dict[str, Any]) -> None:
    response = invoke({"source": f"s3://{DATA}/r/", **query, "return_rows": True})
    if "sql" in query:
        want = ragged.sql(query["sql"].replace("s3object", "self"))
    else:
        want = (ragged.filter(pl.sql_expr(query["filter"])) if "filter" in query
                else ragged).select(query["columns"])
    same_rows(pl.DataFrame(response["rows"], schema=want.schema), want)


def test_a_lacking_column_beside_hive_partitions(lake: S3Env) -> None:
    """The null column joins the object's partition values, which still prune objects."""
    a = pa.table({"x": pa.array(range(10), pa.int64()),
                  "y": pa.array([None if i % 3 == 0 else i * 1.5 for i in range(10)])})
    b = pa.table({"x": pa.array(range(10, 15), pa.int64())})
    put(lake, "h/k=1/a.parquet", parquet(a))
    put(lake, "h/k=2/b.parquet", parquet(b))
    put(lake, "h/k=3/c.parquet", parquet(b))
    frame = pl.concat([pl.DataFrame(a).with_columns(k=pl.lit(1, pl.Int64)),
                       pl.DataFrame(b).with_columns(k=pl.lit(2, pl.Int64))], how="diagonal")
    response = invoke({"source": f"s3://{DATA}/h/", "return_rows": True,
                       "sql": "SELECT x, y, k FROM s3object WHERE y IS NULL AND k < 3"})
    assert response["stats"]["objects_pruned"] == 1
    want = frame.filter(pl.col("y").is_null() & (pl.col("k") < 3)).select("x", "y", "k")
    same_rows(pl.DataFrame(response["rows"], schema=want.schema), want)


@pytest.mark.parametrize("query", [
    {"columns": ["x", "z"]},
    {"columns": ["x"], "filter": "z IS NULL"},
    {"sql": "SELECT x FROM s3object WHERE z IS NULL"},
])
def test_a_column_no_object_has_is_still_unknown(
        lake: S3Env, ragged: pl.DataFrame, query: dict[str, Any]) -> None:
    with pytest.raises(UnknownColumnError, match="'z'"):
        invoke({"source": f"s3://{DATA}/r/", **query, "return_rows": True})


def test_a_planner_that_misses_a_chunk_fails_typed_and_decodes_no_zeros(
        lake: S3Env, monkeypatch: pytest.MonkeyPatch, dotted: tuple[str, pl.DataFrame]) -> None:
    """The old planner split ``user.id`` as a path and never fetched its chunk; whatever
    the planner does, a chunk the decoders would read and the plan never fetched is an
    ``ObjectError`` before any fetch, never zeros decoded."""
    uri, _ = dotted
    settings(monkeypatch, strategy="ranges")

    def split_as_a_path(path: str, top: str, wanted: set[str], parts_of: Any,
                        reads: Any) -> bool:
        return path.split(".")[0] in wanted
    monkeypatch.setattr(_plan, "_needed", split_as_a_path)
    lake.log.clear()
    with pytest.raises(ObjectError, match=r"column 'user.id' of row group 0 would be decoded"
                                          ".*nothing unfetched is decoded") as info:
        invoke({"source": uri, "columns": ["x", "user.id"], "output": f"s3://{RESULTS}/out/"})
    assert type(info.value) is ObjectError
    assert lake.keys(RESULTS) == []
    assert all(r.range is None or r.range.startswith("bytes=-") for r in lake.log.gets())


@pytest.mark.parametrize("query", [
    {"columns": ["x", "y"], "filter": "y IS NULL"},
    {"sql": "SELECT x, UPPER(y) AS u FROM s3object WHERE y IS NULL OR y LIKE 'y1%'"},
])
def test_a_csv_object_lacking_a_column_has_it_null_too(
        lake: S3Env, query: dict[str, Any]) -> None:
    a = pl.DataFrame({"x": range(20), "y": [None if i % 4 == 0 else f"y{i}" for i in range(20)]})
    b = pl.DataFrame({"x": range(20, 30)})
    put(lake, "c/a.csv", a.write_csv().encode())
    put(lake, "c/b.csv", b.write_csv().encode())
    both = pl.concat([a, b], how="diagonal")
    response = invoke({"source": f"s3://{DATA}/c/", **query, "return_rows": True})
    want = (both.sql(query["sql"].replace("s3object", "self")) if "sql" in query
            else both.filter(pl.col("y").is_null()).select("x", "y"))
    same_rows(pl.DataFrame(response["rows"], schema=want.schema), want)


def test_a_page_plan_missing_a_page_fails_typed_and_decodes_nothing_unfetched(
        lake: S3Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """A page read whose plan would not fetch one of its pages: an ``ObjectError``, never
    an untyped KeyError nor the page's bytes guessed."""
    settings(monkeypatch, small_object_size="1024", footer_size="4096", strategy="ranges")
    uri = put(lake, "m/pages.parquet", wide(pages=True))
    original = _pages.PagePlan.fetch_ranges
    monkeypatch.setattr(_pages.PagePlan, "fetch_ranges",
                        lambda self: original(self)[:-1])
    with pytest.raises(ObjectError, match="not in the read's plan"):
        invoke({"source": uri, "columns": ["id", "v"], "filter": "id = 12345",
                "output": f"s3://{RESULTS}/out/"})
    assert lake.keys(RESULTS) == []
