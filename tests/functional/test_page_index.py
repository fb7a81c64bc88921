"""Page-level pruning: files with a page index are read page by page, exactly as polars would
answer, fetching only the pages that may hold a matching row."""

from __future__ import annotations

import datetime as dt
import math
import random
import struct
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import thriftpy2
from hypothesis import given, settings
from hypothesis import strategies as st
from thriftpy2.protocol import TCompactProtocolFactory
from thriftpy2.utils import deserialize

import s3slice.parquet.pages
import s3slice.parquet.thrift
from s3slice import (
    Engine,
    FooterCache,
    LocalFetcher,
    ObjectFormatError,
    QueryError,
    RecordingFetcher,
    Settings,
)
from s3slice.core.model import Query
from s3slice.core.ranges import Held
from s3slice.parquet import plan as _plan
from s3slice.parquet.footer import parse_footer
from s3slice.query.analyzer import analyze
from s3slice.query.pruning import predicate as P
from tests.malformed import thrift_footer
from tests.support import read_request
from tests.unit.test_pruning import (
    TYPED,
    frame_st,
    polars_answer,
    predicate_st,
    typed_table_st,
    typed_where_st,
)

BUCKET = "data"
THRIFT = thriftpy2.load(str(Path(__file__).parents[2] / "functions" / "s3slice" / "parquet" /
                            "parquet.thrift"), module_name="test_parquet_thrift")


#: The share of its bytes a footer may be for the page index to be parsed, as shipped.
SHIPPED_FOOTER_SHARE = s3slice.parquet.pages.MAX_FOOTER_SHARE


@pytest.fixture(autouse=True)
def any_footer_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """These files are small: their footers are too large a share of their bytes for the
    page index to pay (``_pages.parse_pays``). The test of that rule restores it."""
    monkeypatch.setattr(s3slice.parquet.pages, "MAX_FOOTER_SHARE", math.inf)


def engine_for(root: Path, **kw: Any) -> tuple[Engine, RecordingFetcher]:
    base: dict[str, Any] = {"memory_mb": 2048, "strategy": "ranges", "page_index_ratio": 1.0}
    base.update(kw)
    fetcher = RecordingFetcher(LocalFetcher(root))
    return Engine(Settings(**base), fetcher=fetcher, footer_cache=FooterCache(1 << 20)), fetcher


def write(root: Path, table: pa.Table, name: str = "p.parquet", **kw: Any) -> Path:
    options: dict[str, Any] = {"write_page_index": True, "row_group_size": 50_000,
                               "data_page_size": 16 * 1024}
    options.update(kw)
    (root / BUCKET).mkdir(exist_ok=True)
    path = root / BUCKET / name
    pq.write_table(table, path, **options)
    return path


def sorted_table(n: int = 200_000) -> pa.Table:
    rng = random.Random(7)
    start = dt.datetime(2024, 1, 1)
    return pa.table({
        "ts": pa.array([start + dt.timedelta(seconds=i) for i in range(n)], pa.timestamp("us")),
        "v": pa.array([rng.randrange(1000) for _ in range(n)], pa.int64()),
        "s": pa.array([f"k{i % 11}" for i in range(n)]),
        "f": pa.array([rng.random() for _ in range(n)]),
    })


WINDOW = ("ts >= TIMESTAMP '2024-01-01 10:00:00' AND ts < TIMESTAMP '2024-01-01 10:30:00'")


def oracle(path: Path, where: str, columns: list[str]) -> pl.DataFrame:
    return pl.read_parquet(path).filter(pl.sql_expr(where)).select(columns)


def _thrift(name: str, data: bytes) -> Any:
    return deserialize(getattr(THRIFT, name)(), data, TCompactProtocolFactory())


def test_a_time_window_fetches_only_the_pages_that_overlap_it(tmp_path: Path) -> None:
    # Dictionary pages are always read whole, so the sorted columns are written plain.
    path = write(tmp_path, sorted_table(), use_dictionary=["s"])
    engine, rec = engine_for(tmp_path, max_gap=0, part_size=1 << 30)
    result = read_request(engine, {"source": f"s3://{BUCKET}/p.parquet", "columns": ["ts", "v"],
                          "filter": WINDOW})
    assert result.frame.equals(oracle(path, WINDOW, ["ts", "v"]))
    assert result.stats.strategy_inputs["decoder"] == "pyarrow-pages"

    # The expected pages, read from the file's own page index: those of ``ts`` whose
    # [min, max] meets the window, and of ``v`` those holding any row of those ts pages.
    data = path.read_bytes()
    (length,) = struct.unpack("<I", data[-8:-4])
    fmd = _thrift("FileMetaData", data[-8 - length:-8])
    lo = int((dt.datetime(2024, 1, 1, 10) - dt.datetime(1970, 1, 1)).total_seconds() * 1e6)
    hi = lo + 30 * 60 * 1_000_000
    want: list[tuple[int, int]] = []
    rows_total = 0
    for rg in fmd.row_groups:
        ts, v = rg.columns[0], rg.columns[1]
        ci = _thrift("ColumnIndex", data[ts.column_index_offset:][:ts.column_index_length])
        locs = {c: _thrift("OffsetIndex", data[cc.offset_index_offset:]
                           [:cc.offset_index_length]).page_locations
                for c, cc in (("ts", ts), ("v", v))}
        kept_rows = []
        for k, (a, b) in enumerate(zip(ci.min_values, ci.max_values, strict=True)):
            if struct.unpack("<q", a)[0] < hi and struct.unpack("<q", b)[0] >= lo:
                first = locs["ts"][k].first_row_index
                end = (locs["ts"][k + 1].first_row_index if k + 1 < len(locs["ts"])
                       else rg.num_rows)
                kept_rows.append((first, end))
        if not kept_rows:
            continue
        rows_total += sum(b - a for a, b in kept_rows)
        for c, cc in (("ts", ts), ("v", v)):
            meta = cc.meta_data
            first_page = locs[c][0].offset
            start = meta.dictionary_page_offset or meta.data_page_offset
            if start < first_page:
                want.append((start, first_page))
            for k, loc in enumerate(locs[c]):
                end = (locs[c][k + 1].first_row_index if k + 1 < len(locs[c])
                       else rg.num_rows)
                if any(a < end and loc.first_row_index < b for a, b in kept_rows):
                    want.append((loc.offset, loc.offset + loc.compressed_page_size))
    assert want, "the window should meet some pages"
    # pyarrow writes the page index after the last row group: the footer's suffix read
    # holds what it reaches of it, and one GET reads the rest.
    index_start = min(min(cc.column_index_offset, cc.offset_index_offset)
                      for rg in fmd.row_groups for cc in rg.columns)
    tail_start = len(data) - Settings().footer_size
    index_reads = [r for r in rec.ranges() if r[0] >= index_start]
    assert len(index_reads) == (1 if index_start < tail_start else 0)
    assert all(r[1] <= tail_start for r in index_reads)
    from s3slice.core.ranges import coalesce
    assert [r for r in rec.ranges() if r[1] <= index_start] == coalesce(want, 0)
    assert result.stats.needed_bytes == sum(b - a for a, b in want)
    assert result.stats.rows_in == rows_total
    # A tenth of a row group's pages, not the whole row group.
    row_group_bytes = result.stats.strategy_inputs["page_index"]["row_group_bytes"]
    assert result.stats.needed_bytes < row_group_bytes / 5


def test_without_a_page_index_the_row_group_path_is_unchanged(tmp_path: Path) -> None:
    path = write(tmp_path, sorted_table(20_000), write_page_index=False)
    engine, _ = engine_for(tmp_path)
    result = read_request(engine, {"source": f"s3://{BUCKET}/p.parquet", "columns": ["v"],
                          "filter": WINDOW})
    assert result.frame.equals(oracle(path, WINDOW, ["v"]))
    assert "page_index" not in result.stats.strategy_inputs
    assert result.stats.strategy_inputs["decoder"] != "pyarrow-pages"


def test_a_footer_too_large_to_pay_for_is_not_parsed(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3slice.parquet.pages, "MAX_FOOTER_SHARE", SHIPPED_FOOTER_SHARE)
    # Four row groups: the footer is over 1/256 of the bytes the window needs.
    path = write(tmp_path, sorted_table(), use_dictionary=["s"])
    parsed: list[str] = []
    real = s3slice.parquet.thrift.thrift_metadata
    monkeypatch.setattr(s3slice.parquet.thrift, "thrift_metadata",
                        lambda footer, uri: parsed.append(uri) or real(footer, uri))
    engine, _ = engine_for(tmp_path)
    result = read_request(engine, {"source": f"s3://{BUCKET}/p.parquet", "columns": ["ts", "v"],
                          "filter": WINDOW})
    assert result.frame.equals(oracle(path, WINDOW, ["ts", "v"]))
    page_index = result.stats.strategy_inputs["page_index"]
    assert page_index == {"used": False, "footer_bytes": page_index["footer_bytes"],
                          "row_group_bytes": result.stats.needed_bytes}
    assert page_index["footer_bytes"] > SHIPPED_FOOTER_SHARE * result.stats.needed_bytes
    assert parsed == []
    assert result.stats.strategy_inputs["decoder"] != "pyarrow-pages"
    # Once parsed (the footer cache keeps the Thrift form), the same footer costs nothing.
    data = path.read_bytes()
    footer = parse_footer(data, size=len(data), uri="u")
    plan = _plan.plan_parquet(footer, columns=["ts", "v"],
                              predicate=analyze(Query(filter=WINDOW)).predicate, uri="u")
    assert not s3slice.parquet.pages.parse_pays(footer, plan)
    s3slice.parquet.thrift.thrift_metadata(footer, "u")
    assert s3slice.parquet.pages.parse_pays(footer, plan)


def test_pages_are_not_used_when_they_save_too_little(tmp_path: Path) -> None:
    path = write(tmp_path, sorted_table(20_000))
    engine, _ = engine_for(tmp_path, page_index_ratio=0.8)
    where = "v >= 0"  # every page may match
    result = read_request(engine, {"source": f"s3://{BUCKET}/p.parquet", "columns": ["ts", "v"],
                          "filter": where})
    assert result.frame.equals(oracle(path, where, ["ts", "v"]))
    page_index = result.stats.strategy_inputs["page_index"]
    assert page_index["used"] is False
    assert page_index["pages_kept"] == page_index["pages_total"]
    assert result.stats.strategy_inputs["decoder"] != "pyarrow-pages"


def typed_table(n: int) -> pa.Table:
    rng = random.Random(3)
    base = dt.datetime(2024, 3, 1)
    nulls = [rng.random() < 0.3 for _ in range(n)]

    def masked(values: list[Any], typ: pa.DataType) -> pa.Array:
        return pa.array([None if m else x for x, m in zip(values, nulls, strict=True)], typ)

    order = sorted(rng.randrange(10_000) for _ in range(n))
    return pa.table({
        "i32": pa.array(order, pa.int32()),
        "u32": pa.array([x * 400_000 for x in order], pa.uint32()),
        "i64": masked([x * 3 for x in order], pa.int64()),
        "f64": masked([x / 7.0 for x in order], pa.float64()),
        "f32": pa.array([x / 3.0 for x in order], pa.float32()),
        "s": masked([f"key-{x:05d}" for x in order], pa.string()),
        "d": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=int(x // 50)) for x in order],
                      pa.date32()),
        "ts_ms": pa.array([base + dt.timedelta(seconds=int(x)) for x in order],
                          pa.timestamp("ms")),
        "ts_tz": pa.array([base + dt.timedelta(seconds=int(x)) for x in order],
                          pa.timestamp("us", tz="UTC")),
        "ts_s": pa.array([base + dt.timedelta(seconds=int(x)) for x in order],
                         pa.timestamp("s")),
        "sparse": pa.array([None] * n, pa.int64()),
    })


@pytest.mark.parametrize("where", [
    "i32 BETWEEN 4000 AND 4100",
    "u32 > 3900000000",
    "i64 IN (300, 12000, 29001) OR i64 IS NULL",
    "f64 < 10.5 AND f64 IS NOT NULL",
    "f32 >= 3000",
    "s >= 'key-09000'",
    "s = 'key-05000' OR s = 'key-05001'",
    "d = DATE '2024-03-01'",
    "ts_ms < TIMESTAMP '2024-03-01 00:05:00'",
    "ts_tz > TIMESTAMPTZ '2024-03-01 02:40:00+00:00'",
    "ts_s BETWEEN TIMESTAMP '2024-03-01 01:00:00' AND TIMESTAMP '2024-03-01 01:01:00'",
    "NOT (i32 < 9000)",
    "sparse IS NOT NULL",
    "sparse IS NULL AND i32 < 100",
])
@pytest.mark.parametrize("options", [
    {"compression": "snappy"},
    {"compression": "zstd", "use_dictionary": False},
    {"compression": "gzip", "data_page_version": "2.0"},
    {"compression": "lz4", "max_rows_per_page": 700},
    {"compression": "none", "max_rows_per_page": 1},
])
def test_types_codecs_and_encodings_equal_the_oracle(tmp_path: Path, where: str,
                                                     options: dict[str, Any]) -> None:
    rows = 6_000 if options.get("max_rows_per_page") != 1 else 800
    path = write(tmp_path, typed_table(rows), row_group_size=rows // 3,
                 data_page_size=2048, **options)
    engine, _ = engine_for(tmp_path)
    columns = ["i32", "s", "ts_tz", "ts_s", "f64"]
    result = read_request(engine, {"source": f"s3://{BUCKET}/p.parquet", "columns": columns,
                          "filter": where})
    want = oracle(path, where, columns)
    assert result.frame.equals(want), (where, result.frame, want)
    pushed = P.columns_of(analyze(Query(filter=where)).predicate)
    if pushed and result.stats.row_groups_read:
        assert result.stats.strategy_inputs["page_index"]["pages_total"] > 0


def test_a_corrupt_offset_index_is_a_format_error(tmp_path: Path) -> None:
    path = write(tmp_path, sorted_table(20_000))
    data = bytearray(path.read_bytes())
    (length,) = struct.unpack("<I", data[-8:-4])
    fmd = _thrift("FileMetaData", bytes(data[-8 - length:-8]))
    cc = fmd.row_groups[0].columns[0]
    data[cc.offset_index_offset:cc.offset_index_offset + cc.offset_index_length] = (
        b"\xff" * cc.offset_index_length)
    path.write_bytes(bytes(data))
    engine, _ = engine_for(tmp_path)
    with pytest.raises(ObjectFormatError, match="offset index|OffsetIndex"):
        read_request(engine, {"source": f"s3://{BUCKET}/p.parquet", "columns": ["v"],
                     "filter": "ts < TIMESTAMP '2024-01-01 00:10:00'"})


def test_held_ranges_read_across_neighbouring_pieces() -> None:
    held = Held()
    held.write(10, memoryview(b"abcde"))
    held.write(15, memoryview(b"fgh"))
    held.write(30, memoryview(b"xyz"))
    assert held.read((12, 17)) == b"cdefg"
    assert held.read((30, 33)) == b"xyz"
    with pytest.raises(KeyError):
        held.read((16, 31))
    with pytest.raises(KeyError):
        held.read((0, 11))


@settings(max_examples=40, deadline=None)
@given(frame=frame_st(), where=predicate_st(), group_rows=st.sampled_from([15, 60]),
       page_rows=st.sampled_from([1, 3, 8]), version=st.sampled_from(["1.0", "2.0"]),
       dictionary=st.booleans(),
       columns=st.lists(st.sampled_from(["i", "f", "s", "d"]), min_size=1, max_size=4,
                        unique=True))
def test_page_reads_equal_polars(frame: pl.DataFrame, where: str, group_rows: int,
                                 page_rows: int, version: str, dictionary: bool,
                                 columns: list[str]) -> None:
    with tempfile.TemporaryDirectory() as root:
        path = write(Path(root), frame.to_arrow(), row_group_size=group_rows,
                     max_rows_per_page=page_rows, data_page_version=version,
                     use_dictionary=dictionary)
        engine, _ = engine_for(Path(root), footer_size=256)
        got = read_request(engine, {"source": f"s3://{BUCKET}/p.parquet", "columns": columns,
                           "filter": where}).frame
        del path
    want = frame.filter(pl.sql_expr(where)).select(columns)
    assert got.equals(want), (where, got, want)


@pytest.mark.parametrize("nested", [
    # one leaf per top-level field, yet ``n`` is nested
    pa.array([{"x": i} for i in range(4000)]),
    pa.array([[i, i] for i in range(4000)]),
])
def test_nested_schemas_keep_the_row_group_path(tmp_path: Path, nested: pa.Array) -> None:
    table = pa.table({"i": pa.array(range(4000)), "n": nested})
    path = write(tmp_path, table, row_group_size=2000, data_page_size=512)
    engine, _ = engine_for(tmp_path)
    where = "i BETWEEN 100 AND 120"
    result = read_request(engine, {"source": f"s3://{BUCKET}/p.parquet", "filter": where})
    assert result.frame.equals(pl.read_parquet(path).filter(pl.sql_expr(where)))
    assert "page_index" not in result.stats.strategy_inputs



def test_a_footer_longer_than_the_first_read_costs_one_more_get_of_only_what_is_missing(
        tmp_path: Path) -> None:
    """The retry fetches just the bytes before the first tail (and ``footer_size`` more,
    where the page index lies), so the index then needs no GET of its own."""
    table = pa.table({f"c{i}": pa.array(range(40_000)) for i in range(3)})
    path = write(tmp_path, table, row_group_size=1_000)
    data = path.read_bytes()
    footer_length = int.from_bytes(data[-8:-4], "little") + 8
    footer_size = 8 * 1024
    assert footer_length > footer_size  # the first tail holds only part of the footer
    index_start = min(chunk.column_index_offset
                      for group in thrift_footer(data).row_groups for chunk in group.columns)
    assert len(data) - footer_length - index_start <= footer_size  # within the retry's reach
    engine, rec = engine_for(tmp_path, footer_size=footer_size)
    got = read_request(engine, {"source": f"s3://{BUCKET}/p.parquet", "columns": ["c0"],
                       "filter": "c1 BETWEEN 100 AND 120"})
    assert got.frame["c0"].to_list() == list(range(100, 121))
    tail, retry, *data_reads = list(rec)
    assert (tail.kind, tail.start, tail.end) == ("tail", len(data) - footer_size, len(data))
    assert (retry.kind, retry.end) == ("range", len(data) - footer_size)
    assert retry.start == len(data) - footer_length - footer_size
    assert got.stats.strategy_inputs["page_index"]["used"] is True
    # Every later read is of data pages, none of the index.
    assert all(c.end <= index_start for c in data_reads), data_reads


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(sorted(TYPED)), data=st.data(), where=typed_where_st(),
       page_rows=st.sampled_from([1, 2, 5]), sql=st.booleans())
def test_pages_of_every_type_against_every_constant_equal_polars(
        kind: str, data: st.DataObject, where: str, page_rows: int, sql: bool) -> None:
    """Page statistics judged in the column's own type, as row groups' are: a page holding
    a row polars' filter keeps is read, whatever the constant's kind."""
    table = data.draw(typed_table_st(kind))
    with tempfile.TemporaryDirectory() as root:
        path = write(Path(root), table, row_group_size=12, max_rows_per_page=page_rows)
        want = polars_answer(path.read_bytes(), where)
        engine, _ = engine_for(Path(root), footer_size=256, small_object_size=0)
        query = {"sql": f"SELECT * FROM s3object WHERE {where}"} if sql else {"filter": where}
        request = {"source": f"s3://{BUCKET}/p.parquet", **query}
        if want is None:
            with pytest.raises(QueryError):
                read_request(engine, request)
            return
        result = read_request(engine, request)
    assert result.frame.sort("id").equals(want.sort("id")), (kind, where, result.frame, want)
    if result.stats.row_groups_read and not sql:
        assert result.stats.strategy_inputs.get("page_index", {}).get("pages_total", 1) > 0
