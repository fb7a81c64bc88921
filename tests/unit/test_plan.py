"""The planner is a pure function of (footer, query, settings): tested with no network."""

from __future__ import annotations

import io
import itertools

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from s3slice import ObjectFormatError, Settings
from s3slice.parquet.plan import (
    FooterTooLarge,
    coalesce,
    parse_footer,
    plan_parquet,
    split,
    subtract,
    total,
)
from s3slice.query import predicate as P


def parquet_bytes(frame: pl.DataFrame, **kwargs: object) -> bytes:
    buf = io.BytesIO()
    frame.write_parquet(buf, **kwargs)  # type: ignore[arg-type]
    return buf.getvalue()


@pytest.fixture(scope="module")
def sample() -> bytes:
    frame = pl.DataFrame({"a": range(1000), "b": [i % 7 for i in range(1000)],
                          "c": [f"s{i % 3}" for i in range(1000)]})
    return parquet_bytes(frame, row_group_size=100, compression="snappy")


def test_footer_from_a_suffix(sample: bytes) -> None:
    footer = parse_footer(sample[-65536:], size=len(sample), uri="s3://b/k")
    assert footer.metadata.num_row_groups == 10
    assert footer.schema_names == ["a", "b", "c"]
    assert footer.size == len(sample)
    assert footer.data_end == len(sample) - footer.length


def test_footer_larger_than_the_tail_asks_for_exactly_enough(sample: bytes) -> None:
    with pytest.raises(FooterTooLarge) as info:
        parse_footer(sample[-100:], size=len(sample), uri="s3://b/k")
    footer = parse_footer(sample[-info.value.needed:], size=len(sample), uri="s3://b/k")
    assert footer.metadata.num_row_groups == 10


@pytest.mark.parametrize(("data", "message"), [
    (b"", "too small"),
    (b"PAR1" + b"\0" * 20 + b"NOPE", "no PAR1 magic"),
    (b"PAR1" + b"\0" * 20 + (10**6).to_bytes(4, "little") + b"PAR1", "claims 1000000 bytes"),
    (b"PAR1" + b"\xff" * 20 + (20).to_bytes(4, "little") + b"PAR1", "corrupt Parquet footer"),
])
def test_bad_footers_are_typed_errors(data: bytes, message: str) -> None:
    with pytest.raises(ObjectFormatError, match=message) as info:
        parse_footer(data, size=len(data), uri="s3://b/bad")
    assert "s3://b/bad" in str(info.value)


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


ranges_st = st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 500)).map(
    lambda t: (t[0], t[0] + t[1])), max_size=30)


@given(ranges_st, st.integers(0, 300))
def test_coalesce_covers_everything_and_leaves_gaps_wider_than_max(
        ranges: list[tuple[int, int]], gap: int) -> None:
    merged = coalesce(ranges, gap)
    for a, b in ranges:
        assert any(x <= a and b <= y for x, y in merged)
    for (_, b1), (a2, _) in itertools.pairwise(merged):
        assert a2 - b1 > gap


@given(ranges_st, st.integers(1, 700))
def test_split_preserves_bytes(ranges: list[tuple[int, int]], part: int) -> None:
    merged = coalesce(ranges, 0)
    parts = split(merged, part)
    assert total(parts) == total(merged)
    assert [i for a, b in parts for i in range(a, b)] == [
        i for a, b in merged for i in range(a, b)]
    for a, b in merged:
        mine = [(x, y) for x, y in parts if a <= x and y <= b]
        if b - a < 2 * part:  # one request, as it is
            assert mine == [(a, b)]
        else:  # equal parts of at least ``part`` bytes, each under twice that
            assert len(mine) == (b - a) // part
            assert all(part <= y - x < 2 * part for x, y in mine)
            assert max(y - x for x, y in mine) - min(y - x for x, y in mine) <= 1


@given(ranges_st, st.integers(8, 700), st.integers(1, 40))
def test_few_large_ranges_are_cut_to_fill_the_connections(
        ranges: list[tuple[int, int]], part: int, fill: int) -> None:
    merged = coalesce(ranges, 0)
    plain = split(merged, part)
    parts = split(merged, part, fill=fill)
    # the same bytes, in order, each range cut into contiguous parts of itself
    assert [i for a, b in parts for i in range(a, b)] == [
        i for a, b in merged for i in range(a, b)]
    assert len(parts) >= len(plain)
    if len(plain) >= fill:
        assert parts == plain
    else:
        assert len(parts) <= fill
        # a part shorter than part // 8 is only ever a whole range that was short already
        cut = [(x, y) for x, y in parts if (x, y) not in merged]
        assert all(y - x >= part // 8 for x, y in cut)
        if len(parts) < fill:  # stopped early: the longest parts could not be halved again
            assert all((b - a) // (len([p for p in parts if a <= p[0] < b]) + 1) < part // 8
                       for a, b in merged)


def test_one_large_range_is_read_over_eight_connections() -> None:
    mib = 1 << 20
    parts = split([(0, 12 * mib)], 8 * mib, fill=8)
    assert len(parts) == 8 and {b - a for a, b in parts} == {12 * mib // 8}
    # ten row groups already fill them: one request each, as polars makes
    ten = [(k * 50 * mib, k * 50 * mib + 10 * mib) for k in range(10)]
    assert split(ten, 8 * mib, fill=8) == ten


def test_a_row_group_of_ten_megabytes_is_one_request() -> None:
    mib = 1 << 20
    assert split([(4, 4 + 10 * mib)], 8 * mib) == [(4, 4 + 10 * mib)]
    assert split([(0, 16 * mib + 1)], 8 * mib) == [(0, 8 * mib + 1), (8 * mib + 1, 16 * mib + 1)]


@given(ranges_st, st.tuples(st.integers(0, 10_000), st.integers(0, 2000)))
def test_subtract_removes_exactly_the_held_bytes(ranges: list[tuple[int, int]],
                                                 held: tuple[int, int]) -> None:
    lo, hi = held[0], held[0] + held[1]
    merged = coalesce(ranges, 0)
    left = subtract(merged, (lo, hi))
    want = {i for a, b in merged for i in range(a, b) if not lo <= i < hi}
    got = [i for a, b in left for i in range(a, b)]
    assert sorted(got) == sorted(want)


def test_parse_footer_uses_pyarrow_for_every_type() -> None:
    table = pa.table({"d": pa.array([1, 2], pa.date32()), "s": ["x", "y"],
                      "dec": pa.array([1, 2], pa.decimal128(10, 2))})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    data = buf.getvalue()
    footer = parse_footer(data, size=len(data), uri="u")
    assert footer.schema_names == ["d", "s", "dec"]
