"""Arrow tables as polars frames, exactly, for the types polars cannot hold as Arrow has them.

polars names a time zone by the IANA database or a whole-hour offset; Arrow (and so Parquet
written by pyarrow) also allows any fixed offset such as ``-02:15``. polars refuses such a
column (and its Parquet reader panics on it). A timestamp with a time zone is an instant,
so the column is converted to UTC: the same instants, exactly, under a zone polars knows.
"""

from __future__ import annotations

import functools

import polars as pl
import pyarrow as pa

#: The zone a column whose time zone polars cannot parse is converted to.
FALLBACK_TIME_ZONE = "UTC"


@functools.cache
def polars_knows(time_zone: str) -> bool:
    """Whether polars accepts ``time_zone`` (tried once per zone, on an empty column)."""
    try:
        pl.from_arrow(pa.array([], pa.timestamp("us", tz=time_zone)))
    except pl.exceptions.PolarsError:
        return False
    return True


def foreign_time_zones(schema: pa.Schema) -> list[str]:
    """The top-level timestamp columns whose time zone polars cannot hold."""
    return [f.name for f in schema
            if pa.types.is_timestamp(f.type) and f.type.tz and not polars_knows(f.type.tz)]


def compatible(schema: pa.Schema) -> pa.Schema:
    """``schema`` with each column of :func:`foreign_time_zones` in UTC instead."""
    for name in foreign_time_zones(schema):
        i = schema.get_field_index(name)
        typ = schema.field(i).type
        schema = schema.set(i, schema.field(i).with_type(
            pa.timestamp(typ.unit, tz=FALLBACK_TIME_ZONE)))
    return schema


def to_polars(table: pa.Table) -> pl.DataFrame:
    """``table`` as a polars frame without copying its chunks, time zones made compatible."""
    target = compatible(table.schema)
    if target != table.schema:
        table = table.cast(target)
    frame = pl.from_arrow(table, rechunk=False)
    assert isinstance(frame, pl.DataFrame)
    return frame
