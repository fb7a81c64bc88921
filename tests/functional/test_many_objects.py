"""Many objects per query: globs, hive partition columns with pruning before any read, and
schemas unified by column name; results equal polars' own hive scan of the same files."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from s3slice import (
    Engine,
    FooterCache,
    LocalFetcher,
    ObjectNotFoundError,
    RecordingFetcher,
    RequestError,
    SchemaConflictError,
    Settings,
    UnknownColumnError,
    parse_request,
)
from s3slice.engine import engine as _engine
from s3slice.engine.sources import glob_regex, hive_values, partitions
from tests.support import read_request

BUCKET = "lake"


def engine_for(root: Path) -> tuple[Engine, RecordingFetcher]:
    fetcher = RecordingFetcher(LocalFetcher(root))
    return Engine(Settings(memory_mb=2048), fetcher=fetcher,
                  footer_cache=FooterCache(1 << 20)), fetcher


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """trips/year=Y/month=MM/part-N.parquet, twelve objects, plus a stray CSV."""
    root = tmp_path_factory.mktemp("lake")
    n = 0
    for year in (2023, 2024):
        for month in ("01", "06", "11"):
            for part in range(2):
                folder = root / BUCKET / "trips" / f"year={year}" / f"month={month}"
                folder.mkdir(parents=True, exist_ok=True)
                pl.DataFrame({
                    "id": list(range(n * 100, n * 100 + 100)),
                    "fare": [float(i % 37) for i in range(100)],
                    "zone": [("a", "b", "c", "d")[(i + n) % 4] for i in range(100)],
                }).write_parquet(folder / f"part-{part}.parquet", row_group_size=50)
                n += 1
    (root / BUCKET / "trips" / "README.csv").write_text("not,data\n")
    return root


def oracle(root: Path) -> pl.LazyFrame:
    return pl.scan_parquet(root / BUCKET / "trips" / "**" / "*.parquet",
                           hive_partitioning=True)


def keys_read(rec: RecordingFetcher) -> set[str]:
    return {c.uri.removeprefix(f"s3://{BUCKET}/") for c in rec.calls
            if c.kind in ("tail", "range")}


def test_partition_pruning_reads_only_matching_objects(lake: Path) -> None:
    engine, rec = engine_for(lake)
    result = read_request(engine, {"source": f"s3://{BUCKET}/trips/**/*.parquet",
                          "columns": ["id", "fare", "year", "month"],
                          "filter": "year = 2024 AND month >= 6 AND fare > 30"})
    expected = oracle(lake).filter(
        (pl.col("year") == 2024) & (pl.col("month") >= 6) & (pl.col("fare") > 30)
    ).select("id", "fare", "year", "month").collect()
    assert result.frame.sort("id").equals(expected.sort("id"))
    assert keys_read(rec) == {f"trips/year=2024/month={m}/part-{p}.parquet"
                    for m in ("06", "11") for p in (0, 1)}
    assert (result.stats.objects, result.stats.objects_pruned) == (4, 8)
    assert result.frame.schema["year"] == pl.Int64


def test_sql_groups_by_a_partition_column(lake: Path) -> None:
    engine, _ = engine_for(lake)
    result = read_request(engine, {
        "source": f"s3://{BUCKET}/trips/",
        "input": "parquet",
        "sql": "SELECT year, zone, COUNT(*) AS n, SUM(fare) AS total FROM s3object "
               "WHERE month IN (1, 11) GROUP BY year, zone ORDER BY year, zone"})
    expected = (oracle(lake).filter(pl.col("month").is_in([1, 11]))
                .group_by("year", "zone").agg(pl.len().cast(pl.UInt32).alias("n"),
                                              pl.col("fare").sum().alias("total"))
                .sort("year", "zone").collect())
    assert result.frame.equals(expected.cast(result.frame.schema))  # type: ignore[arg-type]
    # Four Parquet objects of months 6, and the CSV, whose month is null.
    assert result.stats.objects_pruned == 5


def test_when_every_object_is_pruned_the_schema_still_comes_back(lake: Path) -> None:
    engine, rec = engine_for(lake)
    result = read_request(engine, {"source": f"s3://{BUCKET}/trips/year=*/month=*/part-?.parquet",
                          "filter": "year = 1999"})
    assert result.frame.height == 0
    assert result.frame.columns == ["id", "fare", "zone", "year", "month"]
    # One small object (its size came with the listing) in one GET, for the schema.
    assert len([c for c in rec.calls if c.kind != "list"]) == 1
    assert result.stats.objects_pruned == 12


def test_partition_columns_are_checked_as_columns(lake: Path) -> None:
    engine, _ = engine_for(lake)
    with pytest.raises(UnknownColumnError, match="'day'") as info:
        read_request(engine, {"source": f"s3://{BUCKET}/trips/year=2023/**/*.parquet",
                     "filter": "day = 1"})
    assert "year, month" in str(info.value)


@pytest.mark.parametrize(("pattern", "count"), [
    ("trips/year=2023/*/*.parquet", 6),
    ("trips/*/month=0[16]/part-1.parquet", 4),
    ("trips/*/month=[!0]*/*", 4),
    ("trips/**", 13),
    ("trips/*.csv", 1),
    ("trips/*.parquet", 0),
])
def test_glob_matching(lake: Path, pattern: str, count: int) -> None:
    engine, _ = engine_for(lake)
    request = parse_request({"source": f"s3://{BUCKET}/{pattern}"})
    if count == 0:
        with pytest.raises(ObjectNotFoundError, match="no objects match"):
            engine.resolve(request)
    else:
        assert len(engine.resolve(request)) == count


@pytest.mark.parametrize(("pattern", "key", "matches"), [
    ("a/*.csv", "a/x.csv", True), ("a/*.csv", "a/b/x.csv", False),
    ("a/**/*.csv", "a/x.csv", True), ("a/**/*.csv", "a/b/c/x.csv", True),
    ("a/?.csv", "a/xy.csv", False), ("a/[xy].csv", "a/y.csv", True),
    ("a/[!xy].csv", "a/y.csv", False), ("a/[!xy].csv", "a/z.csv", True),
    ("a/f(1)+.csv", "a/f(1)+.csv", True), ("a/*", "a/b/", False),
])
def test_glob_regex(pattern: str, key: str, matches: bool) -> None:
    assert bool(glob_regex(pattern).match(key)) is matches


def test_hive_values_and_types() -> None:
    assert hive_values("t/year=2024/city=S%C3%A3o%20Paulo/x=__HIVE_DEFAULT_PARTITION__/f") == {
        "year": "2024", "city": "São Paulo", "x": None}
    assert hive_values("year=2024") == {}  # a file name is no partition
    from s3slice import ObjectRef
    objs = [ObjectRef(bucket="b", key=k) for k in ("d/a=1/b=x/f", "d/a=2/b=1.5/f", "d/a=3/f")]
    values, types = partitions(objs)
    assert types == {"a": pl.Int64(), "b": pl.String()}
    assert values == [{"a": 1, "b": "x"}, {"a": 2, "b": "1.5"}, {"a": 3, "b": None}]


def test_schemas_unify_by_name_and_widen_numbers(tmp_path: Path) -> None:
    (tmp_path / BUCKET).mkdir()
    pl.DataFrame({"a": [1, 2], "b": ["x", "y"]}, schema={"a": pl.Int32, "b": pl.String}
                 ).write_parquet(tmp_path / BUCKET / "one.parquet")
    pl.DataFrame({"a": [2.5], "c": [True]}).write_parquet(tmp_path / BUCKET / "two.parquet")
    engine, _ = engine_for(tmp_path)
    result = read_request(engine, {"source": [f"s3://{BUCKET}/one.parquet", f"s3://{BUCKET}/two.parquet"],
                          "sql": "SELECT * FROM s3object ORDER BY a"})
    assert result.frame.to_dict(as_series=False) == {
        "a": [1.0, 2.0, 2.5], "b": ["x", "y", None], "c": [None, None, True]}


def test_a_type_conflict_names_both_objects(tmp_path: Path) -> None:
    (tmp_path / BUCKET).mkdir()
    pl.DataFrame({"a": [1, 2]}).write_parquet(tmp_path / BUCKET / "one.parquet")
    pl.DataFrame({"a": ["1"]}).write_parquet(tmp_path / BUCKET / "two.parquet")
    engine, _ = engine_for(tmp_path)
    with pytest.raises(SchemaConflictError) as info:
        read_request(engine, {"source": f"s3://{BUCKET}/*.parquet"})
    message = str(info.value)
    assert re.search(r"'a' is Int64 in s3://lake/one.parquet but String in "
                     r"s3://lake/two.parquet", message), message


def test_a_glob_whose_listing_holds_the_output_is_refused() -> None:
    with pytest.raises(RequestError, match="lies inside the source prefix"):
        parse_request({"source": "s3://b/data/*.parquet", "output": "s3://b/data/out/"})
    parse_request({"source": "s3://b/data/*.parquet", "output": "s3://b/results/"})


@pytest.mark.parametrize("sql", [
    "SELECT zone, COUNT(*) AS n, AVG(fare) AS m, STDDEV(fare) AS sd FROM s3object "
    "GROUP BY zone ORDER BY zone",
    "SELECT id, fare FROM s3object ORDER BY fare DESC, id LIMIT 7",
    "SELECT MEDIAN(fare) AS med FROM s3object",  # no exact split: answered in one piece
])
def test_a_many_object_query_shares_the_distributed_maps_split(
        lake: Path, sql: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over many objects in one invocation, a combining query is answered as the
    Distributed Map answers it: a partial per object, then the final plan."""
    splits: list[object] = []
    original = _engine._single_split
    monkeypatch.setattr(_engine, "_single_split",
                        lambda *args: splits.append(original(*args)) or splits[-1])
    engine, _ = engine_for(lake)
    got = read_request(engine, {"source": f"s3://{BUCKET}/trips/**/*.parquet", "sql": sql}).frame
    want = pl.SQLContext(s3object=oracle(lake).drop("year", "month")).execute(
        sql, eager=True)
    assert [s is None for s in splits] == ["MEDIAN" in sql]
    assert got.columns == want.columns
    assert_frame_equal(got, want, check_dtypes=False, rel_tol=1e-9)
