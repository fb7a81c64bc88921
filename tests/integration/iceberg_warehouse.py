"""What the Iceberg table tests share: the warehouse (a pyiceberg SQL catalog on SQLite,
its warehouse in the local S3 server; the fixtures that make it are in
``test_iceberg_tables.py``), the SQL conformance suite's table, pyiceberg's own scan as
the oracle, and the handler asked for a table's rows (``query``) or its typed error
(``fails``)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import json
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from polars.testing import assert_frame_equal

from s3slice import S3SliceError
from s3slice.answer.textual import textual
from tests.support import S3Env, invoke

BUCKET = "iceberg-warehouse"
N = 2_000


def conformance_frame() -> pl.DataFrame:
    """The SQL conformance suite's table (tests/functional/test_sql_conformance.py)."""
    base = dt.datetime(2024, 1, 1)
    return pl.DataFrame({
        "id": list(range(N)),
        "name": [None if i % 17 == 0 else f" {('Ada', 'bob', 'Cy', 'dora')[i % 4]}{i % 10} "
                 for i in range(N)],
        "amount": [round((i * 7.3) % 500, 2) for i in range(N)],
        "qty": [None if i % 5 == 0 else i % 12 for i in range(N)],
        "ts": [base + dt.timedelta(hours=7 * i) for i in range(N)],
        "day": [dt.date(2024, 1, 1) + dt.timedelta(days=i % 400) for i in range(N)],
        "price": [decimal.Decimal(i % 1000) / 100 for i in range(N)],
        "quoted col": [i % 3 for i in range(N)],
    }, schema_overrides={"price": pl.Decimal(10, 2)})


@dataclasses.dataclass
class Warehouse:
    env: S3Env
    catalog: Any
    properties: dict[str, str]

    def static(self, metadata: str) -> Any:
        from pyiceberg.table import StaticTable

        return StaticTable.from_metadata(metadata, properties=self.properties)


def arrow_of(frame: pl.DataFrame) -> pa.Table:
    return frame.to_arrow().cast(pa.schema([
        pa.field(f.name, pa.string() if pa.types.is_large_string(f.type) else f.type)
        for f in frame.to_arrow().schema]))


def fails(event: Any) -> S3SliceError:
    with pytest.raises(S3SliceError) as info:
        invoke(event)
    return info.value


def query(table_or_metadata: Any, sql: str, **source: Any) -> tuple[pl.DataFrame, dict[str, Any]]:
    metadata = table_or_metadata if isinstance(table_or_metadata, str | dict) else (
        table_or_metadata.metadata_location)
    response = invoke({"source": {"iceberg": metadata, **source}, "sql": sql,
                       "return_rows": True})
    assert response["status"] == "ok", response
    return pl.DataFrame(response["rows"], infer_schema_length=None), response["stats"]


def same(got: pl.DataFrame, want: pl.DataFrame, *, ordered: bool) -> None:
    assert got.columns == want.columns
    if got.height == 0 and want.height == 0:
        return
    # as the inline rows show it (timestamps ISO 8601 by the rule of s3slice.core.values;
    # rechunked: polars 2.1 writes "[]" for a frame whose
    # first chunks are empty)
    want = pl.DataFrame(json.loads(textual(want.rechunk()).write_json()),
                        infer_schema_length=None)
    got = got.cast(want.schema)  # type: ignore[arg-type]
    if not ordered:
        got = got.sort(got.columns, nulls_last=True)
        want = want.sort(want.columns, nulls_last=True)
    # (a float sum over several files adds in another order: equal within rounding)
    assert_frame_equal(got, want, check_exact=False, rel_tol=1e-12)


def pyiceberg_rows(table: Any, **scan: Any) -> pl.DataFrame:
    """pyiceberg's own scan of the table (the oracle)."""
    frame = pl.from_arrow(table.scan(**scan).to_arrow())
    assert isinstance(frame, pl.DataFrame)
    return frame


def data_gets(env: S3Env) -> list[str]:
    return [r.path for r in env.log.gets() if r.path.endswith(".parquet")]


def put(env: S3Env, key: str, body: bytes) -> str:
    env.client.put_object(Bucket=BUCKET, Key=key, Body=body)
    return f"s3://{BUCKET}/{key}"
