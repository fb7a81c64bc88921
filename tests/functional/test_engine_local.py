"""The engine over local files: exact ranges recorded, results equal to a plain polars read."""

from __future__ import annotations

import datetime as dt
import decimal
import os
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import s3slice.fetch.image
from s3slice import (
    FOOTER_CACHE,
    Engine,
    FooterCache,
    LocalFetcher,
    ObjectChangedError,
    ObjectFormatError,
    ObjectNotFoundError,
    RecordingFetcher,
    Settings,
    UnknownColumnError,
)
from s3slice.cli.demo import sample_table
from s3slice.fetch.image import MemoryImage, Unwritten
from s3slice.parquet.footer import parse_footer
from s3slice.parquet.plan import plan_parquet
from tests.support import read_request

BUCKET = "data"


def settings(**kw: Any) -> Settings:
    base: dict[str, Any] = {"memory_mb": 2048, "footer_size": 64 * 1024}
    base.update(kw)
    return Settings(**base)


def engine_for(root: Path, **kw: Any) -> tuple[Engine, RecordingFetcher]:
    fetcher = RecordingFetcher(LocalFetcher(root))
    return Engine(settings(**kw), fetcher=fetcher, footer_cache=FooterCache(1 << 20)), fetcher


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return sample_table(200_000)


@pytest.fixture
def root(tmp_path: Path, table: pl.DataFrame) -> Path:
    (tmp_path / BUCKET).mkdir()
    table.write_parquet(tmp_path / BUCKET / "t.parquet", row_group_size=25_000,
                        compression="snappy")
    return tmp_path


def oracle(table: pl.DataFrame, where: str | None, columns: list[str] | None) -> pl.DataFrame:
    out = table.filter(pl.sql_expr(where)) if where else table
    return out.select(columns) if columns else out


def same(a: pl.DataFrame, b: pl.DataFrame) -> bool:
    return a.sort(a.columns).equals(b.sort(b.columns))


@pytest.mark.parametrize("strategy", ["auto", "ranges", "whole", "batches"])
@pytest.mark.parametrize(("columns", "where"), [
    (["col_1", "col_2"], "col_1 <= 1000"),
    (["col_3"], "col_1 > 999000 OR col_2 < 10"),
    (None, "region = 'north' AND col_4 BETWEEN 100 AND 50000"),
    (["region"], None),
    (["col_1"], "col_1 IN (1, 2, 3, 500000)"),
    (["col_2"], "col_1 < 0"),
])
def test_results_equal_the_oracle(root: Path, table: pl.DataFrame, strategy: str,
                                  columns: list[str] | None, where: str | None) -> None:
    engine, _ = engine_for(root, strategy=strategy, memory_budget_mb=4)
    request: dict[str, Any] = {"source": f"s3://{BUCKET}/t.parquet"}
    if columns:
        request["columns"] = columns
    if where:
        request["filter"] = where
    result = read_request(engine, request)
    assert same(result.frame, oracle(table, where, columns))
    chosen = result.stats.strategy
    if strategy == "auto":
        assert chosen in {"ranges", "whole", "whole-tmp", "batches"}
    else:  # a forced whole download goes to /tmp when the object exceeds the 4 MB budget
        assert chosen.startswith(strategy)


def test_exact_ranges_for_a_footer_and_query(root: Path) -> None:
    path = root / BUCKET / "t.parquet"
    data = path.read_bytes()
    engine, rec = engine_for(root, strategy="ranges", max_gap=0, part_size=1 << 30)
    result = read_request(engine, {"source": f"s3://{BUCKET}/t.parquet", "columns": ["col_2"],
                          "filter": "col_1 <= 1000"})
    footer = parse_footer(data, size=len(data), uri="u")
    from s3slice.core.model import Query
    from s3slice.query.analyzer import analyze
    plan = plan_parquet(footer, columns=["col_1", "col_2"],
                        predicate=analyze(Query(filter="col_1 <= 1000")).predicate, uri="u")
    tail = [c for c in rec.calls if c.kind == "tail"]
    assert len(tail) == 1 and tail[0].end == len(data) and tail[0].start == len(data) - 65536
    expected = sorted(r for g in plan.row_groups for r in plan.chunks[g])
    # adjacent chunks of one row group are one range when max_gap is 0
    from s3slice.core.ranges import coalesce
    assert rec.ranges() == coalesce(expected, 0)
    assert result.stats.bytes_fetched == 65536 + plan.needed_bytes
    assert result.stats.requests == 1 + len(coalesce(expected, 0))


@pytest.mark.parametrize("strategy", ["ranges", "batches"])
def test_sorted_data_reads_only_overlapping_row_groups(tmp_path: Path, strategy: str) -> None:
    (tmp_path / BUCKET).mkdir()
    n = 100_000
    frame = pl.DataFrame({"ts": pl.datetime_range(dt.datetime(2024, 1, 1),
                                                  dt.datetime(2024, 1, 1) + dt.timedelta(
                                                      seconds=n - 1), "1s", eager=True),
                          "v": range(n)})
    frame.write_parquet(tmp_path / BUCKET / "s.parquet", row_group_size=5_000)
    engine, rec = engine_for(tmp_path, strategy=strategy)
    where = ("ts >= TIMESTAMP '2024-01-01 05:00:00' AND "
             "ts < TIMESTAMP '2024-01-01 05:16:40'")
    result = read_request(engine, {"source": f"s3://{BUCKET}/s.parquet", "columns": ["v"],
                          "filter": where})
    assert result.stats.row_groups_read == 1
    md = pq.read_metadata(tmp_path / BUCKET / "s.parquet")
    group = md.row_group(3)  # rows 15000..19999
    lo = min(group.column(i).data_page_offset for i in range(group.num_columns))
    lo = min([lo] + [group.column(i).dictionary_page_offset or lo
                     for i in range(group.num_columns)])
    hi = max(group.column(i).data_page_offset + group.column(i).total_compressed_size
             for i in range(group.num_columns))
    assert rec.ranges()
    assert all(lo <= a and b <= hi for a, b in rec.ranges())
    assert result.frame.height == 1000
    assert result.frame["v"].to_list() == list(range(18000, 19000))
    # polars reads the planned row group as a slice of rows: the image holds no other
    # (and the stats name the decoder that did)
    assert result.stats.strategy_inputs["decoder"] == "polars"


def test_polars_decodes_an_image_that_holds_every_row_group(root: Path,
                                                            table: pl.DataFrame) -> None:
    engine, _ = engine_for(root, strategy="ranges", max_gap=0)  # no bytes between chunks
    result = read_request(engine, {"source": f"s3://{BUCKET}/t.parquet", "columns": ["col_2"],
                          "filter": "col_1 <= 1000"})
    assert result.stats.row_groups_read == result.stats.row_groups == 8
    assert result.stats.strategy_inputs["decoder"] == "polars"
    assert same(result.frame, oracle(table, "col_1 <= 1000", ["col_2"]))
    # the image held only the footer's tail and the two columns' chunks: polars read
    # nothing else (a byte it needed and did not find would have failed the decode)
    assert result.stats.bytes_fetched == 65536 + result.stats.needed_bytes


def test_the_in_memory_image_is_sparse_and_bounded() -> None:
    """Only the pages a part is written to are resident, and no part lands outside."""
    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    before = rss()
    image = MemoryImage(1 << 30)
    try:
        image.write((1 << 29) + 5, memoryview(b"x" * 4096))
        assert rss() - before < 64 << 20  # a 1 GiB image holding 4 KiB
        with image.source() as f:
            f.seek((1 << 29) + 5)
            assert f.read(4096) == b"x" * 4096
            f.seek(1 << 29)
            with pytest.raises(Unwritten, match=f"bytes {1 << 29}-{(1 << 29) + 5} "):
                f.read(6)  # what was never written is never read (as zeros)
        assert image.holds((1 << 29) + 5, (1 << 29) + 4101)
        assert not image.holds((1 << 29) + 4, (1 << 29) + 6)
        with pytest.raises(ValueError, match="outside an image"):
            image.write((1 << 30) - 2, memoryview(b"xyz"))
    finally:
        image.close()
    with pytest.raises(ValueError, match="outside an image"):
        image.write(0, memoryview(b"late"))  # after close: refused, never copied


def test_an_image_too_large_to_reserve_is_a_sparse_memfd() -> None:
    image = MemoryImage(1 << 44)  # 16 TiB: no system reserves that as one allocation
    try:
        assert isinstance(image.reader_source(), str)
        image.write((1 << 44) - 3, memoryview(b"end"))
        with image.source() as f:
            f.seek((1 << 44) - 3)
            assert f.read(3) == b"end"
            f.seek((1 << 44) - 4)
            with pytest.raises(Unwritten):
                f.read(4)
    finally:
        image.close()


def test_polars_decodes_a_whole_object_for_row_groups_the_plan_kept_apart(
        tmp_path: Path) -> None:
    """The whole object is in memory: polars reads it all and its filter finds no row in
    the row groups the plan pruned, so the kept groups need not be consecutive."""
    (tmp_path / BUCKET).mkdir()
    frame = pl.DataFrame({"a": range(100_000), "b": range(100_000)})
    frame.write_parquet(tmp_path / BUCKET / "o.parquet", row_group_size=10_000)
    engine, _ = engine_for(tmp_path, strategy="whole")
    where = "a < 15000 OR a > 85000"
    result = read_request(engine, {"source": f"s3://{BUCKET}/o.parquet", "columns": ["b"],
                          "filter": where})
    assert result.stats.row_groups_read == 4 < result.stats.row_groups  # 0, 1, 8 and 9
    assert result.stats.strategy_inputs["decoder"] == "polars"
    assert same(result.frame, oracle(frame, where, ["b"]))


def test_polars_decodes_the_memfd_image_too(root: Path, table: pl.DataFrame,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(size: int) -> bytes:
        raise MemoryError
    monkeypatch.setattr(s3slice.fetch.image, "_zeroed", refused)
    engine, _ = engine_for(root, strategy="ranges")
    result = read_request(engine, {"source": f"s3://{BUCKET}/t.parquet", "columns": ["col_2"],
                          "filter": "col_1 <= 1000"})
    assert result.stats.strategy_inputs["decoder"] == "polars"
    assert same(result.frame, oracle(table, "col_1 <= 1000", ["col_2"]))


@pytest.mark.parametrize("codec", ["snappy", "zstd", "gzip", "lz4", "none"])
@pytest.mark.parametrize("dictionary", [True, False])
def test_codecs_encodings_types_and_nulls(tmp_path: Path, codec: str, dictionary: bool) -> None:
    (tmp_path / BUCKET).mkdir()
    n = 3000
    table = pa.table({
        "i": pa.array([None if k % 3 == 0 else k for k in range(n)], pa.int32()),
        "f": pa.array([None if k % 5 == 0 else k / 3 for k in range(n)], pa.float64()),
        "s": pa.array([None if k % 7 == 0 else f"v{k % 11}" for k in range(n)]),
        "d": pa.array([dt.date(2020, 1, 1) + dt.timedelta(days=k % 400) for k in range(n)]),
        "t": pa.array([dt.datetime(2020, 1, 1) + dt.timedelta(minutes=k) for k in range(n)],
                      pa.timestamp("us")),
        "m": pa.array([decimal.Decimal(k) / 100 for k in range(n)], pa.decimal128(12, 2)),
        "b": pa.array([k % 2 == 0 for k in range(n)]),
    })
    pq.write_table(table, tmp_path / BUCKET / "x.parquet", row_group_size=500,
                   compression=codec, use_dictionary=dictionary)
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    engine, _ = engine_for(tmp_path)
    for where in ["i > 2500", "f IS NULL", "s = 'v3'", "d < DATE '2020-02-01'",
                  "t >= TIMESTAMP '2020-01-02 00:00:00'", "m <= 1.5", "b AND i < 100",
                  "i IS NULL OR s IS NULL"]:
        result = read_request(engine, {"source": f"s3://{BUCKET}/x.parquet", "filter": where})
        assert same(result.frame, frame.filter(pl.sql_expr(where))), where
    # every row group: polars' reader decodes, to the types pyarrow's would give
    result = read_request(engine, {"source": f"s3://{BUCKET}/x.parquet"})
    assert result.stats.strategy_inputs["decoder"] == "polars"
    assert result.frame.schema == frame.schema
    assert result.frame.equals(frame)


def test_unknown_column_names_column_and_object(root: Path) -> None:
    engine, rec = engine_for(root)
    with pytest.raises(UnknownColumnError) as info:
        read_request(engine, {"source": f"s3://{BUCKET}/t.parquet", "columns": ["col_1", "nope"]})
    assert "'nope'" in str(info.value) and "s3://data/t.parquet" in str(info.value)
    assert not [c for c in rec.calls if c.kind == "range"]


def test_missing_and_non_parquet_objects(root: Path) -> None:
    engine, _ = engine_for(root)
    with pytest.raises(ObjectNotFoundError, match="s3://data/missing.parquet"):
        read_request(engine, {"source": f"s3://{BUCKET}/missing.parquet"})
    (root / BUCKET / "notes.txt").write_text("hello, this is not parquet" * 10)
    with pytest.raises(ObjectFormatError, match="s3://data/notes.txt"):
        read_request(engine, {"source": f"s3://{BUCKET}/notes.txt"})


def test_corrupt_page_is_a_typed_error(root: Path) -> None:
    path = root / BUCKET / "t.parquet"
    data = bytearray(path.read_bytes())
    md = pq.read_metadata(path)
    col = md.row_group(0).column(1)
    start = col.dictionary_page_offset or col.data_page_offset
    data[start: start + 64] = b"\xfe" * 64
    (root / BUCKET / "bad.parquet").write_bytes(bytes(data))
    engine, _ = engine_for(root)
    with pytest.raises(ObjectFormatError, match="s3://data/bad.parquet"):
        read_request(engine, {"source": f"s3://{BUCKET}/bad.parquet", "columns": ["col_1"]})


def test_footer_cache_skips_the_footer_request(root: Path) -> None:
    engine, rec = engine_for(root)
    src = f"s3://{BUCKET}/t.parquet"
    first = read_request(engine, {"source": src, "columns": ["col_1"], "filter": "col_1 <= 1000"})
    etag = LocalFetcher._etag(root / BUCKET / "t.parquet")
    from s3slice import ObjectRef
    from s3slice.core.model import Query, Request
    req = Request(sources=(ObjectRef(bucket=BUCKET, key="t.parquet", etag=etag),),
                  query=Query(columns=("col_1",), filter="col_1 <= 1000"))
    rec.calls.clear()
    second = read_request(engine, req)
    assert not [c for c in rec.calls if c.kind == "tail"]
    assert same(first.frame, second.frame)
    assert second.stats.strategy_inputs["footer"] == "cache"
    # the cached footer's bytes go into the image, so polars' reader can open it
    assert second.stats.strategy_inputs["decoder"] == "polars"


def test_small_object_of_known_size_is_one_request(tmp_path: Path) -> None:
    (tmp_path / BUCKET).mkdir()
    frame = sample_table(2000)
    frame.write_parquet(tmp_path / BUCKET / "small.parquet")
    size = (tmp_path / BUCKET / "small.parquet").stat().st_size
    engine, rec = engine_for(tmp_path)
    from s3slice import ObjectRef
    from s3slice.core.model import Query, Request
    req = Request(sources=(ObjectRef(bucket=BUCKET, key="small.parquet", size=size),),
                  query=Query(filter="col_1 < 500000"))
    result = read_request(engine, req)
    assert result.stats.requests == 1
    assert [(c.kind, c.start, c.end) for c in rec.calls] == [("range", 0, size)]
    assert result.stats.strategy == "single"
    assert same(result.frame, frame.filter(pl.col("col_1") < 500000))


class ChangingFetcher(LocalFetcher):
    """Rewrites the object after its footer was read, ``times`` times."""

    def __init__(self, root: Path, path: Path, times: int) -> None:
        super().__init__(root)
        self.path, self.times = path, times

    def get_tail(self, obj: Any, nbytes: int, *, if_none_match: str | None = None) -> Any:
        tail = super().get_tail(obj, nbytes, if_none_match=if_none_match)
        if self.times > 0:
            self.times -= 1
            data = self.path.read_bytes()
            import os
            self.path.write_bytes(data)
            st = self.path.stat()
            os.utime(self.path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        return tail


def test_object_changed_mid_read_restarts_once(root: Path, table: pl.DataFrame) -> None:
    path = root / BUCKET / "t.parquet"
    once = Engine(settings(), fetcher=ChangingFetcher(root, path, 1),
                  footer_cache=FooterCache(1 << 20))
    result = read_request(once, {"source": f"s3://{BUCKET}/t.parquet", "columns": ["col_1"],
                        "filter": "col_1 < 100"})
    assert same(result.frame, oracle(table, "col_1 < 100", ["col_1"]))
    twice = Engine(settings(), fetcher=ChangingFetcher(root, path, 2),
                   footer_cache=FooterCache(1 << 20))
    with pytest.raises(ObjectChangedError, match="s3://data/t.parquet"):
        read_request(twice, {"source": f"s3://{BUCKET}/t.parquet", "columns": ["col_1"]})


def test_batches_bound_memory_per_batch(root: Path, table: pl.DataFrame) -> None:
    engine, rec = engine_for(root, strategy="batches", memory_budget_mb=1)
    result = read_request(engine, {"source": f"s3://{BUCKET}/t.parquet",
                                   "columns": ["col_1", "col_2"]})
    assert same(result.frame, table.select("col_1", "col_2"))
    assert result.stats.strategy == "batches"
    # Each batch stays within half the budget, so the 8 row groups (~4 MB of needed
    # bytes) take several batches; together they are every kept row group.
    assert result.stats.row_groups_read == 8
    assert len(rec.batches) > 1
    assert max(rec.batches) <= 512 * 1024
    assert result.stats.needed_bytes <= sum(rec.batches) <= result.stats.needed_bytes * 1.01


@pytest.mark.parametrize(("megabytes", "cached"), [(0, False), (1, True)])
def test_the_process_footer_cache_is_sized_by_the_setting(root: Path, megabytes: int,
                                                           cached: bool) -> None:
    """``S3SLICE_FOOTER_CACHE_MB`` bounds the process's footer cache (0 turns it off)."""
    try:
        FOOTER_CACHE.clear()
        engine = Engine(settings(footer_cache_mb=megabytes), fetcher=LocalFetcher(root))
        assert engine.footers is FOOTER_CACHE
        assert FOOTER_CACHE.max_bytes == megabytes * 1024 * 1024
        read_request(engine, {"source": f"s3://{BUCKET}/t.parquet", "columns": ["col_1"]})
        again = read_request(engine, {"source": f"s3://{BUCKET}/t.parquet", "columns": ["col_1"]})
        footer = again.stats.strategy_inputs["footer"]
        assert footer == ("cache (revalidated)" if cached else "suffix GET")
    finally:
        FOOTER_CACHE.clear()
        FOOTER_CACHE.resize(Settings().footer_cache_mb * 1024 * 1024)
