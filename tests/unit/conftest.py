"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl
import pytest
import sqlglot

from tests.unit.parquet_samples import parquet_bytes


@pytest.fixture(scope="module")
def sample() -> bytes:
    frame = pl.DataFrame({"a": range(1000), "b": [i % 7 for i in range(1000)],
                          "c": [f"s{i % 3}" for i in range(1000)]})
    return parquet_bytes(frame, row_group_size=100, compression="snappy")


@pytest.fixture
def sql_parsed(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], list[str]]:
    """``sql_parsed(name)`` counts from then on the texts sqlglot's ``name`` (``parse`` or
    ``parse_one``) is given: how a test proves a cache answered."""
    def start(name: str) -> list[str]:
        texts: list[str] = []
        real = getattr(sqlglot, name)

        def counting(text: str, *args: Any, **kwargs: Any) -> Any:
            texts.append(text)
            return real(text, *args, **kwargs)
        monkeypatch.setattr(sqlglot, name, counting)
        return texts
    return start
