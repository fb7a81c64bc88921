"""Random Arrow tables: every Parquet-relevant type (integers of each width at their edges,
floats with NaN, infinities and -0.0, decimals up to 38 digits, dates, timestamps in every
unit and several time zones, strings, binary, dictionaries, lists and structs), nulls at
every density, from empty to a few thousand rows."""

from __future__ import annotations

import datetime as dt
import decimal
import random
from collections.abc import Callable
from typing import Any

import pyarrow as pa

ZONES = [None, "UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]
UNITS = ["s", "ms", "us", "ns"]
DENSITIES = [0.0, 0.0, 0.02, 0.3, 0.7, 0.98, 1.0]
WORDS = ["", "a", "A", "ab", "abc", "b", "Zed", "zz", "a%b", "a_b", " pad ", "é", "ünï",
         "日本", "x" * 40, "north", "south", "NORTH", "n'th"]


def _ints(bits: int, signed: bool) -> Callable[[random.Random], int]:
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    edges = [lo, lo + 1, hi - 1, hi, 0, 1, 2, 5, 10, 100] + ([-1, -2] if signed else [])

    def draw(rng: random.Random) -> int:
        r = rng.random()
        if r < 0.25:
            return rng.choice(edges)
        if r < 0.6:
            return max(lo, min(hi, rng.randint(-20, 20)))
        return rng.randint(lo, hi)
    return draw


def _float(rng: random.Random) -> float:
    r = rng.random()
    if r < 0.08:
        return rng.choice([float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1e308,
                           -1e-308, 5e-324])
    if r < 0.5:
        return float(rng.randint(-20, 20)) / rng.choice([1, 2, 4, 3])
    return rng.uniform(-1e6, 1e6)


def _decimal(precision: int, scale: int) -> Callable[[random.Random], decimal.Decimal]:
    top = 10 ** precision - 1

    def draw(rng: random.Random) -> decimal.Decimal:
        r = rng.random()
        raw = rng.choice([top, -top, 0, 1, -1]) if r < 0.2 else (
            rng.randint(-2000, 2000) if r < 0.7 else rng.randint(-top, top))
        raw = max(-top, min(top, raw))
        sign, digits = int(raw < 0), tuple(int(d) for d in str(abs(raw)))
        return decimal.Decimal((sign, digits, -scale))
    return draw


_EPOCH = dt.datetime(1970, 1, 1)


def _timestamp(rng: random.Random) -> dt.datetime:
    r = rng.random()
    if r < 0.1:
        return rng.choice([dt.datetime(1677, 9, 22), dt.datetime(2262, 4, 11), _EPOCH,
                           dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
                           dt.datetime(2024, 3, 31, 1, 30), dt.datetime(2024, 10, 27, 2, 30)])
    base = dt.datetime(2024, 1, 1) if r < 0.7 else dt.datetime(1900, 1, 1)
    span = 86400 * 30 if r < 0.7 else 86400 * 365 * 300
    return base + dt.timedelta(seconds=rng.randint(0, span), microseconds=rng.randint(0, 999999))


def _date(rng: random.Random) -> dt.date:
    if rng.random() < 0.1:
        return rng.choice([dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1970, 1, 1)])
    return dt.date(2024, 1, 1) + dt.timedelta(days=rng.randint(-400, 400))


#: Each kind: its Arrow type (from the rng) and a value drawer for it.
Kind = tuple[pa.DataType, Callable[[random.Random], Any]]


def _kind(rng: random.Random, nested: bool, dicts: bool = True) -> Kind:
    name = rng.choice(["int", "int", "uint", "float", "bool", "string", "string", "binary",
                       "date", "timestamp", "timestamp", "decimal"]
                      + (["dict"] if dicts else []) + (["list", "struct"] if nested else []))
    if name in ("int", "uint"):
        bits = rng.choice([8, 16, 32, 64])
        signed = name == "int"
        t = getattr(pa, f"{name}{bits}")()
        return t, _ints(bits, signed)
    if name == "float":
        return rng.choice([pa.float32(), pa.float64()]), _float
    if name == "bool":
        return pa.bool_(), lambda r: r.random() < 0.5
    if name == "string":
        vocab = rng.sample(WORDS, rng.randint(2, len(WORDS)))
        return rng.choice([pa.string(), pa.large_string()]), lambda r: r.choice(vocab)
    if name == "dict":
        vocab = rng.sample(WORDS, rng.randint(1, 6))
        return pa.dictionary(pa.int32(), pa.string()), lambda r: r.choice(vocab)
    if name == "binary":
        return pa.binary(), lambda r: r.choice(WORDS).encode() + bytes([r.randint(0, 255)])
    if name == "date":
        return pa.date32(), _date
    if name == "timestamp":
        unit = rng.choice(UNITS)
        if unit == "ns":
            return pa.timestamp(unit, tz=rng.choice(ZONES)), _timestamp
        return pa.timestamp(unit, tz=rng.choice(ZONES)), lambda r: (
            r.choice([dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59)])
            if r.random() < 0.03 else _timestamp(r))
    if name == "decimal":
        precision = rng.choice([1, 5, 9, 12, 18, 19, 28, 38])
        scale = rng.randint(0, min(precision, 6))
        return pa.decimal128(precision, scale), _decimal(precision, scale)
    if name == "list":
        inner, draw = _kind(rng, False)
        return pa.list_(inner), lambda r: [draw(r) for _ in range(r.randint(0, 3))]
    a, da = _kind(rng, False)
    b, db = _kind(rng, False)
    return pa.struct([("a", a), ("b", b)]), lambda r: {"a": da(r), "b": db(r)}


def random_table(rng: random.Random, *, nested: bool = True, max_rows: int = 3000,
                 min_rows: int = 0, dicts: bool = True) -> pa.Table:
    """A table of 1 to 6 columns ``c0``, ``c1``, ... of random kinds and null densities
    (no dictionary column unless ``dicts``)."""
    rows = rng.choice([0, 1, 2, 7, 50, 300, rng.randint(1, max_rows)])
    if min_rows:
        rows = rng.randint(min_rows, 2 * min_rows)
    columns: dict[str, pa.Array] = {}
    for i in range(rng.randint(1, 6)):
        t, draw = _kind(rng, nested, dicts)
        density = rng.choice(DENSITIES)
        values = [None if rng.random() < density else draw(rng) for _ in range(rows)]
        if pa.types.is_dictionary(t):
            columns[f"c{i}"] = pa.array(values, pa.string()).dictionary_encode()
        else:
            columns[f"c{i}"] = _array(values, t)
    return pa.table(columns)


def _array(values: list[Any], t: pa.DataType) -> pa.Array:
    if pa.types.is_decimal(t):  # Python's Decimal infers its own precision: built as text
        text = [None if v is None else str(v) for v in values]
        return pa.array(text, pa.string()).cast(t)
    return pa.array(values, _storage(t)).cast(t, safe=False)


def _storage(t: pa.DataType) -> pa.DataType:
    """The type values are built in: timestamps as naive microseconds (in a zone: UTC
    instants), cast to their unit (truncating) and zone."""
    if pa.types.is_timestamp(t):
        return pa.timestamp("us")
    return t
