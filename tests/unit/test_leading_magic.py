"""The leading ``PAR1`` checked by any fetch whose first range starts near byte 0
(:func:`s3slice.parquet.footer.reaching_head`), and by a footer read that holds the whole
object."""

from __future__ import annotations

import io
from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3slice.core.errors import ObjectFormatError
from s3slice.parquet.footer import HEAD_REACH, MAGIC, parse_footer, reaching_head

URI = "s3://b/k.parquet"


def deliver(data: bytes, ranges: list[tuple[int, int]],
            sink: Callable[[int, memoryview], None], cut: int) -> None:
    """Each range's bytes to ``sink`` in pieces of at most ``cut`` bytes, as a stream."""
    for start, end in ranges:
        for at in range(start, end, cut):
            sink(at, memoryview(data)[at:min(end, at + cut)])


def test_a_first_range_near_the_start_is_fetched_from_byte_0() -> None:
    got: dict[int, bytes] = {}
    ranges, sink = reaching_head([(4, 100), (500, 600)], lambda a, d: got.update({a: bytes(d)}),
                                 URI)
    assert ranges == [(0, 100), (500, 600)]
    data = MAGIC + bytes(range(256)) * 3
    deliver(data, ranges, sink, cut=1 << 20)
    assert got == {4: data[4:100], 500: data[500:600]}  # the sink sees only what it asked


def test_a_first_range_far_from_the_start_is_left_alone() -> None:
    def sink(start: int, data: memoryview) -> None:
        pass
    ranges, same = reaching_head([(HEAD_REACH + 1, HEAD_REACH + 10)], sink, URI)
    assert ranges == [(HEAD_REACH + 1, HEAD_REACH + 10)]
    assert same is sink


@settings(max_examples=60, deadline=None)
@given(first=st.integers(0, HEAD_REACH), cut=st.integers(1, 9), wrong=st.integers(0, 3))
def test_a_wrong_byte_of_the_magic_is_found_whatever_the_pieces(first: int, cut: int,
                                                                 wrong: int) -> None:
    good = MAGIC + bytes(400)
    bad = bytearray(good)
    bad[wrong] ^= 0xFF
    got: list[tuple[int, bytes]] = []
    ranges, sink = reaching_head([(first, 400)], lambda a, d: got.append((a, bytes(d))), URI)
    assert ranges == [(0, 400)]
    deliver(good, ranges, sink, cut)
    assert b"".join(d for _, d in got) == good[first:400]
    ranges, sink = reaching_head([(first, 400)], lambda a, d: None, URI)
    with pytest.raises(ObjectFormatError, match="no PAR1 magic at its start"):
        deliver(bytes(bad), ranges, sink, cut)


def test_a_footer_read_holding_the_whole_object_checks_its_start() -> None:
    buf = io.BytesIO()
    pq.write_table(pa.table({"a": [1, 2, 3]}), buf)
    data = buf.getvalue()
    assert parse_footer(data, size=len(data), uri=URI).metadata.num_rows == 3
    with pytest.raises(ObjectFormatError, match="no PAR1 magic at its start"):
        parse_footer(b"PAR0" + data[4:], size=len(data), uri=URI)
    # A suffix that stops short of the start says nothing of it.
    assert parse_footer(data[8:], size=len(data), uri=URI).metadata.num_rows == 3
