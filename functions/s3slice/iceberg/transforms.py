"""Partition transforms (identity, bucket, truncate, year, month, day, hour, void) and the
projection of a query's predicate on source columns to one on partition values: whenever
the predicate is true for a row, its projection is true for the row's partition values,
so a partition whose values rule the projection out holds no matching row.

A monotone transform's value (identity; truncate of integers and decimals; year, month,
day and hour of dates and timestamps) is judged as the closed range of source values it
stands for (:func:`span`), against the query's own comparison, by polars in the column's
type, exactly as the filter compares rows (a ``timestamptz`` column with a naive text as
UTC, with an offset as that instant). A bucket (``=`` and IN only) and a truncated string
or binary are judged by the transformed constant (:func:`apply`); a bucket's constant
only when polars finds it equal to that one value of the column and not to its
neighbours, so no cast polars makes can ask for another row.
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct
import uuid
from typing import Any

import polars as pl

from s3slice.iceberg import types as T
from s3slice.iceberg.metadata import PartitionField, Schema
from s3slice.query.pruning import bounds as B
from s3slice.query.pruning import predicate as P

_C1, _C2, _M32 = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF
DAY_US, HOUR_US = 86_400_000_000, 3_600_000_000
_INT_RANGE = {"int": (-(1 << 31), (1 << 31) - 1), "long": (-(1 << 63), (1 << 63) - 1)}
_TIMES = ("year", "month", "day", "hour")
_EXACT = decimal.Context(prec=100_000, Emin=-999_999, Emax=999_999)


def _mixed(k: int) -> int:
    k = (k * _C1) & _M32
    return (((k << 15) | (k >> 17)) & _M32) * _C2 & _M32


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86 32-bit, as Iceberg's bucket transform hashes (signed result)."""
    h = seed
    n = len(data) // 4 * 4
    for i in range(0, n, 4):
        h ^= _mixed(int.from_bytes(data[i:i + 4], "little"))
        h = ((h << 13) | (h >> 19)) & _M32
        h = (h * 5 + 0xE6546B64) & _M32
    if data[n:]:
        h ^= _mixed(int.from_bytes(data[n:], "little"))
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    return h - (1 << 32) if h >= 1 << 31 else h


def unscaled(value: Any, scale: int) -> int | None:
    """The unscaled integer of a decimal (or integer) at ``scale``, exactly; None when
    the value has more fraction digits than the scale holds (or is no finite number)."""
    if isinstance(value, bool) or not isinstance(value, int | decimal.Decimal) or (
            isinstance(value, decimal.Decimal) and not value.is_finite()):
        return None
    shifted = decimal.Decimal(value).scaleb(scale, _EXACT)
    return int(shifted) if shifted == shifted.to_integral_value() else None


def _decimal(u: int, scale: int) -> decimal.Decimal:
    return decimal.Decimal(f"{u}E-{scale}")  # exact, whatever the context's precision


def micros(value: dt.datetime) -> int:
    """A timestamp's microseconds since the epoch (a zoned one's instant, in UTC)."""
    if value.tzinfo is not None:
        return (value - T.EPOCH_TS.replace(tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    return (value - T.EPOCH_TS) // dt.timedelta(microseconds=1)


def _physical(source: T.Type, value: Any) -> int | None:
    """A date's days, a timestamp's microseconds (a ``timestamptz`` only when zoned: an
    instant), a time's microseconds since midnight; else None."""
    match value:
        case dt.datetime() if source == "timestamp" and value.tzinfo is None:
            return micros(value)
        case dt.datetime() if source == "timestamptz" and value.tzinfo is not None:
            return micros(value)
        case dt.date() if source == "date" and not isinstance(value, dt.datetime):
            return (value - T.EPOCH).days
        case dt.time() if source == "time" and value.tzinfo is None:
            return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + (
                value.microsecond)
    return None


def _hash_bytes(source: T.Type, value: Any) -> bytes | None:
    """The bytes the spec hashes: integers, dates, times and timestamps as 8-byte little
    endian longs (days, microseconds), a decimal's unscaled value as its minimal
    two's-complement big-endian bytes, a uuid's 16 bytes, strings as UTF-8."""
    if not isinstance(source, str) or isinstance(value, bool):
        return None
    if source in ("int", "long") and isinstance(value, int):
        return struct.pack("<q", value) if -(1 << 63) <= value < 1 << 63 else None
    if source in ("date", "time", "timestamp", "timestamptz"):
        n = _physical(source, value)
        return None if n is None else struct.pack("<q", n)
    if (d := T.decimal_of(source)) is not None:
        u = unscaled(value, d[1])  # minimal: one sign bit
        return None if u is None else u.to_bytes(
            ((~u if u < 0 else u).bit_length() + 8) // 8, "big", signed=True)
    if source == "string" and isinstance(value, str):
        return value.encode()
    if source == "uuid":
        data = value.bytes if isinstance(value, uuid.UUID) else value
        return data if isinstance(data, bytes) and len(data) == 16 else None
    if (source == "binary" or source.startswith("fixed")) and isinstance(value, bytes):
        return value
    return None


def _times(kind: str, source: T.Type, value: Any) -> int | None:
    n = _physical(source, value)
    if n is None or source == "time" or (kind == "hour" and source == "date"):
        return None
    if kind == "hour":
        return n // HOUR_US
    days = n if source == "date" else n // DAY_US
    if kind == "day":
        return days
    civil = T.EPOCH + dt.timedelta(days=days)
    return civil.year - 1970 if kind == "year" else (civil.year - 1970) * 12 + civil.month - 1


def width(transform: str) -> int:
    """A bucket's or truncate's parameter (0 when it has none or a malformed one)."""
    arg = transform.partition("[")[2]
    return int(arg[:-1]) if arg.endswith("]") and arg[:-1].isdigit() else 0


def apply(transform: str, source: T.Type, value: Any) -> Any:
    """The partition value of a source value (None when this value is not projected: a
    type this module does not transform, or a transform it does not know). Values are
    natural: dates, datetimes (a ``timestamptz`` one zoned), times, decimals, uuids."""
    kind, n = transform.partition("[")[0], width(transform)
    try:
        if kind == "bucket":
            data = _hash_bytes(source, value)
            return None if data is None or n <= 0 else (murmur3_32(data) & 0x7FFFFFFF) % n
        if kind == "truncate":
            return _truncate(source, n, value)
        return _times(kind, source, value) if kind in _TIMES else None
    except (ArithmeticError, ValueError):
        return None


def _truncate(source: T.Type, n: int, value: Any) -> Any:
    if isinstance(value, bool) or n <= 0:
        return None
    if source in ("int", "long") and isinstance(value, int):
        return value - value % n  # floor: -1 → -n
    if (d := T.decimal_of(source)) is not None:
        u = unscaled(value, d[1])
        return None if u is None else _decimal(u - u % n, d[1])
    if source == "string" and isinstance(value, str):
        return value[:n]  # code points
    if source == "binary" and isinstance(value, bytes):
        return value[:n]
    return None


def _month_days(months: int) -> int:
    """Days from the epoch to the first of the month ``months`` after January 1970
    (proleptic Gregorian, any year)."""
    y, m = 1970 + months // 12 - (months % 12 < 2), months % 12 + 1
    era, yoe = y // 400, y % 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def is_range(transform: str, source: T.Type) -> bool:
    """Whether a partition value of this transform is judged as the source values it
    stands for (a closed range: :func:`span`)."""
    kind = transform.partition("[")[0]
    if kind == "truncate":
        return source in ("int", "long") or T.decimal_of(source) is not None
    if kind in _TIMES:
        return source in ("timestamp", "timestamptz") or (source == "date" and kind != "hour")
    return kind == "identity"


def span(transform: str, source: T.Type, value: Any) -> tuple[Any, Any] | None:
    """The least and greatest source values of a partition value of a monotone transform
    (timestamps as microseconds, the physical value of their polars type: any year),
    clamped to the source's type; None when there is no such range (or a date's is past
    Python's years: polars would compare a ``date`` constant with days as Python does)."""
    kind, n = transform.partition("[")[0], width(transform)
    if value is None or isinstance(value, bool):
        return None
    if kind == "identity":
        if source == "timestamptz" and isinstance(value, dt.datetime) and not value.tzinfo:
            value = value.replace(tzinfo=dt.UTC)
        v = _physical(source, value) if source in ("timestamp", "timestamptz") else value
        return None if v is None else (v, v)
    if kind == "truncate" and isinstance(value, int) and source in _INT_RANGE:
        return value, min(value + n - 1, _INT_RANGE[source][1])
    if kind == "truncate" and (d := T.decimal_of(source)) is not None:
        u = unscaled(value, d[1])
        return None if u is None else (_decimal(u, d[1]), _decimal(min(
            u + n - 1, 10 ** d[0] - 1), d[1]))
    if kind not in _TIMES or not isinstance(value, int):
        return None
    if kind == "hour":
        return max(value * HOUR_US, -(1 << 63)), min((value + 1) * HOUR_US - 1, (1 << 63) - 1)
    months, step = (value * 12, 12) if kind == "year" else (value, 1)
    first, after = (value, value + 1) if kind == "day" else (
        _month_days(months), _month_days(months + step))
    if source == "date":
        try:
            return T.EPOCH + dt.timedelta(days=first), T.EPOCH + dt.timedelta(days=after - 1)
        except OverflowError:
            return None
    return max(first * DAY_US, -(1 << 63)), min(after * DAY_US - 1, (1 << 63) - 1)


def result_type(transform: str, source: T.Type) -> T.Type:
    """The type of a partition value: the source's for identity and truncate, else int
    (a day is kept as days since the epoch, as in the manifests' bounds)."""
    kind = transform.partition("[")[0]
    return source if kind in ("identity", "truncate") else "int"


def dtype(transform: str, source: T.Type) -> pl.DataType | None:
    """The polars type a partition field is judged in: the source's for a range, the
    partition value's otherwise (None: not judged)."""
    kind = transform.partition("[")[0]
    if kind in ("bucket", "truncate") and width(transform) <= 0:
        return None  # a malformed transform: never judged
    try:
        if is_range(transform, source) or (kind == "truncate" and source in ("string",
                                                                              "binary")):
            return T.polars_type(source)
    except T.UnsupportedType:
        return None
    return pl.Int32() if kind == "bucket" else None


def key(field: PartitionField) -> str:
    """The name partition values are judged under (never a column's name)."""
    return f"\x00partition:{field.field_id}"


_NEGATE: dict[str, P.CmpOp] = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


def _nnf(pred: P.Pred, negate: bool = False) -> P.Pred:
    """``pred`` (negated) with NOT pushed down to comparisons and IS NULL."""
    match pred:
        case P.Not(item=item):
            return _nnf(item, not negate)
        case P.And(items=items) | P.Or(items=items):
            parts = tuple(_nnf(p, negate) for p in items)
            conj = isinstance(pred, P.And) != negate
            return P.And(parts) if conj else P.Or(parts)
        case P.Between(column=c, low=lo, high=hi, sqls=(a, b)):
            return _nnf(P.And((P.Cmp(c, ">=", lo, a), P.Cmp(c, "<=", hi, b))), negate)
        case P.In(column=c, values=values, sqls=sqls):
            texts = sqls if sqls is not None else (None,) * len(values)
            return _nnf(P.Or(tuple(P.Cmp(c, "=", v, s) for v, s in zip(
                values, texts, strict=True))), negate) if values else P.TRUE
        case P.Cmp(column=c, op=op, value=v, sql=s) if negate:
            return P.Cmp(c, _NEGATE[op], v, s)
        case P.IsNull() if negate:
            return P.Not(pred)
    return pred


def _parsed(source: T.Type, value: Any) -> Any:
    """A constant as a natural value of the source's type, when it reads as one (polars
    then confirms that it is the one value the column compares equal to)."""
    if isinstance(value, bool):
        return None
    try:
        if source in ("int", "long"):
            if isinstance(value, decimal.Decimal) and value.is_finite() and (
                    value == value.to_integral_value()):
                return int(value)
            return value if isinstance(value, int) else None
        if source in ("date", "time", "timestamp", "timestamptz") and isinstance(value, str):
            parse = {"date": dt.date.fromisoformat, "time": dt.time.fromisoformat}.get(
                source, dt.datetime.fromisoformat)
            value = parse(value.strip())
        if source == "timestamptz" and isinstance(value, dt.datetime) and value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)  # a naive text is UTC to polars
        if isinstance(source, str) and (d := T.decimal_of(source)) is not None:
            value = decimal.Decimal(value) if isinstance(value, str | int) else value
            u = unscaled(value, d[1])
            return None if u is None or abs(u) >= 10 ** d[0] else _decimal(u, d[1])
        if source in ("binary", "uuid") or (isinstance(source, str)
                                            and source.startswith("fixed")):
            return value.encode() if isinstance(value, str) else None
    except (ValueError, TypeError, ArithmeticError):
        return None
    return value


def _neighbours(source: T.Type, value: Any) -> tuple[Any, list[Any]]:
    """The value as polars is given it, and the values of the type next to it."""
    n = _physical(source, value)
    if n is not None:  # (a time's physical value is in nanoseconds)
        return (n * 1000, [n * 1000 - 1000, n * 1000 + 1000]) if source == "time" else (
            n, [n - 1, n + 1])
    if isinstance(value, int):
        return value, [value - 1, value + 1]
    if isinstance(value, decimal.Decimal) and isinstance(source, str) and (
            d := T.decimal_of(source)) is not None:
        u = unscaled(value, d[1]) or 0
        return value, [_decimal(u + s, d[1]) for s in (-1, 1) if abs(u + s) < 10 ** d[0]]
    return value, []  # strings and bytes: polars compares them exactly


def _bucket(c: P.Cmp, transform: str, source: T.Type, dtype: pl.DataType) -> int | None:
    """The bucket of the one value of the column that equals the constant, if one."""
    if source == "string" and (not isinstance(c.value, str)
                               or c.text != B.literal_sql(c.value)):
        return None
    value = _parsed(source, c.value)
    bucket = None if value is None else apply(transform, source, value)
    if bucket is None:
        return None
    candidate, near = _neighbours(source, value)
    try:
        near = near if near and len(B.values_series(near, dtype)) else []
    except Exception:  # noqa: BLE001 - a neighbour outside the type: none there
        near = []
    return bucket if B.only_equal(c.text, dtype, candidate, near) else None


def _forward(c: P.Cmp, pf: PartitionField, source: T.Type) -> P.Pred:
    """A comparison on a bucket or a truncated string or binary."""
    kind, n = pf.transform.partition("[")[0], width(pf.transform)
    if kind == "bucket":
        dtype = T.polars_type(source)
        b = None if c.op != "=" else _bucket(c, pf.transform, source, dtype)
        return P.TRUE if b is None else P.Cmp(key(pf), "=", b)
    value = c.value
    if c.op == "!=" or not isinstance(value, str) or c.text != B.literal_sql(value):
        return P.TRUE  # a plain string constant, compared as strings (or as UTF-8 bytes)
    if source == "binary":
        try:
            value = value.encode()[:n].decode()
        except UnicodeError:
            return P.TRUE  # cut within a character: no text for it
    else:
        value = value[:n]
    op: P.CmpOp = {"<": "<=", ">": ">="}.get(c.op, c.op)  # type: ignore[assignment]
    return P.Cmp(key(pf), op, value)


def project(pred: P.Pred, schema: Schema, fields: tuple[PartitionField, ...]) -> P.Pred:
    """``pred`` on columns projected to a predicate on these partition fields' values."""
    names = {f.name: f for f in schema.fields}
    types = schema.types_by_id()

    def leaf(column: str, one: Any) -> P.Pred:
        field = names.get(column)
        if field is None:
            return P.TRUE
        parts = [one(pf, types[pf.source_id]) for pf in fields if pf.source_id == field.id
                 and pf.source_id in types
                 and dtype(pf.transform, types[pf.source_id]) is not None]
        parts = [p for p in parts if p is not P.TRUE]
        return P.TRUE if not parts else parts[0] if len(parts) == 1 else P.And(tuple(parts))

    def cmp(c: P.Cmp) -> P.Pred:
        def one(pf: PartitionField, source: T.Type) -> P.Pred:
            if is_range(pf.transform, source):  # the comparison itself, on the range
                return P.Cmp(key(pf), c.op, c.value, c.sql)
            return _forward(c, pf, source)
        return leaf(c.column, one)

    def walk(p: P.Pred) -> P.Pred:
        match p:
            case P.Cmp():
                return cmp(p)
            case P.IsNull(column=c):
                return leaf(c, lambda pf, _: P.IsNull(key(pf)))
            case P.Not(item=P.IsNull(column=c)):
                return leaf(c, lambda pf, _: P.Not(P.IsNull(key(pf))))
            case P.And(items=items):
                return P.And(tuple(walk(i) for i in items))
            case P.Or(items=items):
                return P.Or(tuple(walk(i) for i in items))
        return P.TRUE
    return walk(_nnf(pred))
