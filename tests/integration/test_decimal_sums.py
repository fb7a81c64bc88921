"""Sums of ``decimal(38, s)`` columns (issue 36 §2), through the real handler: a sum whose
exact value fits is answered exactly (Python's ``Decimal`` is the oracle), over one object
and many; one that leaves 38 digits is a typed ``QueryError`` naming the query's sum as it
is written (``SUM(amount)``), never a column polars made up for a partial."""

from __future__ import annotations

import decimal
import io
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3slice import FOOTER_CACHE, QueryError
from s3slice.entry import dispatch as _entry
from tests.support import S3Env, invoke

pytestmark = pytest.mark.integration

DATA = "decimal-sums"
D = decimal.Decimal
BIG = D("99999999999999999999999999999999.999999")  # the largest decimal(38, 6)


@pytest.fixture
def lake(s3: S3Env) -> Iterator[S3Env]:
    s3.empty_bucket(DATA)
    _entry.reset()
    FOOTER_CACHE.clear()
    yield s3
    _entry.reset()


def put(s3: S3Env, prefix: str, parts: list[list[D | None]]) -> None:
    for i, values in enumerate(parts):
        buf = io.BytesIO()
        with decimal.localcontext(decimal.Context(prec=80)):
            scaled = [None if v is None else v.quantize(D("0.000001")) for v in values]
        pq.write_table(pa.table({"amount": pa.array(scaled, pa.decimal128(38, 6)),
                                 "g": pa.array([len(values) % 2] * len(values))}), buf,
                       row_group_size=2)
        s3.client.put_object(Bucket=DATA, Key=f"{prefix}/{i}.parquet", Body=buf.getvalue())


def exact(parts: list[list[D | None]]) -> D:
    with decimal.localcontext(decimal.Context(prec=80)):
        return sum((v for p in parts for v in p if v is not None), D(0))


@pytest.mark.parametrize("parts", [
    [[BIG, D("-1.5"), D("0.5")]],
    [[BIG], [D("-0.5"), None], [D("-1"), D("1.25")]],
    [[D("12345678901234567890.123456"), D("-0.000001")], [D("7.5")] * 5],
], ids=["near the largest", "largest across objects", "ordinary"])
def test_a_sum_that_fits_is_exact(lake: S3Env, parts: list[list[D | None]]) -> None:
    put(lake, "fits", parts)
    want = exact(parts)
    for source in (f"s3://{DATA}/fits/0.parquet", f"s3://{DATA}/fits/"):
        if source.endswith(".parquet") and len(parts) > 1:
            continue
        got = invoke({"source": source, "sql": "SELECT SUM(amount) AS s FROM s3object",
                      "return_rows": True})
        assert D(str(got["rows"][0]["s"])) == want, source


@pytest.mark.parametrize("sql", [
    "SELECT SUM(amount) AS s FROM s3object",
    "SELECT g, SUM(amount) FROM s3object GROUP BY g",
    "SELECT COUNT(*) AS n, SUM(amount) AS s FROM s3object WHERE amount > 0",
])
def test_an_overflowing_sum_names_the_column(lake: S3Env, sql: str) -> None:
    parts = [[BIG, D("20000000000000000000000000000000")], [BIG]]
    assert len(exact(parts).as_tuple().digits) > 38
    put(lake, "over", parts)
    for source in (f"s3://{DATA}/over/0.parquet", f"s3://{DATA}/over/"):
        with pytest.raises(QueryError, match=r"SUM\(amount\): a sum of a decimal column") as e:
            invoke({"source": source, "sql": sql, "return_rows": True})
        assert "__" not in str(e.value)
