"""A full temporary directory: when the free space is short the engine keeps data in
memory instead; when the directory fills up during a read, the error is typed (retryable)
and nothing is left."""

from __future__ import annotations

import errno
import io
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import s3slice.fetch.image
from s3slice import Engine, LocalFetcher, S3SliceTransientError, Settings
from s3slice.cli.demo import sample_table
from tests.support import read_request

BUCKET = "data"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / BUCKET).mkdir()
    (tmp_path / "scratch").mkdir()
    table = sample_table(50_000)
    table.write_parquet(tmp_path / BUCKET / "t.parquet", row_group_size=10_000)
    buf = io.BytesIO()
    table.write_csv(buf)
    (tmp_path / BUCKET / "t.csv").write_bytes(buf.getvalue())
    return tmp_path


def engine(root: Path, **kw: Any) -> Engine:
    return Engine(Settings(memory_mb=1024, footer_size=4096, tmp_dir=str(root / "scratch"),
                           **kw), fetcher=LocalFetcher(root))


REQUESTS = [
    pytest.param({"source": f"s3://{BUCKET}/t.csv", "filter": "col_1 < 1000"},
                 {"memory_budget_mb": 1}, id="CSV streamed through /tmp"),
    pytest.param({"source": f"s3://{BUCKET}/t.parquet", "filter": "col_1 < 1000"},
                 {"strategy": "whole", "memory_budget_mb": 1}, id="Parquet whole into /tmp"),
]


@pytest.mark.parametrize(("request_", "settings"), REQUESTS)
def test_a_directory_filling_up_mid_read_is_a_typed_error(
        root: Path, monkeypatch: pytest.MonkeyPatch, request_: dict[str, Any],
        settings: dict[str, Any]) -> None:
    def full(fd: int, data: Any, offset: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(s3slice.fetch.image.os, "pwrite", full)
    with pytest.raises(S3SliceTransientError, match="No space left on device") as info:
        read_request(engine(root, **settings), request_)
    assert info.value.retryable
    assert list((root / "scratch").iterdir()) == []


@pytest.mark.parametrize(("request_", "settings"), REQUESTS)
def test_no_free_space_keeps_data_in_memory(root: Path, monkeypatch: pytest.MonkeyPatch,
                                            request_: dict[str, Any],
                                            settings: dict[str, Any]) -> None:
    monkeypatch.setattr(Settings, "tmp_free_bytes", lambda self: 0)
    result = read_request(engine(root, **settings), request_)
    table = sample_table(50_000).filter(pl.col("col_1") < 1000)
    assert result.frame.sort("col_1", "col_2").equals(
        table.sort("col_1", "col_2").cast(result.frame.schema))  # type: ignore[arg-type]
    assert result.stats.strategy in ("whole-text", "batches", "ranges")
    assert result.stats.strategy_inputs.get("image") in ("memory", None)
    assert list((root / "scratch").iterdir()) == []
