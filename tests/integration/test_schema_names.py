"""Column names as the reference readers keep them (issue 36 §3), through the real handler:

- a column named ``''`` keeps its name (pyarrow, polars and DuckDB all do), in ``SELECT *``,
  a ``columns`` list, a filter and SQL (where polars' conversion from Arrow named it
  ``column_0``);
- a name the schema gives two columns is refused by name, typed, whenever the query needs
  it (pyarrow and polars both refuse such a file), and the object's other columns are read
  as the references read them (a ``KeyError`` escaped before).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3slice import ObjectFormatError
from tests.support import S3Env, configure, fresh_lake, invoke

pytestmark = pytest.mark.integration

DATA, RESULTS = "names-data", "names-results"
CONFIGS: dict[str, dict[str, str]] = {
    "auto": {},
    "ranges": {"S3SLICE_SMALL_OBJECT_SIZE": "0", "S3SLICE_STRATEGY": "ranges",
               "S3SLICE_FOOTER_SIZE": "65536"},
}


@pytest.fixture
def lake(s3: S3Env) -> Iterator[S3Env]:
    yield from fresh_lake(s3, DATA, RESULTS)


def put(s3: S3Env, key: str, table: pa.Table, **kw: Any) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, **kw)
    s3.client.put_object(Bucket=DATA, Key=key, Body=buf.getvalue())
    return buf.getvalue()


def answer(s3: S3Env, key: str, query: dict[str, Any]) -> pl.DataFrame:
    response = invoke({"source": f"s3://{DATA}/{key}", **query,
                       "output": f"s3://{RESULTS}/out/"})
    return pl.concat([pl.read_parquet(s3.get(o["uri"])) for o in response["outputs"]])


def duck(data: bytes, sql: str, tmp: Any) -> tuple[list[str], list[tuple[Any, ...]]]:
    path = tmp / "o.parquet"
    path.write_bytes(data)
    # DuckDB calls a column named '' C0 (and refuses the empty quoted name).
    rel = duckdb.sql(sql.replace("s3object", f"read_parquet('{path}')").replace('""', "C0"))
    return rel.columns, sorted(rel.fetchall(), key=repr)


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_a_column_named_empty_keeps_its_name(lake: S3Env, monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Any, config: str) -> None:
    configure(monkeypatch, CONFIGS[config])
    table = pa.table({"": pa.array(range(300), pa.int64()),
                      "a": pa.array([i % 11 for i in range(300)], pa.int64())})
    data = put(lake, "blank.parquet", table, row_group_size=100)
    assert pl.read_parquet(data).columns == pq.read_table(pa.BufferReader(data)).column_names
    # The names as pyarrow and polars give them (DuckDB calls the column C0), the rows as
    # DuckDB answers the same SQL.
    for query, names, sql in (
            ({}, ["", "a"], "SELECT * FROM s3object"),
            ({"filter": "a > 4"}, ["", "a"], "SELECT * FROM s3object WHERE a > 4"),
            ({"columns": [""]}, [""], 'SELECT "" FROM s3object'),
            ({"columns": ["a", ""], "filter": '"" >= 150'}, ["a", ""],
             'SELECT a, "" FROM s3object WHERE "" >= 150'),
            ({"sql": 'SELECT "", a FROM s3object WHERE a < 3'}, ["", "a"],
             'SELECT "", a FROM s3object WHERE a < 3')):
        got = answer(lake, "blank.parquet", query)
        assert got.columns == names, (config, query)
        assert sorted(got.rows(), key=repr) == duck(data, sql, tmp_path)[1], (config, query)


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_a_repeated_name_is_refused_by_name_where_it_is_needed(
        lake: S3Env, monkeypatch: pytest.MonkeyPatch, tmp_path: Any, config: str) -> None:
    configure(monkeypatch, CONFIGS[config])
    table = pa.Table.from_arrays(
        [pa.array(range(200), pa.int64()), pa.array(range(200, 400), pa.int64()),
         pa.array([f"v{i % 5}" for i in range(200)])], names=["a", "a", "b"])
    data = put(lake, "dup.parquet", table, row_group_size=50)
    # Every reference that reads Parquet into a frame by name refuses the column.
    with pytest.raises(pl.exceptions.DuplicateError):
        pl.read_parquet(data)
    with pytest.raises(pa.ArrowInvalid):
        pq.read_table(pa.BufferReader(data), columns=["a"])
    for query in ({}, {"columns": ["a"]}, {"filter": "b = 'v1'"}, {"filter": "a > 3",
                                                                     "columns": ["b"]},
                  {"sql": "SELECT SUM(a) AS s FROM s3object"}):
        with pytest.raises(ObjectFormatError, match="names 2 columns 'a'"):
            invoke({"source": f"s3://{DATA}/dup.parquet", **query,
                    "output": f"s3://{RESULTS}/out/"})
        assert lake.keys(RESULTS) == []
    # The other columns are read, equal to pyarrow's read of them.
    want = pq.read_table(pa.BufferReader(data), columns=["b"])
    for query, keep in (({"columns": ["b"]}, None), ({"columns": ["b"], "filter": "b > 'v2'"},
                                                     "v2"),
                        ({"sql": "SELECT b, COUNT(*) AS n FROM s3object GROUP BY b"}, None)):
        got = answer(lake, "dup.parquet", query)
        if "sql" in query:
            assert sorted(got.rows()) == duck(
                data, "SELECT b, COUNT(*) AS n FROM s3object GROUP BY b", tmp_path)[1]
            continue
        values = [v for v in want.column("b").to_pylist() if keep is None or v > keep]
        assert sorted(got.get_column("b").to_list()) == sorted(values), query
    count = invoke({"source": f"s3://{DATA}/dup.parquet",
                    "sql": "SELECT COUNT(*) AS n FROM s3object", "return_rows": True})
    assert count["rows"] == [{"n": 200}]
