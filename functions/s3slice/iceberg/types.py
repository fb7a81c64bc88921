"""Iceberg's types: as polars types, and bounds (Iceberg's single-value binary form) as
the Python values :mod:`s3slice.query.pruning.predicate` judges."""

from __future__ import annotations

import datetime as dt
import decimal
import re
import struct
import uuid
from typing import Any

import polars as pl

Type = str | dict[str, Any]

EPOCH = dt.date(1970, 1, 1)
EPOCH_TS = dt.datetime(1970, 1, 1)
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")
_FIXED = re.compile(r"fixed\[\s*(\d+)\s*\]")
PRIMITIVE: dict[str, pl.DataType] = {
    "boolean": pl.Boolean(), "int": pl.Int32(), "long": pl.Int64(), "float": pl.Float32(),
    "double": pl.Float64(), "date": pl.Date(), "time": pl.Time(),
    "timestamp": pl.Datetime("us"), "timestamptz": pl.Datetime("us", "UTC"),
    "string": pl.String(), "uuid": pl.Binary(), "binary": pl.Binary()}
#: Types of format version 3, refused by name.
V3_TYPES = ("timestamp_ns", "timestamptz_ns", "variant", "geometry", "geography", "unknown")


class UnsupportedType(ValueError):
    """A type this reader does not support (named in the message)."""


def decimal_of(t: Type) -> tuple[int, int] | None:
    m = _DECIMAL.fullmatch(t.strip()) if isinstance(t, str) else None
    return (int(m.group(1)), int(m.group(2))) if m else None


def polars_type(t: Type) -> pl.DataType:
    """The polars type of an Iceberg type (nested ones too)."""
    if isinstance(t, dict):
        kind = t.get("type")
        if kind == "struct":
            return pl.Struct({f["name"]: polars_type(f["type"]) for f in t["fields"]})
        if kind == "list":
            return pl.List(polars_type(t["element"]))
        if kind == "map":  # as polars reads a Parquet map (and pyiceberg's scan)
            return pl.Map(polars_type(t["key"]), polars_type(t["value"]))
        raise UnsupportedType(f"unknown type {t!r}")
    if t in PRIMITIVE:
        return PRIMITIVE[t]
    if (d := decimal_of(t)) is not None:
        return pl.Decimal(*d)
    if _FIXED.fullmatch(t.strip()):
        return pl.Binary()
    if t.split("(")[0] in V3_TYPES:
        raise UnsupportedType(f"type {t!r} (Iceberg format version 3) is not supported")
    raise UnsupportedType(f"unknown type {t!r}")


def from_bytes(t: Type, data: bytes | None) -> Any:
    """A bound's value (None when absent or not judged): dates as ``date``, timestamps as
    ``datetime`` (zoned for ``timestamptz``); an ``int`` bound of a column promoted to
    ``long`` (4 bytes) and a ``float`` one promoted to ``double`` read by their length."""
    if data is None or not isinstance(t, str):
        return None
    try:
        if t == "boolean":
            return data[:1] != b"\x00"
        if t in ("int", "long"):
            return int.from_bytes(data, "little", signed=True)
        if t == "date":
            return EPOCH + dt.timedelta(days=int.from_bytes(data, "little", signed=True))
        if t in ("timestamp", "timestamptz"):
            value = micros_to_datetime(int.from_bytes(data, "little", signed=True))
            return value.replace(tzinfo=dt.UTC) if t == "timestamptz" else value
        if t in ("float", "double"):
            return struct.unpack("<f" if len(data) == 4 else "<d", data)[0]
        if t == "string":
            return data.decode("utf-8")
        if t == "binary" or _FIXED.fullmatch(t):
            return bytes(data)
        if (d := decimal_of(t)) is not None:
            unscaled = int.from_bytes(data, "big", signed=True)
            return decimal.Decimal(unscaled).scaleb(-d[1])
    except (ValueError, OverflowError, struct.error, UnicodeDecodeError):
        return None
    return None


def micros_to_datetime(micros: int) -> dt.datetime:
    return EPOCH_TS + dt.timedelta(microseconds=micros)


def natural(t: Type, value: Any) -> Any:
    """A value as fastavro gives it (dates, zoned datetimes) in the form of
    :func:`from_bytes`: a ``timestamp`` zone-less, a ``timestamptz`` in UTC."""
    if isinstance(value, dt.datetime):
        if t == "timestamp" and value.tzinfo is not None:
            return value.astimezone(dt.UTC).replace(tzinfo=None)
        if t == "timestamptz" and value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
    if isinstance(value, int) and not isinstance(value, bool):
        if t == "date":
            return EPOCH + dt.timedelta(days=value)
        if t in ("timestamp", "timestamptz"):
            return natural(t, micros_to_datetime(value))
    return value


def from_json(t: Type, raw: Any) -> Any:
    """A value in the spec's JSON single-value serialization (a field's ``initial-default``)
    as the Python value Arrow builds the column's type from: ``decimal(P,S)``, dates,
    times and timestamps from their ISO strings (a ``timestamptz`` in UTC), ``binary``
    and ``fixed`` from hex, ``uuid`` as its 16 bytes, a struct from its values by field id
    (a field absent from it takes its own ``initial-default``), a list from an array, a
    map from its ``keys`` and ``values`` arrays. None is null. A value that is not of the
    type is a ValueError naming it."""
    if raw is None:
        return None
    try:
        return _from_json(t, raw)
    except (ValueError, TypeError, KeyError, decimal.InvalidOperation) as e:
        raise ValueError(f"{raw!r} is not a {t if isinstance(t, str) else t.get('type')} "
                         f"value ({type(e).__name__}: {e})") from None


def _from_json(t: Type, raw: Any) -> Any:
    if isinstance(t, dict):
        kind = t.get("type")
        if kind == "struct":
            if not isinstance(raw, dict):
                raise TypeError("a struct is a JSON object by field id")
            return {f["name"]: from_json(f["type"], raw[str(f["id"])]) if str(f["id"]) in raw
                    else from_json(f["type"], f.get("initial-default"))
                    for f in t["fields"]}
        if kind == "list":
            if not isinstance(raw, list):
                raise TypeError("a list is a JSON array")
            return [from_json(t["element"], v) for v in raw]
        if kind == "map":
            keys, values = raw["keys"], raw["values"]
            if not isinstance(keys, list) or not isinstance(values, list) or (
                    len(keys) != len(values)):
                raise TypeError("a map is {\"keys\": [...], \"values\": [...]} of one length")
            return [(from_json(t["key"], k), from_json(t["value"], v))
                    for k, v in zip(keys, values, strict=True)]
        raise TypeError(f"unknown type {t!r}")
    if t == "boolean":
        if not isinstance(raw, bool):
            raise TypeError("a boolean is true or false")
        return raw
    if t in ("int", "long"):
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise TypeError("an integer is a JSON integer")
        return raw
    if t in ("float", "double"):
        if isinstance(raw, bool) or not isinstance(raw, int | float | str):
            raise TypeError("a float is a JSON number")
        return float(raw)
    if (d := decimal_of(t)) is not None:
        if not isinstance(raw, str | int):
            raise TypeError("a decimal is a JSON string")
        value = decimal.Decimal(str(raw))
        scaled = value.quantize(decimal.Decimal(1).scaleb(-d[1]))
        if scaled != value or len(scaled.as_tuple().digits) > d[0]:
            raise ValueError(f"does not fit decimal({d[0]}, {d[1]})")
        return scaled
    if not isinstance(raw, str):
        raise TypeError(f"a {t} is a JSON string")
    if t == "string":
        return raw
    if t == "date":
        return dt.date.fromisoformat(raw)
    if t == "time":
        return dt.time.fromisoformat(raw)
    if t in ("timestamp", "timestamptz"):
        return natural(t, dt.datetime.fromisoformat(raw.replace("Z", "+00:00")))
    if t == "uuid":
        return uuid.UUID(raw).bytes
    if t == "binary" or _FIXED.fullmatch(t):
        return bytes.fromhex(raw)
    raise TypeError(f"unknown type {t!r}")
