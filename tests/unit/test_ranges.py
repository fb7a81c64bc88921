"""Byte ranges: coalesced, split into parallel parts, and subtracted, exactly."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from s3slice.core.ranges import coalesce, split, subtract, total

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
