"""Properties of the whole read: for random data (nulls, NaNs, several types), row-group
sizes, projections, predicates and strategies, the engine answers exactly what polars
answers on the same frame."""

from __future__ import annotations

import tempfile
from pathlib import Path

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from s3slice import Engine, FooterCache, LocalFetcher, Settings
from tests.support import read_request
from tests.unit.test_pruning import frame_st, predicate_st

COLUMNS = ["i", "f", "s", "d"]


@settings(max_examples=60)
@given(frame=frame_st(), where=predicate_st(), group_rows=st.sampled_from([4, 15, 60]),
       columns=st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=4, unique=True),
       strategy=st.sampled_from(["auto", "ranges", "whole", "batches"]),
       compression=st.sampled_from(["snappy", "zstd", "uncompressed"]))
def test_the_engine_equals_polars(frame: pl.DataFrame, where: str, group_rows: int,
                                  columns: list[str], strategy: str, compression: str) -> None:
    with tempfile.TemporaryDirectory() as root:
        (Path(root) / "b").mkdir()
        frame.write_parquet(Path(root) / "b" / "t.parquet", row_group_size=group_rows,
                            compression=compression)  # type: ignore[arg-type]
        engine = Engine(Settings(memory_mb=1024, strategy=strategy, memory_budget_mb=1,
                                 footer_size=256),
                        fetcher=LocalFetcher(root), footer_cache=FooterCache(0))
        got = read_request(engine, {"source": "s3://b/t.parquet", "columns": columns,
                           "filter": where}).frame
    want = frame.filter(pl.sql_expr(where)).select(columns)
    assert got.equals(want), (where, got, want)
