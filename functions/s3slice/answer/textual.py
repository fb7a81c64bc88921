"""The rule of :mod:`s3slice.core.values` applied to a polars frame: the values every text
answer (inline rows, NDJSON and CSV outputs, S3 Select's records) is written from."""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from s3slice.core.errors import OutputError
from s3slice.core.values import (
    DATETIME_FORMAT,
    DURATION_FORMAT,
    TIME_FORMAT,
    ZONED_DATETIME_FORMAT,
    Number,
    dump,
    patched,
)


def textual(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with every value a text writer would write its own way as the text the
    rule gives it, nested ones too: binary as base64 (RFC 4648, padded), timestamps, times
    and durations as ISO 8601. A timestamp chrono cannot show (a year past 262142) panics
    here: callers run this inside :func:`s3slice.core.errors.contained`."""
    changed = [e.alias(name) for name, dtype in frame.schema.items()
               if (e := _as_text(pl.col(name), dtype)) is not None]
    return frame.with_columns(changed) if changed else frame


def _as_text(e: pl.Expr, dtype: Any) -> pl.Expr | None:
    if isinstance(dtype, pl.Binary):
        return e.bin.encode("base64")
    if isinstance(dtype, pl.Datetime):
        return e.dt.to_string(DATETIME_FORMAT if dtype.time_zone is None
                              else ZONED_DATETIME_FORMAT)
    if isinstance(dtype, pl.Time):
        return e.dt.to_string(TIME_FORMAT)
    if isinstance(dtype, pl.Duration):
        return e.dt.to_string(DURATION_FORMAT)
    if isinstance(dtype, pl.List | pl.Array):
        inner = _as_text(pl.element(), dtype.inner)
        return None if inner is None else _listed(e, dtype).list.eval(inner)
    if isinstance(dtype, pl.Struct):
        fields = [(f.name, _as_text(e.struct.field(f.name), f.dtype)) for f in dtype.fields]
        if all(sub is None for _, sub in fields):
            return None
        rebuilt = pl.struct([(e.struct.field(n) if sub is None else sub).alias(n)
                             for n, sub in fields])
        return pl.when(e.is_null()).then(None).otherwise(rebuilt)
    return None


def _listed(e: pl.Expr, dtype: Any) -> pl.Expr:
    return e.arr.to_list() if isinstance(dtype, pl.Array) else e


def nested_as_json_text(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (already :func:`textual`) with each struct, list or array column as its
    compact JSON text, as a CSV field holds it (NaN and infinities as in JSON records); a
    null stays null (an empty field)."""
    nested = [name for name, dtype in frame.schema.items() if dtype.is_nested()]
    if not nested:
        return frame
    # polars writes JSON of a struct only: wrap the value as {"v": ...}, then unwrap it.
    out = frame.with_columns(
        pl.when(pl.col(n).is_null()).then(None).otherwise(
            pl.struct(pl.col(n).alias("v")).struct.json_encode().str.slice(5).str.head(-1)
        ).alias(n) for n in nested)
    hits = non_finite_rows(frame.select(nested))
    if not hits:
        return out
    rows = [i for i, _ in hits]
    floaty = list(hits[0][1])  # the nested columns that can hold a float
    fixed = {n: [None if (text := out[n][i]) is None else
                 dump(patched(json.loads(text, parse_float=Number), row[n]))
                 for i, row in hits] for n in floaty}
    return out.with_columns(out[n].scatter(rows, fixed[n]) for n in floaty)


def _non_finite(e: pl.Expr, dtype: Any) -> pl.Expr | None:
    """Whether the value holds a NaN or an infinity (None: its type cannot)."""
    if isinstance(dtype, pl.Float32 | pl.Float64):
        return ~e.is_finite()
    if isinstance(dtype, pl.List | pl.Array):
        inner = _non_finite(pl.element(), dtype.inner)
        return None if inner is None else _listed(e, dtype).list.eval(inner).list.any()
    if isinstance(dtype, pl.Struct):
        subs = [s for f in dtype.fields
                if (s := _non_finite(e.struct.field(f.name), f.dtype)) is not None]
        return pl.any_horizontal(subs) if subs else None
    return None


def non_finite_rows(frame: pl.DataFrame) -> list[tuple[int, dict[str, Any]]]:
    """(index, values of the columns that can hold a float) of each row with a NaN or ±inf."""
    checks = {name: check for name, dtype in frame.schema.items()
              if (check := _non_finite(pl.col(name), dtype)) is not None}
    mask = frame.select(pl.any_horizontal(list(checks.values())).fill_null(False)
                        ).to_series() if checks else None
    if mask is None or not mask.any():
        return []
    hit = frame.select(list(checks)).filter(mask)
    return list(zip(mask.arg_true().to_list(), hit.iter_rows(named=True), strict=True))


def json_records(frame: pl.DataFrame) -> list[str]:
    """One JSON object's text per row, as polars writes NDJSON but with the values of
    :func:`textual` and NaN and infinities as :data:`s3slice.core.values.NON_FINITE` says
    (polars: null). Split at ``\\n`` only: a string may hold U+2028 and the like."""
    frame = textual(frame)
    if not frame.height:
        return []
    lines = frame.write_ndjson().split("\n")
    if len(lines) != frame.height + 1 or lines[-1]:
        raise OutputError(f"polars wrote {len(lines) - 1} JSON lines for {frame.height} rows")
    for i, row in non_finite_rows(frame):
        record = json.loads(lines[i], parse_float=Number)
        lines[i] = dump({**record, **{k: patched(record[k], v) for k, v in row.items()}})
    return lines[:-1]
