"""Arrow tables as polars frames, exactly, for the types polars cannot hold as Arrow has them.

polars names a time zone by the IANA database or a whole-hour offset; Arrow (and so Parquet
written by pyarrow) also allows any fixed offset such as ``-02:15``. polars refuses such a
column (and its Parquet reader panics on it). A timestamp with a time zone is an instant,
so the column is converted to UTC: the same instants, exactly, under a zone polars knows.

INT96 timestamps (Spark's, Impala's) are decoded here from their 12 bytes
(:func:`int96_timestamps`): neither polars (which clamps at nanoseconds) nor pyarrow (whose
microsecond coercion goes through nanoseconds and wraps) can be trusted far from 1970.
"""

from __future__ import annotations

import functools
from typing import Any, cast

import polars as pl
import pyarrow as pa

#: The zone a column whose time zone polars cannot parse is converted to.
FALLBACK_TIME_ZONE = "UTC"


@functools.cache
def polars_knows(time_zone: str) -> bool:
    """Whether polars accepts ``time_zone`` (tried once per zone, on an empty column)."""
    try:
        pl.from_arrow(pa.nulls(0, pa.timestamp("us", tz=time_zone)))
    except pl.exceptions.PolarsError:
        return False
    return True


def foreign_time_zones(schema: pa.Schema) -> list[str]:
    """The top-level timestamp columns whose time zone polars cannot hold."""
    return [f.name for f in schema
            if pa.types.is_timestamp(f.type) and f.type.tz and not polars_knows(f.type.tz)]


def plain(typ: pa.DataType) -> pa.DataType:
    """``typ`` with each dictionary type, at any depth, its value type: a dictionary is an
    encoding, not a type (polars would make a dictionary of strings a ``Categorical``,
    which string functions, ``LIKE`` and comparisons with text refuse)."""
    t: Any = typ
    if pa.types.is_dictionary(t):
        return plain(cast(pa.DataType, t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(plain(f.type)) for f in t])
    if pa.types.is_map(t):
        return cast(pa.DataType, cast(Any, pa.map_)(
            t.key_field.with_type(plain(t.key_type)),
            t.item_field.with_type(plain(t.item_type)), keys_sorted=t.keys_sorted))
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(plain(t.value_type)))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(plain(t.value_type)))
    if pa.types.is_fixed_size_list(t):
        return cast(pa.DataType, pa.list_(t.value_field.with_type(plain(t.value_type)),
                                          t.list_size))
    return typ


def empty_table(schema: pa.Schema) -> pa.Table:
    """No rows of ``schema``. ``pa.Schema.empty_table`` imports pandas when it is installed
    (pyarrow's pandas metadata): 0.3 to 0.4 CPU s, once per process, on the first job."""
    return pa.Table.from_batches([], schema=schema)


def compatible(schema: pa.Schema) -> pa.Schema:
    """``schema`` with each dictionary type its value type (:func:`plain`) and each column
    of :func:`foreign_time_zones` in UTC instead."""
    for i, field in enumerate(schema):
        typ = plain(field.type)
        if typ != field.type:
            schema = schema.set(i, field.with_type(typ))
    for name in foreign_time_zones(schema):
        i = schema.get_field_index(name)
        typ = schema.field(i).type
        schema = schema.set(i, schema.field(i).with_type(
            pa.timestamp(typ.unit, tz=FALLBACK_TIME_ZONE)))
    return schema


def to_polars(table: pa.Table) -> pl.DataFrame:
    """``table`` as a polars frame without copying its chunks, time zones made compatible
    and every column keeping its name (``''`` too)."""
    target = compatible(table.schema)
    if target != table.schema:
        table = table.cast(target)
    frame = pl.from_arrow(table, rechunk=False)
    assert isinstance(frame, pl.DataFrame)
    if frame.columns != table.column_names:  # polars names a column called '' column_0
        frame.columns = table.column_names
    return frame


#: The Julian day of 1970-01-01, INT96's epoch.
JULIAN_EPOCH_DAY = 2_440_588
_DAY_US = 86_400_000_000
_DAY_NS = 86_400_000_000_000
#: Days from 1970-01-01 to 1 January of the first year and of the year after the last an
#: INT96 value may have: -262142 to 262141, proleptic Gregorian. polars (chrono) shows
#: years -262143 to 262142; a year is kept each side, so a time zone never takes a value
#: out of what polars can show.
INT96_DAYS = (-96_464_927, 95_025_872)
INT96_YEARS = (-262_142, 262_141)


def int96_timestamps(column: pa.ChunkedArray[Any], typ: pa.DataType) -> pa.ChunkedArray[Any]:
    """A column read with its INT96 values as their 12 bytes (``fixed_size_binary(12)``:
    8 bytes of nanoseconds of the day, then 4 of the Julian day, little-endian), typed as
    ``typ`` says, the column's type with each INT96 a microsecond timestamp: each such
    value exactly as Spark reads it, ``(day - 2440588) * 86400 s`` plus the nanoseconds
    truncated to microseconds, also inside structs and lists. A ``ValueError`` names the
    first value outside :data:`INT96_YEARS`, whose nanoseconds are not a time of day, or
    of Julian day 0 (which pyarrow reads as 1970-01-01, whatever its nanoseconds, where
    Spark and DuckDB read 4714-11-24 BC: fastparquet writes its int64s there for some
    time zones)."""
    chunks = [_exact(c, typ) for c in column.chunks]
    return pa.chunked_array(chunks, type=cast(Any, chunks[0].type if chunks else typ))


def zoned(read: pa.DataType, stored: pa.DataType) -> pa.DataType:
    """``read`` (a type as Parquet's schema gives it, INT96 as a timestamp without a zone)
    with each timestamp that has no zone given the one ``stored`` (the Arrow schema its
    writer stored) has at the same place, in structs, lists and maps too: an INT96 value
    is an instant (UTC), and its writer's zone is how polars and Spark show it."""
    r: Any = read
    s: Any = stored
    if pa.types.is_timestamp(r) and pa.types.is_timestamp(s):
        return pa.timestamp(r.unit, tz=s.tz) if r.tz is None and s.tz else read
    if pa.types.is_struct(r) and pa.types.is_struct(s):
        return pa.struct([f if s.get_field_index(f.name) < 0 else f.with_type(
            zoned(f.type, s.field(s.get_field_index(f.name)).type)) for f in r])
    if pa.types.is_map(r) and pa.types.is_map(s):
        return cast(pa.DataType, cast(Any, pa.map_)(
            r.key_field.with_type(zoned(r.key_type, s.key_type)),
            r.item_field.with_type(zoned(r.item_type, s.item_type)), keys_sorted=r.keys_sorted))
    nested = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)
    if any(t(r) for t in nested) and any(t(s) for t in nested):
        item = r.value_field.with_type(zoned(r.value_type, s.value_type))
        if pa.types.is_large_list(r):
            return pa.large_list(item)
        return cast(pa.DataType, pa.list_(item, r.list_size) if pa.types.is_fixed_size_list(r)
                    else pa.list_(item))
    return read


def _exact(arr: pa.Array[Any], typ: pa.DataType) -> pa.Array[Any]:
    """``arr`` with each 12-byte value where ``typ`` has a timestamp decoded as INT96."""
    t: Any = arr.type
    want: Any = typ
    if t == pa.binary(12):
        return _int96_chunk(arr, typ) if pa.types.is_timestamp(typ) else arr
    if pa.types.is_nested(t) and arr.offset:
        arr = pa.concat_arrays([arr])  # unsliced: list offsets then start at 0
    mask = arr.is_null() if arr.null_count else None
    nested: Any = arr
    if pa.types.is_struct(t) and pa.types.is_struct(want):
        children = [c if want.get_field_index(f.name) < 0 else
                    _exact(c, want.field(want.get_field_index(f.name)).type)
                    for f, c in zip(t, nested.flatten(), strict=True)]
        return pa.StructArray.from_arrays(
            children, fields=[f.with_type(c.type) for f, c in zip(t, children, strict=True)],
            mask=mask)
    if pa.types.is_map(t) and pa.types.is_map(want):
        keys = _exact(nested.keys, want.key_type)
        items = _exact(nested.items, want.item_type)
        map_type = cast(Any, pa.map_)(t.key_field.with_type(keys.type),
                                      t.item_field.with_type(items.type))
        return cast("pa.Array[Any]", pa.MapArray.from_arrays(
            nested.offsets, keys, items, mask=mask, type=map_type))
    large = pa.types.is_large_list(t)
    if (large or pa.types.is_list(t)) and (
            pa.types.is_list(want) or pa.types.is_large_list(want)):
        values = _exact(nested.values, want.value_type)
        item = t.value_field.with_type(values.type)
        build: Any = pa.LargeListArray if large else pa.ListArray
        return cast("pa.Array[Any]", build.from_arrays(
            nested.offsets, values, type=pa.large_list(item) if large else pa.list_(item),
            mask=mask))
    return arr


def _int96_chunk(chunk: pa.Array[Any], typ: pa.DataType) -> pa.Array[Any]:
    n = len(chunk)
    data = chunk.buffers()[1]
    if n == 0 or data is None:
        return pa.nulls(n, pa.int64()).cast(typ)
    # The values as 3n little-endian 32-bit words: low and high nanoseconds, then the day.
    words = pa.Array.from_buffers(pa.uint32(), 3 * n,
                                  [None, data.slice(chunk.offset * 12, n * 12)])
    w = pl.Series(words)
    parts = pl.DataFrame({
        "valid": pl.Series(chunk.is_valid()),
        "nanos": w.gather_every(3, 0).cast(pl.Int64)
        + w.gather_every(3, 1).reinterpret(signed=True).cast(pl.Int64) * (1 << 32),
        "days": w.gather_every(3, 2).reinterpret(signed=True).cast(pl.Int64)
        - JULIAN_EPOCH_DAY})
    bad = parts.filter(pl.col("valid") & (
        (pl.col("days") < INT96_DAYS[0]) | (pl.col("days") >= INT96_DAYS[1])
        | (pl.col("nanos") < 0) | (pl.col("nanos") >= _DAY_NS)
        | (pl.col("days") == -JULIAN_EPOCH_DAY)))
    if bad.height:
        first = bad.row(0, named=True)
        if first["days"] == -JULIAN_EPOCH_DAY:
            raise ValueError(
                f"an INT96 value of Julian day 0 ({first['nanos']} ns into the day) has no "
                "instant its readers agree on: pyarrow reads 1970-01-01 00:00:00, Spark and "
                "DuckDB 4714-11-24 BC (a writer's placeholder, or bytes that are no INT96 "
                "timestamp): it cannot be read exactly")
        raise ValueError(
            f"an INT96 value (Julian day {first['days'] + JULIAN_EPOCH_DAY}, "
            f"{first['nanos']} ns into the day) is no instant of the years "
            f"{INT96_YEARS[0]} to {INT96_YEARS[1]}, the ones polars can show: it cannot be "
            "read exactly")
    micros = parts.select(pl.when(pl.col("valid")).then(
        pl.col("days") * _DAY_US + pl.col("nanos") // 1000)).to_series()
    return micros.to_arrow().cast(typ)
