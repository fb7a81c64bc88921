"""What the page-index tests share: the files they write (with a page index, small
pages), an engine on them that records its reads, the oracle (polars on the whole file),
the Thrift structures of the footer, and the fixture that lets these small files' page
index be parsed."""

from __future__ import annotations

import datetime as dt
import math
import random
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import thriftpy2
from thriftpy2.protocol import TCompactProtocolFactory
from thriftpy2.utils import deserialize

import s3slice.parquet.pages
import s3slice.parquet.thrift
from s3slice import (
    Engine,
    FooterCache,
    LocalFetcher,
    RecordingFetcher,
    Settings,
)

BUCKET = "data"
THRIFT = thriftpy2.load(str(Path(__file__).parents[2] / "functions" / "s3slice" / "parquet" /
                            "parquet.thrift"), module_name="test_parquet_thrift")


#: The share of its bytes a footer may be for the page index to be parsed, as shipped.
SHIPPED_FOOTER_SHARE = s3slice.parquet.pages.MAX_FOOTER_SHARE


@pytest.fixture(autouse=True)  # autouse where it is imported
def any_footer_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """These files are small: their footers are too large a share of their bytes for the
    page index to pay (``_pages.parse_pays``). The test of that rule restores it."""
    monkeypatch.setattr(s3slice.parquet.pages, "MAX_FOOTER_SHARE", math.inf)


def engine_for(root: Path, **kw: Any) -> tuple[Engine, RecordingFetcher]:
    base: dict[str, Any] = {"memory_mb": 2048, "strategy": "ranges", "page_index_ratio": 1.0}
    base.update(kw)
    fetcher = RecordingFetcher(LocalFetcher(root))
    return Engine(Settings(**base), fetcher=fetcher, footer_cache=FooterCache(1 << 20)), fetcher


def write(root: Path, table: pa.Table, name: str = "p.parquet", **kw: Any) -> Path:
    options: dict[str, Any] = {"write_page_index": True, "row_group_size": 50_000,
                               "data_page_size": 16 * 1024}
    options.update(kw)
    (root / BUCKET).mkdir(exist_ok=True)
    path = root / BUCKET / name
    pq.write_table(table, path, **options)
    return path


def sorted_table(n: int = 200_000) -> pa.Table:
    rng = random.Random(7)
    start = dt.datetime(2024, 1, 1)
    return pa.table({
        "ts": pa.array([start + dt.timedelta(seconds=i) for i in range(n)], pa.timestamp("us")),
        "v": pa.array([rng.randrange(1000) for _ in range(n)], pa.int64()),
        "s": pa.array([f"k{i % 11}" for i in range(n)]),
        "f": pa.array([rng.random() for _ in range(n)]),
    })


WINDOW = ("ts >= TIMESTAMP '2024-01-01 10:00:00' AND ts < TIMESTAMP '2024-01-01 10:30:00'")


def oracle(path: Path, where: str, columns: list[str]) -> pl.DataFrame:
    return pl.read_parquet(path).filter(pl.sql_expr(where)).select(columns)


def thrift_struct(name: str, data: bytes) -> Any:
    return deserialize(getattr(THRIFT, name)(), data, TCompactProtocolFactory())
