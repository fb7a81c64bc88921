"""The polars types the planner judges statistics in: a column polars cannot hold has
none (the others still prune), whether polars refuses it or panics on it."""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from s3slice.parquet.plan import polars_types


def test_a_type_polars_panics_on_has_no_polars_type_and_the_others_keep_theirs() -> None:
    # polars' import of a month_day_nano_interval is a pyo3 PanicException (a
    # BaseException): it must not escape the planner untyped.
    schema = pa.schema([("id", pa.int64()), ("iv", pa.month_day_nano_interval()),
                        ("s", pa.string())])
    assert polars_types(schema) == {"id": pl.Int64(), "s": pl.String()}
