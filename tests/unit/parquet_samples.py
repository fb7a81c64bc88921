"""Parquet objects made in memory, for the unit tests of the Parquet layer."""

from __future__ import annotations

import io

import polars as pl


def parquet_bytes(frame: pl.DataFrame, **kwargs: object) -> bytes:
    buf = io.BytesIO()
    frame.write_parquet(buf, **kwargs)  # type: ignore[arg-type]
    return buf.getvalue()
