"""Many objects per query: glob patterns over keys, hive partition values and their types,
and partition pruning, with no network."""

from __future__ import annotations

import datetime as dt
from typing import Any

import polars as pl
import pytest

from s3slice import ObjectRef, Query
from s3slice.engine.sources import HIVE_NULL, glob_regex, hive_values, may_match, partitions
from s3slice.query.analyzer import analyze
from s3slice.query.pruning import predicate as P


def refs(*keys: str) -> list[ObjectRef]:
    return [ObjectRef(bucket="b", key=k) for k in keys]


# ------------------------------------------------------------------------------------ globs

@pytest.mark.parametrize(("pattern", "matching", "other"), [
    ("data/*.parquet", ["data/a.parquet", "data/.parquet"],
     ["data/x/a.parquet", "data/a.parquet.gz", "other/data/a.parquet", "data/a.csv"]),
    ("data/**/*.parquet", ["data/a.parquet", "data/x/a.parquet", "data/x/y/z.parquet"],
     ["data/x/a.csv", "dat/a.parquet"]),
    ("data/**", ["data/a", "data/x/y/z", "data/"], ["dat/a", "other/data/a"]),
    ("data/a**", ["data/a", "data/ab/c"], ["data/b"]),
    ("data/?.csv", ["data/a.csv", "data/1.csv"], ["data/ab.csv", "data/.csv", "data//.csv"]),
    ("y=202[3-4]/*", ["y=2023/a", "y=2024/b"], ["y=2022/a", "y=2025/a", "y=2023/x/a"]),
    ("d/[ab].csv", ["d/a.csv", "d/b.csv"], ["d/c.csv", "d/ab.csv", "d/[ab].csv"]),
    ("d/[!ab].csv", ["d/c.csv", "d/!.csv"], ["d/a.csv", "d/b.csv", "d//.csv"]),
    # regex syntax in a key is literal text
    ("d/a+b (1).csv", ["d/a+b (1).csv"], ["d/aab (1).csv", "d/a+b 1.csv"]),
    ("d/$^.|{1}.csv", ["d/$^.|{1}.csv"], ["d/.csv"]),
    # an unclosed bracket is a literal one
    ("d/[x", ["d/[x"], ["d/x"]),
    # ``*`` spans any character of a segment, also a newline
    ("d/*", ["d/a\nb"], ["d/a/b"]),
])
def test_a_glob_matches_whole_keys_and_stays_within_segments(
        pattern: str, matching: list[str], other: list[str]) -> None:
    regex = glob_regex(pattern)
    assert [k for k in matching + other if regex.match(k)] == matching


# ---------------------------------------------------------------------- partition values

@pytest.mark.parametrize(("key", "values"), [
    ("t/year=2024/month=05/part.parquet", {"year": "2024", "month": "05"}),
    ("year=2024/part.parquet", {"year": "2024"}),
    ("t/part.parquet", {}),
    ("t/x=1.parquet", {}),  # the object's own name is no directory
    ("t/city=New%20York/a%3Db=%2F/p.csv", {"city": "New York", "a=b": "/"}),
    (f"t/year={HIVE_NULL}/p.csv", {"year": None}),
    ("t/=5/k=/p.csv", {"k": ""}),  # a directory with no name is not a partition
    ("a=1/b=2/a=3/p.csv", {"a": "3", "b": "2"}),  # a later directory of the same name wins
    ("t/k=v=w/p.csv", {"k": "v=w"}),
])
def test_partition_values_come_from_name_value_directories(
        key: str, values: dict[str, str | None]) -> None:
    assert hive_values(key) == values


def test_partition_columns_are_typed_across_objects() -> None:
    values, dtypes = partitions(refs(
        "t/year=2024/month=05/rate=1/city=Paris/p.parquet",
        "t/year=2023/month=12/rate=1.5/city=New%20York/p.parquet",
        f"t/year={HIVE_NULL}/month=1/rate=2/city=7/p.parquet",
        "t/month=2/p.parquet",
    ))
    assert dtypes == {"year": pl.Int64(), "month": pl.Int64(), "rate": pl.Float64(),
                      "city": pl.String()}
    assert values == [
        {"year": 2024, "month": 5, "rate": 1.0, "city": "Paris"},
        {"year": 2023, "month": 12, "rate": 1.5, "city": "New York"},
        {"year": None, "month": 1, "rate": 2.0, "city": "7"},
        {"year": None, "month": 2, "rate": None, "city": None},
    ]
    assert [type(v["rate"]) for v in values[:3]] == [float, float, float]


def test_a_column_with_only_nulls_is_a_string_and_unpartitioned_objects_have_none() -> None:
    assert partitions(refs(f"t/k={HIVE_NULL}/p.csv", "t/k=/p.csv")) == (
        [{"k": None}, {"k": ""}], {"k": pl.String()})
    assert partitions(refs(f"t/k={HIVE_NULL}/p.csv")) == ([{"k": None}], {"k": pl.String()})
    assert partitions(refs("t/a.csv", "t/b.csv")) == ([{}, {}], {})
    assert partitions([]) == ([], {})


# --------------------------------------------------------------------------------- pruning

@pytest.mark.parametrize(("predicate", "values", "expected"), [
    (P.Cmp("year", "=", 2024), {"year": 2024}, True),
    (P.Cmp("year", "=", 2024), {"year": 2023}, False),
    (P.Cmp("year", ">", 2023), {"year": 2024}, True),
    (P.Cmp("year", "<", 2024), {"year": 2024}, False),
    (P.Cmp("year", "=", 2024), {"year": None}, False),  # null is never equal
    (P.Not(P.Cmp("year", "=", 2024)), {"year": None}, False),  # nor unequal
    (P.IsNull("year"), {"year": None}, True),
    (P.IsNull("year"), {"year": 2024}, False),
    (P.Not(P.IsNull("year")), {"year": 2024}, True),
    (P.In("city", ("Paris", "Oslo")), {"city": "Oslo"}, True),
    (P.In("city", ("Paris", "Oslo")), {"city": "Rome"}, False),
    (P.Between("rate", 1.0, 2.0), {"rate": 1.5}, True),
    (P.Between("rate", 1.0, 2.0), {"rate": 2.5}, False),
    # other columns are unknown: anything about them may hold
    (P.Cmp("a", "=", 1), {"year": 2024}, True),
    (P.And((P.Cmp("a", ">", 1), P.Cmp("year", "=", 2023))), {"year": 2024}, False),
    (P.Or((P.Cmp("a", ">", 1), P.Cmp("year", "=", 2023))), {"year": 2024}, True),
    (P.Opaque(), {"year": 2024}, True),
    # a literal of another type than the column's is left to the engine
    (P.Cmp("year", "=", "2024"), {"year": 2023}, True),
])
def test_a_partition_is_ruled_out_only_when_no_row_can_match(
        predicate: P.Pred, values: dict[str, Any], expected: bool) -> None:
    assert may_match(predicate, values) is expected


KEYS = (
    "t/year=2024/month=05/city=Paris/p.parquet",
    "t/year=2024/month=12/city=Oslo/p.parquet",
    "t/year=2023/month=05/city=New%20York/p.parquet",
    f"t/year={HIVE_NULL}/month=01/city={HIVE_NULL}/p.parquet",
    "t/year=2022/month=07/city=Paris/p.parquet",
)


@pytest.mark.parametrize("condition", [
    "year = 2024", "year != 2024", "year >= 2023 AND month <= 6", "month < 6 OR year = 2022",
    "city = 'Paris'", "city IN ('Oslo', 'New York')", "year BETWEEN 2022 AND 2023",
    "year IS NULL", "year IS NOT NULL AND city != 'Paris'", "NOT (month = 5)",
    "NOT (year = 2024 AND city = 'Paris')",
])
def test_pruning_on_partition_columns_alone_keeps_exactly_the_matching_objects(
        condition: str) -> None:
    """With every column of the condition a partition column, pruning is exact: the objects
    kept are the ones whose partition values polars' SQL selects."""
    values, dtypes = partitions(refs(*KEYS))
    table = pl.DataFrame(values, schema=dtypes).with_row_index()
    selected = table.sql(f"SELECT * FROM self WHERE {condition}")["index"].to_list()
    predicate = analyze(Query(filter=condition)).predicate
    kept = [i for i, v in enumerate(values) if may_match(predicate, v)]
    assert kept == selected
    assert 0 < len(kept) < len(KEYS)  # the condition really tells objects apart


@pytest.mark.parametrize(("values", "dtype", "typed"), [
    (["2024_01_15", "2024_01_16"], pl.String(), ["2024_01_15", "2024_01_16"]),
    (["007", "12"], pl.Int64(), [7, 12]),
    (["+5", "5"], pl.String(), ["+5", "5"]),
    (["1_000"], pl.String(), ["1_000"]),
    (["1.", ".5"], pl.Float64(), [1.0, 0.5]),
    (["nan"], pl.String(), ["nan"]),
    (["true", "FALSE"], pl.Boolean(), [True, False]),
    (["2024-01-15", "2024-02-01"], pl.Date(), [dt.date(2024, 1, 15), dt.date(2024, 2, 1)]),
    (["", "3"], pl.Int64(), [None, 3]),
    (["", "a"], pl.String(), ["", "a"]),
    (["9999999999999999999", "1"], pl.Int128(), [9999999999999999999, 1]),
    (["10:00:00"], pl.String(), ["10:00:00"]),
])
def test_partition_types_are_polars_hive_types(values: list[str], dtype: pl.DataType,
                                               typed: list[object]) -> None:
    """As polars' ``scan_parquet(hive_partitioning=True)`` types them (Python's int()
    took ``2024_01_15`` for 20240115); an empty value is null but in a string column."""
    got, dtypes = partitions(refs(*(f"t/k={v}/p.parquet" for v in values)))
    assert dtypes == {"k": dtype}
    assert [g["k"] for g in got] == typed
