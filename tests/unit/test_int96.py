"""INT96 decoded from its 12 bytes (``_arrow.int96_timestamps``), against the Julian day
arithmetic done here with Python's integers."""

from __future__ import annotations

import datetime as dt
import struct
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3slice.parquet.arrow import INT96_DAYS, int96_timestamps

EPOCH = 2_440_588
DAY_NS = 86_400 * 10**9


def raw(values: list[tuple[int, int] | None]) -> pa.Array[Any]:
    return pa.array([None if v is None else struct.pack("<qi", v[1], v[0]) for v in values],
                    pa.binary(12))


def spark(value: tuple[int, int] | None) -> int | None:
    """Spark's reading: whole days from the epoch in microseconds, plus the nanoseconds
    (of the day: never negative here) truncated."""
    if value is None:
        return None
    day, nanos = value
    return (day - EPOCH) * 86_400_000_000 + nanos // 1000


#: Julian day 0 aside: its readers disagree (see the test of it below).
days = st.integers(EPOCH + INT96_DAYS[0], EPOCH + INT96_DAYS[1] - 1).filter(bool)
values = st.lists(st.one_of(st.none(), st.tuples(days, st.integers(0, DAY_NS - 1))),
                  max_size=40)


@settings(max_examples=200, deadline=None)
@given(values, st.integers(0, 5), st.sampled_from([None, "UTC", "America/New_York"]))
def test_every_value_in_range_is_spark_s_microseconds(
        vals: list[tuple[int, int] | None], cut: int, tz: str | None) -> None:
    arr = raw(vals)
    sliced = arr.slice(min(cut, len(vals)))
    got = int96_timestamps(pa.chunked_array([arr, sliced], pa.binary(12)),
                           pa.timestamp("us", tz=tz))
    assert got.type == pa.timestamp("us", tz=tz)
    assert got.cast(pa.int64()).to_pylist() == [spark(v) for v in vals + vals[cut:]]


@pytest.mark.parametrize("value", [
    (EPOCH + INT96_DAYS[0] - 1, DAY_NS - 1), (EPOCH + INT96_DAYS[1], 0), (EPOCH, -1),
    (EPOCH, DAY_NS), (2**31 - 1, 0), (-(2**31), 0), (EPOCH, 2**63 - 1)])
def test_a_value_out_of_range_is_refused_by_name(value: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match=f"Julian day {value[0]}, {value[1]} ns"):
        int96_timestamps(pa.chunked_array([raw([(EPOCH, 0), None, value])]), pa.timestamp("us"))


@pytest.mark.parametrize("nanos", [0, 7_070_976_164, DAY_NS - 1])
def test_julian_day_0_which_readers_read_differently_is_refused(nanos: int) -> None:
    """pyarrow reads any value of Julian day 0 as 1970-01-01 00:00:00 (its placeholder for
    null slots), Spark and DuckDB as 4714-11-24 BC plus the nanoseconds: no exact answer.
    In a null slot (where pyarrow's spaced read leaves zeros) it is no value at all."""
    arr = raw([(EPOCH, 0), None, (0, nanos)])
    with pytest.raises(ValueError, match=f"Julian day 0 \\({nanos} ns"):
        int96_timestamps(pa.chunked_array([arr]), pa.timestamp("us", tz="UTC"))
    got = int96_timestamps(pa.chunked_array([raw([(EPOCH, 5_000), None])]), pa.timestamp("us"))
    assert got.cast(pa.int64()).to_pylist() == [5, None]


def test_a_value_out_of_range_in_a_null_slot_is_ignored() -> None:
    arr = raw([(EPOCH, 0), (2**31 - 1, 0)])
    nulled = pa.Array.from_buffers(pa.binary(12), 2, [pa.array([True, False]).buffers()[1],
                                                       arr.buffers()[1]])
    got = int96_timestamps(pa.chunked_array([nulled]), pa.timestamp("us"))
    assert got.cast(pa.int64()).to_pylist() == [0, None]


def test_nested_values_are_decoded_and_other_12_byte_values_kept() -> None:
    inner = pa.StructArray.from_arrays([raw([(EPOCH + 1, 1_999), None]), raw([(1, 2), (3, 4)])],
                                       names=["t", "b"])
    lists = pa.ListArray.from_arrays(pa.array([0, 1, 2]), inner, mask=pa.array([False, False]))
    typ = pa.list_(pa.struct([("t", pa.timestamp("us")), ("b", pa.binary(12))]))
    got = int96_timestamps(pa.chunked_array([lists]), typ).to_pylist()
    assert [g[0]["b"] for g in got] == [struct.pack("<qi", 2, 1), struct.pack("<qi", 4, 3)]
    assert got[0][0]["t"] == dt.datetime(1970, 1, 2, 0, 0, 0, 1)
    assert got[1][0]["t"] is None


def test_sliced_lists_and_maps_with_nulls_are_rebuilt_exactly() -> None:
    one, two = (EPOCH + 1, 1_000), (EPOCH - 1, 0)
    day, before = dt.datetime(1970, 1, 2, 0, 0, 0, 1), dt.datetime(1969, 12, 31)
    offsets, mask = pa.array([0, 1, 1, 3]), pa.array([False, True, False])
    lists = pa.ListArray.from_arrays(offsets, raw([one, two, None]), mask=mask)
    maps = pa.MapArray.from_arrays(offsets, pa.array(["a", "b", "c"]), raw([one, two, None]),
                                   mask=mask)
    cases: list[tuple[Any, pa.DataType, list[Any]]] = [
        (lists, pa.list_(pa.timestamp("us")), [[day], None, [before, None]]),
        (maps, pa.map_(pa.string(), pa.timestamp("us")),
         [[("a", day)], None, [("b", before), ("c", None)]])]
    for arr, typ, want in cases:
        got = int96_timestamps(pa.chunked_array([arr.slice(1), arr]), typ)
        assert got.type == typ
        assert got.to_pylist() == want[1:] + want
