"""A Parquet output of one object and a query that does not combine rows is written as it
is computed: a row group at a time into a file in the temporary directory, then uploaded.
Its content is the oracle's; every other request keeps the in-memory path."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import pytest

import s3slice.answer.run as run_module
from s3slice import (
    Engine,
    FooterCache,
    LocalFetcher,
    ObjectFormatError,
    RecordingFetcher,
    Settings,
    parse_request,
)
from s3slice.cli.demo import sample_table
from tests import malformed

BUCKET = "data"
ROWS, GROUPS = 40_000, 8


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return sample_table(ROWS)


@pytest.fixture
def root(tmp_path: Path, table: pl.DataFrame) -> Path:
    (tmp_path / BUCKET).mkdir()
    table.write_parquet(tmp_path / BUCKET / "t.parquet", row_group_size=ROWS // GROUPS)
    (tmp_path / "scratch").mkdir()
    return tmp_path


def respond(root: Path, request: dict[str, Any], **settings: Any
            ) -> tuple[dict[str, Any], RecordingFetcher]:
    fetcher = RecordingFetcher(LocalFetcher(root))
    engine = Engine(Settings(memory_mb=1024, tmp_dir=str(root / "scratch"), **settings),
                    fetcher=fetcher, footer_cache=FooterCache(1 << 20))
    answer = run_module.run(parse_request(request), engine=engine)
    return answer.to_dict(), fetcher


def written(root: Path, response: dict[str, Any]) -> pl.DataFrame:
    [output] = response["outputs"]
    return pl.read_parquet(root / output["uri"].removeprefix("s3://"))


OUT = {"uri": "s3://out/r/", "format": "parquet"}


@pytest.mark.parametrize("budget_mb", [None, 1], ids=["decoded-whole", "row-group-at-a-time"])
@pytest.mark.parametrize("strategy", ["auto", "whole", "ranges", "batches"])
@pytest.mark.parametrize(("query", "expected"), [
    ({"columns": ["col_1", "region"], "filter": "col_1 <= 200000"},
     lambda t: t.filter(pl.col("col_1") <= 200000).select("col_1", "region")),
    ({"sql": "SELECT col_2 * 2 AS twice, region FROM s3object WHERE region = 'north'"},
     lambda t: t.filter(pl.col("region") == "north").select(
         (pl.col("col_2") * 2).alias("twice"), "region")),
    ({}, lambda t: t),
    ({"filter": "col_1 < 0"}, lambda t: t.clear()),
])
def test_the_streamed_output_is_the_oracle(root: Path, table: pl.DataFrame, strategy: str,
                                           query: dict[str, Any], expected: Any,
                                           budget_mb: int | None) -> None:
    """Decoded whole when the needed bytes are at most a quarter of the memory budget (the
    answer then goes to the spool in one piece), else a row group at a time."""
    request = {"source": f"s3://{BUCKET}/t.parquet", **query, "output": OUT}
    response, fetcher = respond(root, request, strategy=strategy, memory_budget_mb=budget_mb)
    stats = response["stats"]
    # Selecting columns, and only that, copies them undecoded (tests/unit/
    # test_parquet_chunk_copy.py) when the strategy is left to the engine.
    assert (stats["strategy"] == "copy") is (strategy == "auto" and query == {})
    # Batches and ranges stream whatever their size; a whole object is decoded whole when
    # it fits.
    per_group = stats["strategy"] in ("batches", "ranges") or (
        stats["needed_bytes"] > (budget_mb or 614) * 1024 * 1024 // 4)
    if stats["strategy"] != "copy":
        assert stats["strategy_inputs"]["decoder"].endswith("-streamed") is per_group
    want = expected(table)
    got = written(root, response)
    assert got.columns == want.columns
    assert got.sort(got.columns).equals(want.sort(want.columns).cast(got.schema))
    assert response["outputs"][0]["rows"] == want.height == response["stats"]["rows_out"]
    [put] = [c for c in fetcher if c.kind == "put"]
    assert put.end == response["outputs"][0]["bytes"]
    assert list((root / "scratch").iterdir()) == []  # the spooled file is gone


def test_the_pieces_are_row_groups_of_the_object(root: Path) -> None:
    response, _ = respond(root, {"source": f"s3://{BUCKET}/t.parquet", "output": OUT},
                          strategy="whole", memory_budget_mb=1)
    [output] = response["outputs"]
    metadata = pq.read_metadata(io.BytesIO((root / output["uri"][5:]).read_bytes()))
    assert metadata.num_row_groups == GROUPS


@pytest.mark.parametrize("request_", [
    {"source": f"s3://{BUCKET}/t.parquet", "columns": ["col_1"], "limit": 5, "output": OUT},
    {"source": f"s3://{BUCKET}/t.parquet", "sql": "SELECT COUNT(*) AS n FROM s3object",
     "output": OUT},
    {"source": f"s3://{BUCKET}/t.parquet", "sql": "SELECT MEDIAN(col_1) AS m FROM s3object",
     "output": OUT},
    {"source": f"s3://{BUCKET}/t.parquet", "columns": ["col_1"],
     "output": {"uri": "s3://out/r/", "format": "csv"}},
    {"source": f"s3://{BUCKET}/t.parquet", "columns": ["col_1"], "return_rows": True,
     "output": OUT},
])
def test_other_requests_keep_the_in_memory_path(root: Path, request_: dict[str, Any]) -> None:
    response, _ = respond(root, request_, strategy="whole", memory_budget_mb=1)
    assert not response["stats"]["strategy_inputs"]["decoder"].endswith("-streamed")


def test_no_room_in_the_temporary_directory_keeps_the_in_memory_path(
        root: Path, monkeypatch: pytest.MonkeyPatch, table: pl.DataFrame) -> None:
    monkeypatch.setattr(Settings, "tmp_free_bytes", lambda self: 1024 * 1024 * 1024 - 1)
    response, _ = respond(root, {"source": f"s3://{BUCKET}/t.parquet", "output": OUT},
                          strategy="whole", memory_budget_mb=1)
    assert not response["stats"]["strategy_inputs"]["decoder"].endswith("-streamed")
    assert written(root, response).equals(table)


@pytest.fixture(scope="module")
def recountable() -> bytes:
    """Eight row groups of 100,000 rows, each group's needed chunk over half a MiB, so that
    a 1 MiB read-ahead fetches them one window each."""
    n = 800_000
    table = pl.DataFrame({"id": pl.int_range(n, eager=True),
                          "x": pl.int_range(n, eager=True) * 7919 % 1000}).to_arrow()
    return malformed.write(table, row_group_size=100_000, compression="none")


@pytest.mark.parametrize(("strategy", "settings"), [
    ("ranges", {"read_ahead_mb": 1}), ("ranges", {}), ("whole", {"memory_budget_mb": 1}),
    ("batches", {"memory_budget_mb": 1})])
@pytest.mark.parametrize(("group", "change"), [(0, 7), (0, -7), (3, 7), (5, -7)])
@pytest.mark.parametrize("where", ["x < 10", "id >= 100000 AND (x < 10 OR id >= 799990)"])
def test_row_counts_that_contradict_the_data_never_shift_a_slice(
        tmp_path: Path, recountable: bytes, strategy: str, settings: dict[str, int],
        group: int, change: int, where: str) -> None:
    """A footer claiming another row count for one group than its pages hold: a slice of
    rows placed by those counts would start or end inside another group, and a filter
    while decoding would hide it (with the first group pruned by its statistics, a slice
    of the last group placed after a first group claiming 7 rows more ends 7 rows early).
    A read ends in an ObjectFormatError, or writes every row the pages hold that the filter
    keeps: never fewer."""
    fmd = malformed.thrift_footer(recountable)
    fmd.row_groups[group].num_rows += change
    (tmp_path / BUCKET).mkdir()
    (tmp_path / "scratch").mkdir()
    (tmp_path / BUCKET / "t.parquet").write_bytes(malformed.with_thrift_footer(recountable, fmd))
    request = {"source": f"s3://{BUCKET}/t.parquet", "columns": ["id"], "filter": where,
               "output": OUT}
    try:
        response, _ = respond(tmp_path, request, strategy=strategy, **settings)
    except ObjectFormatError as e:
        failed: ObjectFormatError | None = e
    else:
        failed = None
    if failed is not None:
        assert "rows" in failed.message
        assert not (tmp_path / "out").exists()
        return
    table = pl.from_arrow(pq.read_table(io.BytesIO(recountable)))
    assert isinstance(table, pl.DataFrame)
    want = table.filter(pl.sql_expr(where)).select("id")
    assert written(tmp_path, response).sort("id").equals(want)
