"""The smoke check's second part (``layers/smoke_check.py`` imports it, once the layer
and the function's code are on ``sys.path``): the service itself on the layer, with its
local fetcher in place of S3."""

from __future__ import annotations

import bz2
import datetime as dt
import gzip
import io
import os
import random
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

ROWS = 30_000
#: What the service reads and writes: Parquet in any of these (``core.model.COMPRESSIONS``),
#: CSV and JSON compressed with any of ``TEXT_CODECS`` (``text.formats.MAGIC``).
PARQUET_CODECS = ("snappy", "gzip", "zstd", "lz4", "brotli")
TEXT_CODECS = {"gzip": "gz", "bzip2": "bz2", "zstd": "zst"}


def _zstd(data: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as out:
        out.write(data)
    return bytes(sink.getvalue().to_pybytes())


def check_function(tmp: str) -> None:
    """The service itself, its Lambda entry point imported, with its local fetcher in place
    of S3: Parquet in every codec through each decoder (polars on a whole object, pyarrow
    on a plan of row groups apart, pyarrow page by page on a page-index plan), every output codec
    read back by pyarrow and polars, CSV and JSON lines in every text codec (in memory,
    and streamed: decompressed by pyarrow into a file)."""
    import s3slice
    import s3slice.handler  # what Lambda imports
    from s3slice import LocalFetcher, Settings

    rows = 300_000  # enough bytes per row group for the page index to be worth reading
    rng = random.Random(7)  # noqa: S311 - data, not secrets
    table = pa.table({"id": pa.array(range(rows), pa.int64()),
                      "name": pa.array([f"row-{i % 97}" for i in range(rows)]),
                      "x": pa.array([rng.random() for _ in range(rows)])})
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    window = f"id >= {rows // 2} AND id < {rows // 2 + 100}"
    # Row groups 0 and 2, not consecutive: no slice of rows holds them alone.
    apart = f"id < 100 OR id >= {rows - 100}"
    decoders = (("name LIKE 'row-1%'", {}, "polars"), (window, {}, "pyarrow-pages"),
                (apart, {"page_index_ratio": 0, "small_object_size": 0}, "pyarrow"))
    root = os.path.join(tmp, "s3")
    os.makedirs(os.path.join(root, "in"))
    fetcher = LocalFetcher(root)

    def path_of(uri: str) -> str:
        return os.path.join(root, uri.removeprefix("s3://"))

    for codec in PARQUET_CODECS:
        source = f"s3://in/{codec}.parquet"
        pq.write_table(table, path_of(source), compression=codec, row_group_size=rows // 3 + 1,
                       data_page_size=4096, write_page_index=True, use_dictionary=["name"])
        for where, settings, decoder in decoders:
            got = s3slice.read({"source": source, "columns": ["id", "x"], "filter": where},
                               settings=Settings(tmp_dir=tmp, **settings), fetcher=fetcher)
            assert got.stats.strategy_inputs["decoder"] == decoder, (codec, got.stats)
            assert got.frame.equals(frame.filter(pl.sql_expr(where)).select("id", "x")), codec
        answer = s3slice.run({"source": source, "filter": window, "output": {
            "uri": f"s3://out/{codec}/", "format": "parquet", "compression": codec}},
            settings=Settings(tmp_dir=tmp), fetcher=fetcher)
        with open(path_of(answer["outputs"][0]["uri"]), "rb") as f:
            data = f.read()
        md = pq.read_metadata(pa.BufferReader(data))
        assert md.row_group(0).column(0).compression.startswith(codec.upper()), (codec, md)
        expected = frame.filter(pl.sql_expr(window))
        assert pl.from_arrow(pq.read_table(pa.BufferReader(data))).equals(expected), codec
        assert pl.read_parquet(io.BytesIO(data)).equals(expected), codec
    check_function_sql(tmp, fetcher, frame)
    for fmt, read in (("csv", pl.read_csv), ("json", pl.read_ndjson)):
        answer = s3slice.run({"source": "s3://in/zstd.parquet", "filter": window, "output": {
            "uri": f"s3://out/{fmt}/", "format": fmt, "compression": "gzip"}},
            settings=Settings(tmp_dir=tmp), fetcher=fetcher)
        with open(path_of(answer["outputs"][0]["uri"]), "rb") as f:
            assert read(io.BytesIO(gzip.decompress(f.read())))["id"].to_list() == list(
                range(rows // 2, rows // 2 + 100)), fmt

    csv = b"a,b\n" + b"".join(b"%d,x%d\n" % (i, i % 7) for i in range(ROWS))
    lines = b"".join(b'{"a": %d, "b": "x%d"}\n' % (i, i % 7) for i in range(ROWS))
    compress = {"gzip": gzip.compress, "bzip2": bz2.compress, "zstd": _zstd}
    for codec, ext in TEXT_CODECS.items():
        for name, text in (("t.csv", csv), ("t.ndjson", lines)):
            key = f"in/{name}.{ext}"
            with open(path_of(key), "wb") as f:
                f.write(compress[codec](text))
            for streamed, settings in ((False, {}), (True, {"footer_size": 4096})):
                got = s3slice.read({"source": f"s3://{key}", "filter": "a < 10"},
                                   settings=Settings(tmp_dir=tmp, **settings), fetcher=fetcher)
                inputs = got.stats.strategy_inputs
                assert (inputs["compression"], inputs["streamed"]) == (codec, streamed), inputs
                assert got.frame["a"].to_list() == list(range(10)), (key, got.frame)


def check_function_sql(tmp: str, fetcher: Any, frame: pl.DataFrame) -> None:
    """SQL through the service, in S3 Select's dialect (sqlglot's default one, subclassed):
    an alias with paths, a query combining two objects (its partial and final plans), and
    the date functions; each against polars."""
    import s3slice
    from s3slice import Settings

    settings = Settings(tmp_dir=tmp)
    got = s3slice.read({"source": "s3://in/zstd.parquet", "sql": (
        "SELECT s.id, s.x FROM S3Object s WHERE s.id BETWEEN 150000 AND 150500 "
        "AND s.name LIKE 'row-1%'")}, settings=settings, fetcher=fetcher)
    expected = frame.filter(pl.col("id").is_between(150_000, 150_500)
                            & pl.col("name").str.starts_with("row-1")).select("id", "x")
    assert expected.height > 0
    assert got.frame.equals(expected), got.frame

    query = ("SELECT name, COUNT(*) AS n, SUM(id) AS total FROM s3object "
             "WHERE id < 1000 OR id >= 299000 GROUP BY name ORDER BY name")
    got = s3slice.read({"source": ["s3://in/zstd.parquet", "s3://in/snappy.parquet"],
                        "sql": query}, settings=settings, fetcher=fetcher)
    oracle = pl.SQLContext(frames={"s3object": pl.concat([frame, frame])})
    assert got.frame.rows() == oracle.execute(query).collect().rows(), got.frame

    got = s3slice.read({"source": "s3://in/zstd.parquet", "sql": (
        "SELECT id, DATE_ADD(day, 1, TO_TIMESTAMP('2024-05-01T10:30Z')) AS t, "
        "DATE_DIFF(month, TO_TIMESTAMP('2024-01-15T'), TO_TIMESTAMP('2024-05-01T')) AS m, "
        "UTCNOW() AS now FROM s3object WHERE id < 3 ORDER BY id DESC LIMIT 2")},
        settings=settings, fetcher=fetcher)
    assert got.frame["id"].to_list() == [2, 1], got.frame
    assert set(got.frame["t"].to_list()) == {dt.datetime(2024, 5, 2, 10, 30)}, got.frame
    assert set(got.frame["m"].to_list()) == {4}, got.frame
