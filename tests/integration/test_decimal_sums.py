"""Sums of ``decimal(38, s)`` columns (issue 36 §2), through the real handler: a sum whose
exact value fits is answered exactly (Python's ``Decimal`` is the oracle), over one object
and many; one that leaves 38 digits is a typed ``QueryError`` naming the query's sum as it
is written (``SUM(amount)``), never a column polars made up for a partial."""

from __future__ import annotations

import decimal
import io
from collections.abc import Iterator

import polars as pl
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
RUN = D("90000000000000000000000000000000")  # two of them leave 128 bits at scale 6


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
    [[RUN, RUN, -RUN, D("0.5")]],
    [[RUN, D("-0.25")], [RUN, None], [-RUN, -RUN, -RUN]],
    [[-RUN], [-RUN], [RUN, D("1.000001")]],
], ids=["near the largest", "largest across objects", "ordinary",
        "a running total beyond 128 bits", "beyond 128 bits across objects",
        "below -128 bits across objects"])
def test_a_sum_that_fits_is_exact(lake: S3Env, parts: list[list[D | None]]) -> None:
    """Whatever the running totals: polars adds decimals in checked 128-bit integers, so
    9e31 + 9e31 - 9e31 at scale 6 fails there though the total fits; the service sums
    each value's parts (split_types.sum_parts) and answers the exact total."""
    put(lake, "fits", parts)
    want = exact(parts)
    values = [v for p in parts for v in p if v is not None]
    for source in (f"s3://{DATA}/fits/0.parquet", f"s3://{DATA}/fits/"):
        if source.endswith(".parquet") and len(parts) > 1:
            continue
        got = invoke({"source": source, "return_rows": True,
                      "sql": "SELECT SUM(amount) AS s, AVG(amount) AS m FROM s3object"})
        [row] = got["rows"]
        assert D(str(row["s"])) == want, source
        assert float(row["m"]) == pytest.approx(float(want / len(values)), rel=1e-15)


def map_reduce(s3: S3Env, prefix: str, sql: str) -> pl.DataFrame:
    """The Distributed Map's path over ``prefix``: a partial per object written to S3,
    then the reduce's answer."""
    listed = s3.client.list_objects_v2(Bucket=DATA, Prefix=f"{prefix}/")["Contents"]
    items = [{"Key": o["Key"], "Size": o["Size"], "Etag": o["ETag"]} for o in listed]
    output = f"s3://{DATA}/out/"
    for item in items:
        assert invoke({"Items": [item], "BatchInput": {
            "bucket": DATA, "query": {"sql": sql}, "output": output,
            "run": prefix}})["status"] == "ok"
    response = invoke({"Reduce": {"run": prefix, "query": {"sql": sql}, "output": output,
                                  "batches": len(items)}})
    [out] = response["outputs"]
    return pl.read_parquet(s3.get(out["uri"]))


def test_the_map_and_reduce_sum_exactly(lake: S3Env) -> None:
    """Each batch's own total leaves 128 bits (9e31 + 9e31 at scale 6), the answer fits."""
    parts = [[RUN, RUN], [-RUN, D("2.5"), RUN], [-RUN, None]]
    put(lake, "map", parts)
    got = map_reduce(lake, "map", "SELECT g, SUM(amount) AS s, COUNT(*) AS n "
                                  "FROM s3object GROUP BY g ORDER BY g")
    want: dict[int, D] = {}
    for values in parts:
        key = len(values) % 2
        want[key] = want.get(key, D(0)) + exact([values])
    assert dict(zip(got["g"], got["s"], strict=True)) == want
    assert got.schema["s"] == pl.Decimal(38, 6)


def test_the_reduce_names_an_overflowing_sum(lake: S3Env) -> None:
    put(lake, "mapover", [[BIG], [BIG]])
    with pytest.raises(QueryError, match=r"SUM\(amount\): a sum of a decimal column"):
        map_reduce(lake, "mapover", "SELECT SUM(amount) AS s FROM s3object")
