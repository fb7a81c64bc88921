"""Dictionary-encoded strings are strings (issue 36 §2): a column whose Arrow type is a
dictionary (pyarrow's ``dictionary_encode``, polars' ``Categorical`` and ``Enum``, all kept
as such in the file's ``ARROW:schema``) answers ``LIKE``, ``LOWER``, comparisons with text
and ``GROUP BY`` as a column of strings, on every read path (whole, ranges, batches, many
objects, the copy of a column selection, S3 Select), and is written out as strings.

The oracle is DuckDB on the same bytes (it reads such a column as ``VARCHAR``)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support import S3Env, configure, fresh_lake, invoke

pytestmark = pytest.mark.integration

DATA, RESULTS = "dict-data", "dict-results"
WORDS = ["Apple", "bob", "apple", None, "Cat", "b%ob", "Éclair", "cat"]
ROWS = 400

CONFIGS: dict[str, dict[str, str]] = {
    "auto": {},
    "ranges": {"S3SLICE_SMALL_OBJECT_SIZE": "0", "S3SLICE_STRATEGY": "ranges",
               "S3SLICE_FOOTER_SIZE": "65536"},
    "batches": {"S3SLICE_SMALL_OBJECT_SIZE": "0", "S3SLICE_STRATEGY": "batches"},
    "whole": {"S3SLICE_STRATEGY": "whole"},
}

QUERIES = [
    "SELECT s, x FROM s3object WHERE s LIKE 'a%'",
    "SELECT LOWER(s) AS l, COUNT(*) AS n FROM s3object GROUP BY LOWER(s)",
    "SELECT s, x FROM s3object WHERE s > 'b' AND s <> 'cat'",
    "SELECT s, COUNT(*) AS n, MIN(x) AS lo FROM s3object GROUP BY s",
    "SELECT UPPER(s) AS u, CHAR_LENGTH(s) AS k, x FROM s3object WHERE x < 50",
    "SELECT x FROM s3object WHERE s IN ('bob', 'Cat') OR s IS NULL",
]


def writers() -> dict[str, bytes]:
    """The same strings as a dictionary column, by each writer."""
    values = [WORDS[i % len(WORDS)] for i in range(ROWS)]
    x = pa.array(range(ROWS), pa.int64())
    out = {}
    buf = io.BytesIO()
    pq.write_table(pa.table({"s": pa.array(values).dictionary_encode(), "x": x}), buf,
                   row_group_size=ROWS // 4)
    out["pyarrow_int32"] = buf.getvalue()
    buf = io.BytesIO()
    pq.write_table(pa.table({"s": pa.array(values).cast(pa.dictionary(pa.int8(),
                                                                      pa.large_string())),
                             "x": x}), buf, row_group_size=ROWS // 4, write_page_index=True)
    out["pyarrow_int8_large"] = buf.getvalue()
    buf = io.BytesIO()
    pl.DataFrame({"s": pl.Series(values, dtype=pl.Categorical), "x": x}).write_parquet(
        buf, row_group_size=ROWS // 4)
    out["polars_categorical"] = buf.getvalue()
    buf = io.BytesIO()
    enum = pl.Enum([w for w in WORDS if w is not None])
    pl.DataFrame({"s": pl.Series(values, dtype=enum), "x": x}).write_parquet(
        buf, row_group_size=ROWS // 4)
    out["polars_enum"] = buf.getvalue()
    return out


FILES = writers()


@pytest.fixture
def lake(s3: S3Env) -> Iterator[S3Env]:
    yield from fresh_lake(s3, DATA, RESULTS)


def duck(data: list[bytes], sql: str, tmp: Any) -> list[tuple[Any, ...]]:
    paths = []
    for i, d in enumerate(data):
        path = tmp / f"o{i}.parquet"
        path.write_bytes(d)
        paths.append(str(path))
    con = duckdb.connect()
    con.execute(f"CREATE VIEW s3object AS SELECT * FROM read_parquet({paths!r})")
    assert str(con.execute("SELECT typeof(s) FROM s3object LIMIT 1").fetchone()[0]) == "VARCHAR"
    return sorted(con.execute(sql).fetchall(), key=repr)


def answer(s3: S3Env, source: str, query: dict[str, Any]) -> pl.DataFrame:
    response = invoke({"source": source, **query, "output": f"s3://{RESULTS}/out/"})
    assert response["status"] == "ok", response
    frames = [pl.read_parquet(s3.get(o["uri"])) for o in response["outputs"]]
    return pl.concat(frames)


def rows(frame: pl.DataFrame) -> list[tuple[Any, ...]]:
    return sorted(frame.rows(), key=repr)


@pytest.mark.parametrize("config", [
    c if c == "auto" else pytest.param(c, marks=pytest.mark.slow) for c in sorted(CONFIGS)])
@pytest.mark.parametrize("writer", sorted(FILES))
def test_dictionary_strings_answer_as_strings(lake: S3Env, monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Any, writer: str, config: str) -> None:
    configure(monkeypatch, CONFIGS[config])
    data = FILES[writer]
    assert pa.types.is_dictionary(pq.read_schema(pa.BufferReader(data)).field("s").type)
    lake.client.put_object(Bucket=DATA, Key=f"one/{writer}.parquet", Body=data)
    source = f"s3://{DATA}/one/{writer}.parquet"
    for sql in QUERIES:
        got = answer(lake, source, {"sql": sql})
        assert rows(got) == duck([data], sql, tmp_path), (writer, config, sql)
    got = answer(lake, source, {"filter": "LOWER(s) LIKE '%a%' AND x >= 10",
                                "columns": ["x", "s"]})
    assert got.columns == ["x", "s"] and got.schema["s"] == pl.String
    assert rows(got) == duck([data], "SELECT x, s FROM s3object WHERE LOWER(s) LIKE '%a%' "
                             "AND x >= 10", tmp_path)
    # A plain column selection (copied without decoding under ``auto``) is strings too.
    got = answer(lake, source, {"columns": ["s"]})
    assert got.schema["s"] == pl.String
    assert rows(got) == duck([data], "SELECT s FROM s3object", tmp_path)


def test_many_objects_of_several_writers_combine(lake: S3Env, tmp_path: Any) -> None:
    """Objects whose column is a dictionary in some and a plain string in others."""
    plain = io.BytesIO()
    pq.write_table(pq.read_table(pa.BufferReader(FILES["pyarrow_int32"])).cast(
        pa.schema([("s", pa.string()), ("x", pa.int64())])), plain)
    data = [*FILES.values(), plain.getvalue()]
    for i, d in enumerate(data):
        lake.client.put_object(Bucket=DATA, Key=f"many/{i}.parquet", Body=d)
    for sql in QUERIES:
        got = answer(lake, f"s3://{DATA}/many/", {"sql": sql})
        assert rows(got) == duck(data, sql, tmp_path), sql


def test_s3_select_over_dictionary_strings(lake: S3Env, tmp_path: Any) -> None:
    data = FILES["polars_categorical"]
    lake.client.put_object(Bucket=DATA, Key="sel/c.parquet", Body=data)
    response = invoke({
        "Bucket": DATA, "Key": "sel/c.parquet", "ExpressionType": "SQL",
        "Expression": "SELECT LOWER(s.s), s.x FROM s3object s WHERE s.s LIKE '%a%'",
        "InputSerialization": {"Parquet": {}}, "OutputSerialization": {"CSV": {}}})
    json.dumps(response)
    got = sorted((a, int(b)) for a, b in csv.reader(io.StringIO(response["Payload"])))
    want = duck([data], "SELECT LOWER(s), x FROM s3object WHERE s LIKE '%a%'", tmp_path)
    assert got == sorted(want)
