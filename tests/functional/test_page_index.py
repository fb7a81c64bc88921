"""Page-level pruning: files with a page index are read page by page, exactly as polars would
answer, fetching only the pages that may hold a matching row. (Every type, codec and
encoding against the oracle: ``test_page_index_oracle.py``.)"""

from __future__ import annotations

import datetime as dt
import struct
from pathlib import Path

import pyarrow as pa
import pytest

import s3slice.parquet.pages
import s3slice.parquet.thrift
from s3slice import (
    Settings,
)
from s3slice.core.model import Query
from s3slice.parquet import plan as _plan
from s3slice.parquet.footer import parse_footer
from s3slice.query.analyzer import analyze
from tests.functional.page_index_files import (
    BUCKET,
    SHIPPED_FOOTER_SHARE,
    WINDOW,
    any_footer_is_parsed,  # noqa: F401 - autouse: small files' page index parsed
    engine_for,
    oracle,
    sorted_table,
    thrift_struct,
    write,
)
from tests.malformed import thrift_footer
from tests.support import read_request


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
    fmd = thrift_struct("FileMetaData", data[-8 - length:-8])
    lo = int((dt.datetime(2024, 1, 1, 10) - dt.datetime(1970, 1, 1)).total_seconds() * 1e6)
    hi = lo + 30 * 60 * 1_000_000
    want: list[tuple[int, int]] = []
    rows_total = 0
    for rg in fmd.row_groups:
        ts, v = rg.columns[0], rg.columns[1]
        ci = thrift_struct("ColumnIndex", data[ts.column_index_offset:][:ts.column_index_length])
        locs = {c: thrift_struct("OffsetIndex", data[cc.offset_index_offset:]
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
