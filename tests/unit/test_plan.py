"""The planner is a pure function of (footer, query, settings): tested with no network."""

from __future__ import annotations

import polars as pl
import pytest

from s3slice import ObjectFormatError, Settings
from s3slice.core.ranges import coalesce, total
from s3slice.parquet.footer import parse_footer
from s3slice.parquet.plan import plan_parquet
from s3slice.query.pruning import predicate as P
from tests.unit.parquet_samples import parquet_bytes


def test_plan_keeps_only_matching_row_groups_and_needed_columns(sample: bytes) -> None:
    footer = parse_footer(sample, size=len(sample), uri="s3://b/k")
    plan = plan_parquet(footer, columns=["a", "c"], predicate=P.Cmp("a", "<", 250), uri="u")
    assert plan.row_groups == (0, 1, 2)
    assert plan.columns == ("a", "c")
    md = footer.metadata
    expected = []
    for g in (0, 1, 2):
        for i in (0, 2):
            col = md.row_group(g).column(i)
            start = col.dictionary_page_offset if col.has_dictionary_page else \
                col.data_page_offset
            expected.append((start, start + col.total_compressed_size))
    assert sorted(r for g in plan.row_groups for r in plan.chunks[g]) == sorted(expected)
    assert plan.needed_bytes == total(expected)


def test_no_columns_reads_the_cheapest_one(sample: bytes) -> None:
    footer = parse_footer(sample, size=len(sample), uri="s3://b/k")
    plan = plan_parquet(footer, columns=[], predicate=P.TRUE, uri="u")
    assert len(plan.columns) == 1
    assert plan.row_groups == tuple(range(10))


def test_fetch_ranges_cover_needed_bytes_and_respect_knobs(sample: bytes) -> None:
    footer = parse_footer(sample, size=len(sample), uri="s3://b/k")
    plan = plan_parquet(footer, columns=["a", "b"], predicate=P.TRUE, uri="u")
    for gap in (0, 64, 1 << 20):
        for part in (64, 1000, 1 << 20):
            s = Settings(max_gap=gap, part_size=part, fill_parts=1)
            ranges = plan.fetch_ranges(s)
            assert all(0 < b - a < 2 * part for a, b in ranges)
            merged = coalesce((r for g in plan.row_groups for r in plan.chunks[g]), gap)
            assert len(ranges) == sum(max(1, (b - a) // part) for a, b in merged)
            covered = set()
            for a, b in ranges:
                covered.update(range(a, b))
            for g in plan.row_groups:
                for a, b in plan.chunks[g]:
                    assert covered.issuperset(range(a, b))
            if gap == 0:
                assert total(ranges) == plan.needed_bytes


def test_corrupt_column_offsets_are_typed_errors() -> None:
    data = parquet_bytes(pl.DataFrame({"a": [1, 2, 3]}))
    footer = parse_footer(data, size=len(data), uri="u")
    shrunk = parse_footer(data, size=len(data), uri="u")
    object.__setattr__(shrunk, "size", footer.length + 8)  # the object as if truncated
    with pytest.raises(ObjectFormatError, match="outside the data"):
        plan_parquet(shrunk, columns=["a"], predicate=P.TRUE, uri="s3://b/t")
