"""Properties of the whole read: for random data (nulls, NaNs, several types), row-group
sizes, projections, predicates and strategies, the engine answers exactly what polars
answers on the same frame."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3slice import Engine, FooterCache, LocalFetcher, QueryError, Settings
from tests.support import read_request
from tests.unit.test_pruning import (
    TYPED,
    frame_st,
    polars_answer,
    predicate_st,
    typed_table_st,
    typed_where_st,
    written,
)

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


def _engine(root: str, **kw: Any) -> Engine:
    return Engine(Settings(memory_mb=1024, memory_budget_mb=1, footer_size=256, **kw),
                  fetcher=LocalFetcher(root), footer_cache=FooterCache(0))


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(sorted(TYPED)), data=st.data(), where=typed_where_st(),
       group_rows=st.sampled_from([1, 3, 8]), sql=st.booleans(),
       config=st.sampled_from([{}, {"strategy": "ranges", "small_object_size": 0},
                               {"strategy": "batches", "small_object_size": 0}]))
def test_every_type_against_every_constant_equals_polars(
        kind: str, data: st.DataObject, where: str, group_rows: int, sql: bool,
        config: dict[str, Any]) -> None:
    """Row groups, pages and Bloom filters prune a column of any type compared with a
    constant of any kind exactly as polars' own filter of every row answers; where polars
    refuses the comparison, the read fails typed."""
    table = data.draw(typed_table_st(kind))
    raw = written(table, group_rows)
    want = polars_answer(raw, where)
    query = {"sql": f"SELECT * FROM s3object WHERE {where}"} if sql else {"filter": where}
    with tempfile.TemporaryDirectory() as root:
        (Path(root) / "b").mkdir()
        (Path(root) / "b" / "t.parquet").write_bytes(raw)
        engine = _engine(root, **config)
        if want is None:
            with pytest.raises(QueryError):
                read_request(engine, {"source": "s3://b/t.parquet", **query})
            return
        got = read_request(engine, {"source": "s3://b/t.parquet", **query}).frame
    assert got.sort("id").equals(want.sort("id")), (kind, where, got, want)


#: Partition values of every shape polars' hive inference tells apart.
_PARTS = ["5", "007", "-1", "1.5", "1.", "2024_01_15", "2024-01-15", "2024-01-16", "true",
          "false", "+5", "nan", "NaN", "inf", "9999999999999999999", "a", "", "1_000",
          "2024-01-15 10:00:00", "__HIVE_DEFAULT_PARTITION__"]
_PART_WHERE = ["k = 5", "k = 7", "k > 1", "k = '2024_01_15'", "k = '2024-01-15'", "k IS NULL",
               "k = 1.5", "k", "k = 'a'", "k < 2", "k >= DATE '2024-01-16'", "v >= 2",
               "k = 5 OR v = 1", "NOT (k = 5)", "k IN (5, 7)"]


@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.sampled_from(_PARTS), min_size=1, max_size=4, unique=True),
       in_file=st.booleans(), where=st.none() | st.sampled_from(_PART_WHERE))
def test_hive_partitions_equal_polars_hive_scan(values: list[str], in_file: bool,
                                                where: str | None) -> None:
    """Partition columns are typed, valued and pruned as polars' own
    ``scan_parquet(hive_partitioning=True)`` answers. A file column of the same name never
    counts: the partition's value wins, typed as its values are (DuckDB's rule; polars
    agrees where that is the file column's type, and otherwise types the value as the file
    column, or fails), so the reference is polars' scan of the same files without it."""
    with tempfile.TemporaryDirectory() as root:
        for i, value in enumerate(values):
            for bucket, with_k in (("b", in_file), ("ref", False)):
                folder = Path(root) / bucket / "p" / f"k={value}"
                folder.mkdir(parents=True)
                columns: dict[str, Any] = {"v": pa.array([i, i + 1], pa.int64())}
                if with_k:
                    columns["k"] = pa.array([i, 5], pa.int64())
                pq.write_table(pa.table(columns), folder / "x.parquet")
        frame = hive_scan(Path(root) / "ref" / "p")
        if frame is None:
            return  # polars cannot read these partitions at all (an integer past Int128)
        as_polars = hive_scan(Path(root) / "b" / "p")
        if as_polars is not None and as_polars.schema["k"] == frame.schema["k"]:
            assert same(as_polars, frame)  # polars itself: the partition's value wins
        want = polars_sql(frame, where)
        query = {} if where is None else {"filter": where}
        request = {"source": "s3://b/p/", **query}
        if want is None:
            with pytest.raises(QueryError):
                read_request(_engine(root), request)
            return
        got = read_request(_engine(root), request).frame
    assert got.schema["k"] == want.schema["k"], (values, got)
    assert same(got, want), (values, where, got, want)


_NUMBER_VS_K = re.compile(r"\bk(\s*(?:=|<>|<=|>=|<|>|IN)\s*\(?)(-?\d[\d.]*)")


def hive_scan(path: Path) -> pl.DataFrame | None:
    try:
        return pl.scan_parquet(str(path / "**" / "*.parquet"), hive_partitioning=True).collect()
    except pl.exceptions.PolarsError:
        return None


def same(got: pl.DataFrame, want: pl.DataFrame) -> bool:
    names = sorted(want.columns)
    return sorted(got.columns) == names and got.select(names).sort(names).equals(
        want.select(names).sort(names))


def polars_sql(frame: pl.DataFrame, where: str | None) -> pl.DataFrame | None:
    """polars' answer to ``where`` (None: refused), a text ``k`` compared with a number
    written first as docs/sql.md gives it: a comparison of numbers (polars alone compares
    ``=`` and ``IN`` as text)."""
    if where is None:
        return frame
    if frame.schema.get("k") == pl.String:
        where = _NUMBER_VS_K.sub(lambda m: (
            f"CAST(k AS {'DOUBLE' if '.' in m.group(2) else 'BIGINT'}){m.group(1)}"
            f"{m.group(2)}"), where)
    try:
        return pl.SQLContext(frames={"s3object": frame}).execute(
            f"SELECT * FROM s3object WHERE {where}", eager=True)
    except pl.exceptions.PolarsError:
        return None
