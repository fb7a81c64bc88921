"""Row-group pruning by Parquet Bloom filters, for equality and IN on unsorted columns.

Statistics cannot rule out a value that lies between a row group's min and max; a Bloom
filter can. Parquet's are split-block Bloom filters over the xxHash64 of each value's plain
encoding (apache/parquet-format ``BloomFilter.md``): a 32-byte block is picked by the upper
half of the hash, and eight bits, one per 32-bit word, by the lower half times eight salts.
A value whose bits are not all set is certainly absent; the row group is then pruned for
``col = value`` (and for ``IN``, when every listed value is absent).

pyarrow gives each filter's offset and length but does not read it; the header is a Thrift
``BloomFilterHeader`` (read with :func:`._thrift.read_struct`). Only the layout the format
defines (block algorithm, xxHash, uncompressed) is used; anything else keeps the group.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import struct
from collections.abc import Callable, Iterable
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import xxhash

from s3slice.core.errors import ObjectFormatError
from s3slice.core.ranges import Range
from s3slice.parquet import plan as _plan
from s3slice.parquet import thrift as _thrift
from s3slice.parquet.footer import MAGIC, Footer
from s3slice.query.pruning import bounds as B
from s3slice.query.pruning import predicate as P

#: The filters are read only when they come to at most this share of the needed bytes.
MAX_SHARE = 0.25
SALT = (0x47B6137B, 0x44974D91, 0x8824AD5B, 0xA2B7289D,
        0x705495C7, 0x2DF1424B, 0x9EFC4947, 0x5C6BFB31)
_EPOCH = dt.date(1970, 1, 1)


@dataclasses.dataclass(frozen=True)
class BloomFilter:
    bitset: bytes  # whole 32-byte blocks

    def might_contain(self, encoded: bytes) -> bool:
        h = xxhash.xxh64_intdigest(encoded)
        blocks = len(self.bitset) // 32
        block = ((h >> 32) * blocks) >> 32
        key = h & 0xFFFFFFFF
        words = struct.unpack_from("<8I", self.bitset, block * 32)
        return all(words[i] >> (((key * SALT[i]) & 0xFFFFFFFF) >> 27) & 1 for i in range(8))


def parse(data: bytes, *, uri: str) -> BloomFilter | None:
    """A filter from its header and bitset (the ``bloom_filter_length`` bytes), or None
    when it uses a layout this reader does not know."""
    header = _thrift.read_struct("BloomFilterHeader", data, uri)
    size = header.numBytes
    if not isinstance(size, int) or size <= 0 or size % 32 or size > len(data):
        raise ObjectFormatError(f"corrupt Parquet Bloom filter: {size} bytes in a "
                                f"{len(data)}-byte filter", uri=uri)
    if (getattr(header.algorithm, "BLOCK", None) is None
            or getattr(header.hash, "XXHASH", None) is None
            or getattr(header.compression, "UNCOMPRESSED", None) is None):
        return None
    return BloomFilter(bytes(data[len(data) - size:]))


def encoder(col: pq.ColumnSchema, dtype: pl.DataType | None
            ) -> Callable[[P.Cmp], bytes | None] | None:
    """The plain encoding of the one stored value that can equal a comparison's constant,
    or None when there is no such single value (or the column's type is not hashed here).

    Integers (INT32/INT64, signed or not), dates, and strings. polars compares in the
    column's own type after casts of its own (an integer column with a float becomes a
    float, and 2**53 + 1 then equals 2**53): a constant is hashed only when polars itself
    finds it equal to that one value and unequal to its neighbours. Floats and timestamps
    are left to the statistics.
    """
    physical, logical = col.physical_type, col.logical_type.type
    if dtype is None:
        return None
    if physical in ("INT32", "INT64") and logical in ("NONE", "INT") and dtype.is_integer():
        fmt = _thrift.PLAIN[physical][0]
        fmt = fmt.upper() if _thrift.is_unsigned(col) else fmt

        def integer(c: P.Cmp) -> bytes | None:
            v = c.value
            if isinstance(v, decimal.Decimal) and v.is_finite() and v == v.to_integral_value():
                v = int(v)
            if isinstance(v, bool) or not isinstance(v, int):
                return None
            try:
                encoded = struct.pack(fmt, v)
            except struct.error:
                return None
            return encoded if _only(c, dtype, v, [v - 1, v + 1]) else None
        return integer
    if physical == "INT32" and logical == "DATE" and dtype == pl.Date:
        def date(c: P.Cmp) -> bytes | None:
            v = c.value
            if isinstance(v, str):
                try:
                    v = dt.date.fromisoformat(v)
                except ValueError:
                    return None
            if isinstance(v, dt.datetime) or not isinstance(v, dt.date):
                return None
            day = dt.timedelta(days=1)
            try:
                near = [v - day, v + day]
            except OverflowError:
                return None
            return struct.pack("<i", (v - _EPOCH).days) if _only(c, dtype, v, near) else None
        return date
    if physical == "BYTE_ARRAY" and _thrift.is_text(col) and dtype == pl.String:
        def text(c: P.Cmp) -> bytes | None:
            v = c.value
            if not isinstance(v, str) or c.text != P.literal_sql(v):
                return None  # a string constant, compared as strings: equal means equal
            return v.encode() if _only(c, dtype, v, []) else None
        return text
    return None


def _only(c: P.Cmp, dtype: pl.DataType, v: Any, near: list[Any]) -> bool:
    """:func:`~s3slice.query.pruning.bounds.only_equal` with the neighbours ``dtype`` holds."""
    try:
        B.values_series(near, dtype)
    except Exception:  # noqa: BLE001 - a neighbour outside the type: none there
        near = []
    return B.only_equal(c.text, dtype, v, near)


def _encoders(footer: Footer, names: Iterable[str]
              ) -> dict[str, Callable[[P.Cmp], bytes | None]]:
    """The constant encoder of each of ``names`` whose type a filter can answer."""
    md = footer.metadata
    types = _plan.stats_types(footer)
    positions = _thrift.column_positions(md)
    out = {}
    for name in names:
        encode = (encoder(md.schema.column(positions[name]), types.get(name))
                  if name in positions else None)
        if encode is not None:
            out[name] = encode
    return out


def locate(footer: Footer, plan: _plan.Plan, predicate: P.Pred, *,
           uri: str) -> dict[tuple[int, str], Range]:
    """The Bloom filters of the kept row groups for columns compared by ``=`` or IN, of the
    types whose literals can be hashed (the others' filters would be fetched for nothing)."""
    md = footer.metadata
    wanted = _encoders(footer, P.equality_columns(predicate))
    out: dict[tuple[int, str], Range] = {}
    if not wanted:
        return out
    for g in plan.row_groups:
        rg = md.row_group(g)
        for i in range(rg.num_columns):
            col = rg.column(i)
            name = col.path_in_schema
            # (newer than the pyarrow stubs)
            offset = getattr(col, "bloom_filter_offset", None)
            length = getattr(col, "bloom_filter_length", None)
            if name not in wanted or not offset or not length:
                continue
            if offset < len(MAGIC) or length < 0 or offset + length > footer.data_end:
                raise ObjectFormatError(f"corrupt Parquet metadata: the Bloom filter of column "
                                        f"{name!r} of row group {g} lies outside the data",
                                        uri=uri)
            out[(g, name)] = (offset, offset + length)
    return out


def prune(footer: Footer, plan: _plan.Plan, predicate: P.Pred,
          where: dict[tuple[int, str], Range], read: Callable[[Range], bytes], *,
          uri: str) -> list[int]:
    """The kept row groups that the Bloom filters do not rule out."""
    md = footer.metadata
    columns = P.columns_of(predicate)
    types = _plan.stats_types(footer)
    encoders = {name: _cached(encode)
                for name, encode in _encoders(footer, {name for _, name in where}).items()}
    units: list[dict[str, P.ColumnStats]] = []
    for g in plan.row_groups:
        stats = _plan.row_group_stats(md, g, columns, types)
        for name, encode in encoders.items():
            r = where.get((g, name))
            if r is None or name not in stats:
                continue
            bloom = parse(read(r), uri=uri)
            if bloom is None:
                continue
            stats[name] = dataclasses.replace(stats[name], excludes=_absent(bloom, encode))
        units.append(stats)
    matches = P.may_match_each(predicate, units)
    return [g for g, ok in zip(plan.row_groups, matches, strict=True) if ok]


def _cached(encode: Callable[[P.Cmp], bytes | None]) -> Callable[[P.Cmp], bytes | None]:
    """``encode``, once per constant (polars checks each; every row group asks again)."""
    done: dict[str | None, bytes | None] = {}

    def cached(c: P.Cmp) -> bytes | None:
        key = c.text
        if key not in done:
            done[key] = encode(c)
        return done[key]
    return cached


def _absent(bloom: BloomFilter, encode: Callable[[P.Cmp], bytes | None]
            ) -> Callable[[P.Cmp], bool]:
    def absent(c: P.Cmp) -> bool:
        encoded = encode(c)
        return encoded is not None and not bloom.might_contain(encoded)
    return absent
