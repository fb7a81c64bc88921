"""Fixtures shared by the unit tests."""

from __future__ import annotations

import polars as pl
import pytest

from tests.unit.parquet_samples import parquet_bytes


@pytest.fixture(scope="module")
def sample() -> bytes:
    frame = pl.DataFrame({"a": range(1000), "b": [i % 7 for i in range(1000)],
                          "c": [f"s{i % 3}" for i in range(1000)]})
    return parquet_bytes(frame, row_group_size=100, compression="snappy")
