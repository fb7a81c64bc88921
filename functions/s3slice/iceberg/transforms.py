"""Partition transforms (identity, bucket, truncate, year, month, day, hour, void) and the
projection of a query's predicate on source columns to one on partition values: whenever
the predicate is true for a row, its projection is true for the row's partition values,
so a partition whose values rule the projection out holds no matching row."""

from __future__ import annotations

import datetime as dt
import decimal
import struct
from typing import Any

import polars as pl

from s3slice.iceberg import types as T
from s3slice.iceberg.metadata import PartitionField, Schema
from s3slice.query import predicate as P

_C1, _C2, _M32 = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86 32-bit, as Iceberg's bucket transform hashes (signed result)."""
    h = seed
    n = len(data) // 4 * 4
    for i in range(0, n, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _C1) & _M32
        k = ((k << 15) | (k >> 17)) & _M32
        h ^= (k * _C2) & _M32
        h = ((h << 13) | (h >> 19)) & _M32
        h = (h * 5 + 0xE6546B64) & _M32
    tail, k = data[n:], 0
    for i in reversed(range(len(tail))):
        k = (k << 8) | tail[i]
    if tail:
        k = (k * _C1) & _M32
        k = ((k << 15) | (k >> 17)) & _M32
        h ^= (k * _C2) & _M32
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    return h - (1 << 32) if h >= 1 << 31 else h


def _micros(value: dt.datetime) -> int:
    return (value - T.EPOCH_TS) // dt.timedelta(microseconds=1)


def _hash_bytes(source: T.Type, value: Any) -> bytes | None:
    match value:
        case bool():
            return None
        case int() if source in ("int", "long"):
            return struct.pack("<q", value)
        case dt.datetime() if source == "timestamp" and value.tzinfo is None:
            return struct.pack("<q", _micros(value))
        case dt.date() if source == "date" and not isinstance(value, dt.datetime):
            return struct.pack("<q", (value - T.EPOCH).days)
        case str() if source == "string":
            return value.encode("utf-8")
        case bytes() if source == "binary":
            return value
    return None


def apply(transform: str, source: T.Type, value: Any) -> Any:
    """The partition value of a source value (None when this value is not projected: a
    type this module does not transform, or a transform it does not know)."""
    kind, _, arg = transform.partition("[")
    width = int(arg.rstrip("]")) if arg else 0
    if kind == "bucket":
        data = _hash_bytes(source, value)
        return None if data is None else (murmur3_32(data) & 0x7FFFFFFF) % width
    if kind == "truncate":
        match value:
            case bool():
                return None
            case int() if source in ("int", "long"):
                return value - value % width
            case str() if source == "string":
                return value[:width]
            case bytes() if source == "binary":
                return value[:width]
        return None
    if kind not in ("year", "month", "day", "hour"):
        return None
    if source == "date" and type(value) is dt.date:
        moment = dt.datetime(value.year, value.month, value.day)
    elif source == "timestamp" and type(value) is dt.datetime and value.tzinfo is None:
        moment = value
    else:
        return None
    if kind == "year":
        return moment.year - 1970
    if kind == "month":
        return (moment.year - 1970) * 12 + moment.month - 1
    if kind == "day":
        return (moment.date() - T.EPOCH).days
    return _micros(moment) // 3_600_000_000


def result_type(transform: str, source: T.Type) -> T.Type:
    """The type of a partition value: the source's for identity and truncate, else int
    (a day is kept as days since the epoch, as in the manifests' bounds)."""
    kind = transform.partition("[")[0]
    return source if kind in ("identity", "truncate") else "int"


def partition_dtype(transform: str, source: T.Type) -> pl.DataType:
    return T.polars_type(result_type(transform, source))


def key(field: PartitionField) -> str:
    """The name partition values are judged under (never a column's name)."""
    return f"\x00partition:{field.field_id}"


_NEGATE: dict[str, P.CmpOp] = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=",
                               ">=": "<"}


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
            if not values:
                return P.TRUE
            return _nnf(P.Or(tuple(P.Cmp(c, "=", v, s) for v, s in zip(values, texts,
                                                                        strict=True))), negate)
        case P.Cmp(column=c, op=op, value=v, sql=s) if negate:
            return P.Cmp(c, _NEGATE[op], v, s)
        case P.IsNull() if negate:
            return P.Not(pred)
    return pred


def project(pred: P.Pred, schema: Schema, fields: tuple[PartitionField, ...]) -> P.Pred:
    """``pred`` on columns projected to a predicate on these partition fields' values."""
    names = {f.name: f for f in schema.fields}
    types = schema.types_by_id()

    def leaf(column: str, one: Any) -> P.Pred:
        field = names.get(column)
        if field is None:
            return P.TRUE
        parts = [one(pf, types[pf.source_id]) for pf in fields if pf.source_id == field.id
                 and pf.source_id in types]
        parts = [p for p in parts if p is not P.TRUE]
        return P.TRUE if not parts else parts[0] if len(parts) == 1 else P.And(tuple(parts))

    def cmp(c: P.Cmp) -> P.Pred:
        def one(pf: PartitionField, source: T.Type) -> P.Pred:
            if pf.transform == "identity":
                return P.Cmp(key(pf), c.op, c.value, c.sql)
            # The constant's value (as the analyzer read it) is transformed only when its
            # Python type is the column's own (:func:`apply`): no cast of the column.
            if c.op == "!=" or isinstance(c.value, float | decimal.Decimal):
                return P.TRUE
            if pf.transform.startswith("bucket") and c.op != "=":
                return P.TRUE
            value = apply(pf.transform, source, c.value)
            if value is None:
                return P.TRUE
            op: P.CmpOp = {"<": "<=", ">": ">="}.get(c.op, c.op)  # type: ignore[assignment]
            return P.Cmp(key(pf), op, value)
        return leaf(c.column, one)

    def walk(p: P.Pred) -> P.Pred:
        match p:
            case P.Cmp():
                return cmp(p)
            case P.IsNull(column=c):
                return leaf(c, lambda pf, _: P.TRUE if pf.transform == "void"
                            else P.IsNull(key(pf)))
            case P.Not(item=P.IsNull(column=c)):
                return leaf(c, lambda pf, _: P.TRUE if pf.transform == "void"
                            else P.Not(P.IsNull(key(pf))))
            case P.And(items=items):
                return P.And(tuple(walk(i) for i in items))
            case P.Or(items=items):
                return P.Or(tuple(walk(i) for i in items))
        return P.TRUE
    return walk(_nnf(pred))
