"""Page-level pruning against the oracle: every physical type, codec, encoding and page
version, corrupt offset indexes, held ranges, nested schemas, and properties over random
frames and predicates, each answered exactly as polars answers the whole file. (The pages
fetched: ``test_page_index.py``.)"""

from __future__ import annotations

import datetime as dt
import random
import struct
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3slice import (
    ObjectFormatError,
    QueryError,
)
from s3slice.core.model import Query
from s3slice.core.ranges import Held
from s3slice.query.analyzer import analyze
from s3slice.query.pruning import predicate as P
from tests.functional.page_index_files import (
    BUCKET,
    any_footer_is_parsed,  # noqa: F401 - autouse: small files' page index parsed
    engine_for,
    oracle,
    sorted_table,
    thrift_struct,
    write,
)
from tests.support import read_request
from tests.unit.test_pruning import (
    TYPED,
    frame_st,
    polars_answer,
    predicate_st,
    typed_table_st,
    typed_where_st,
)


def typed_table(n: int) -> pa.Table:
    rng = random.Random(3)
    base = dt.datetime(2024, 3, 1)
    nulls = [rng.random() < 0.3 for _ in range(n)]

    def masked(values: list[Any], typ: pa.DataType) -> pa.Array:
        return pa.array([None if m else x for x, m in zip(values, nulls, strict=True)], typ)

    order = sorted(rng.randrange(10_000) for _ in range(n))
    return pa.table({
        "i32": pa.array(order, pa.int32()),
        "u32": pa.array([x * 400_000 for x in order], pa.uint32()),
        "i64": masked([x * 3 for x in order], pa.int64()),
        "f64": masked([x / 7.0 for x in order], pa.float64()),
        "f32": pa.array([x / 3.0 for x in order], pa.float32()),
        "s": masked([f"key-{x:05d}" for x in order], pa.string()),
        "d": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=int(x // 50)) for x in order],
                      pa.date32()),
        "ts_ms": pa.array([base + dt.timedelta(seconds=int(x)) for x in order],
                          pa.timestamp("ms")),
        "ts_tz": pa.array([base + dt.timedelta(seconds=int(x)) for x in order],
                          pa.timestamp("us", tz="UTC")),
        "ts_s": pa.array([base + dt.timedelta(seconds=int(x)) for x in order],
                         pa.timestamp("s")),
        "sparse": pa.array([None] * n, pa.int64()),
    })


@pytest.mark.parametrize("where", [
    "i32 BETWEEN 4000 AND 4100",
    "u32 > 3900000000",
    "i64 IN (300, 12000, 29001) OR i64 IS NULL",
    "f64 < 10.5 AND f64 IS NOT NULL",
    "f32 >= 3000",
    "s >= 'key-09000'",
    "s = 'key-05000' OR s = 'key-05001'",
    "d = DATE '2024-03-01'",
    "ts_ms < TIMESTAMP '2024-03-01 00:05:00'",
    "ts_tz > TIMESTAMPTZ '2024-03-01 02:40:00+00:00'",
    "ts_s BETWEEN TIMESTAMP '2024-03-01 01:00:00' AND TIMESTAMP '2024-03-01 01:01:00'",
    "NOT (i32 < 9000)",
    "sparse IS NOT NULL",
    "sparse IS NULL AND i32 < 100",
])
@pytest.mark.parametrize("options", [
    {"compression": "snappy"},
    {"compression": "zstd", "use_dictionary": False},
    {"compression": "gzip", "data_page_version": "2.0"},
    {"compression": "lz4", "max_rows_per_page": 700},
    {"compression": "none", "max_rows_per_page": 1},
])
def test_types_codecs_and_encodings_equal_the_oracle(tmp_path: Path, where: str,
                                                     options: dict[str, Any]) -> None:
    rows = 6_000 if options.get("max_rows_per_page") != 1 else 800
    path = write(tmp_path, typed_table(rows), row_group_size=rows // 3,
                 data_page_size=2048, **options)
    engine, _ = engine_for(tmp_path)
    columns = ["i32", "s", "ts_tz", "ts_s", "f64"]
    result = read_request(engine, {"source": f"s3://{BUCKET}/p.parquet", "columns": columns,
                          "filter": where})
    want = oracle(path, where, columns)
    assert result.frame.equals(want), (where, result.frame, want)
    pushed = P.columns_of(analyze(Query(filter=where)).predicate)
    if pushed and result.stats.row_groups_read:
        assert result.stats.strategy_inputs["page_index"]["pages_total"] > 0


def test_a_corrupt_offset_index_is_a_format_error(tmp_path: Path) -> None:
    path = write(tmp_path, sorted_table(20_000))
    data = bytearray(path.read_bytes())
    (length,) = struct.unpack("<I", data[-8:-4])
    fmd = thrift_struct("FileMetaData", bytes(data[-8 - length:-8]))
    cc = fmd.row_groups[0].columns[0]
    data[cc.offset_index_offset:cc.offset_index_offset + cc.offset_index_length] = (
        b"\xff" * cc.offset_index_length)
    path.write_bytes(bytes(data))
    engine, _ = engine_for(tmp_path)
    with pytest.raises(ObjectFormatError, match="offset index|OffsetIndex"):
        read_request(engine, {"source": f"s3://{BUCKET}/p.parquet", "columns": ["v"],
                     "filter": "ts < TIMESTAMP '2024-01-01 00:10:00'"})


def test_held_ranges_read_across_neighbouring_pieces() -> None:
    held = Held()
    held.write(10, memoryview(b"abcde"))
    held.write(15, memoryview(b"fgh"))
    held.write(30, memoryview(b"xyz"))
    assert held.read((12, 17)) == b"cdefg"
    assert held.read((30, 33)) == b"xyz"
    with pytest.raises(KeyError):
        held.read((16, 31))
    with pytest.raises(KeyError):
        held.read((0, 11))


@settings(max_examples=40, deadline=None)
@given(frame=frame_st(), where=predicate_st(), group_rows=st.sampled_from([15, 60]),
       page_rows=st.sampled_from([1, 3, 8]), version=st.sampled_from(["1.0", "2.0"]),
       dictionary=st.booleans(),
       columns=st.lists(st.sampled_from(["i", "f", "s", "d"]), min_size=1, max_size=4,
                        unique=True))
def test_page_reads_equal_polars(frame: pl.DataFrame, where: str, group_rows: int,
                                 page_rows: int, version: str, dictionary: bool,
                                 columns: list[str]) -> None:
    with tempfile.TemporaryDirectory() as root:
        path = write(Path(root), frame.to_arrow(), row_group_size=group_rows,
                     max_rows_per_page=page_rows, data_page_version=version,
                     use_dictionary=dictionary)
        engine, _ = engine_for(Path(root), footer_size=256)
        got = read_request(engine, {"source": f"s3://{BUCKET}/p.parquet", "columns": columns,
                           "filter": where}).frame
        del path
    want = frame.filter(pl.sql_expr(where)).select(columns)
    assert got.equals(want), (where, got, want)


@pytest.mark.parametrize("nested", [
    # one leaf per top-level field, yet ``n`` is nested
    pa.array([{"x": i} for i in range(4000)]),
    pa.array([[i, i] for i in range(4000)]),
])
def test_nested_schemas_keep_the_row_group_path(tmp_path: Path, nested: pa.Array) -> None:
    table = pa.table({"i": pa.array(range(4000)), "n": nested})
    path = write(tmp_path, table, row_group_size=2000, data_page_size=512)
    engine, _ = engine_for(tmp_path)
    where = "i BETWEEN 100 AND 120"
    result = read_request(engine, {"source": f"s3://{BUCKET}/p.parquet", "filter": where})
    assert result.frame.equals(pl.read_parquet(path).filter(pl.sql_expr(where)))
    assert "page_index" not in result.stats.strategy_inputs


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(sorted(TYPED)), data=st.data(), where=typed_where_st(),
       page_rows=st.sampled_from([1, 2, 5]), sql=st.booleans())
def test_pages_of_every_type_against_every_constant_equal_polars(
        kind: str, data: st.DataObject, where: str, page_rows: int, sql: bool) -> None:
    """Page statistics judged in the column's own type, as row groups' are: a page holding
    a row polars' filter keeps is read, whatever the constant's kind."""
    table = data.draw(typed_table_st(kind))
    with tempfile.TemporaryDirectory() as root:
        path = write(Path(root), table, row_group_size=12, max_rows_per_page=page_rows)
        want = polars_answer(path.read_bytes(), where)
        engine, _ = engine_for(Path(root), footer_size=256, small_object_size=0)
        query = {"sql": f"SELECT * FROM s3object WHERE {where}"} if sql else {"filter": where}
        request = {"source": f"s3://{BUCKET}/p.parquet", **query}
        if want is None:
            with pytest.raises(QueryError):
                read_request(engine, request)
            return
        result = read_request(engine, request)
    assert result.frame.sort("id").equals(want.sort("id")), (kind, where, result.frame, want)
    if result.stats.row_groups_read and not sql:
        assert result.stats.strategy_inputs.get("page_index", {}).get("pages_total", 1) > 0
