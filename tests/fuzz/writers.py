"""Parquet writers of a random table, each with random options: pyarrow (every writer
option), polars, DuckDB's ``COPY ... (FORMAT parquet)``, fastparquet and, where it runs,
Spark (INT96 timestamps, the legacy list layout). A writer that cannot write a table
raises :class:`Unwritable`; the runner then counts the case as skipped."""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

CODECS = ["none", "snappy", "gzip", "zstd", "lz4", "brotli"]


class Unwritable(Exception):
    """The writer cannot write this table (its own limits, not the service's)."""


def _rows(rng: random.Random, table: pa.Table) -> int:
    return max(1, rng.choice([1, 3, 17, 100, 1000, 1 << 20, max(1, table.num_rows // 3)]))


def pyarrow_writer(table: pa.Table, rng: random.Random, path: Path) -> dict[str, Any]:
    names = table.column_names
    flat = [n for n in names if not pa.types.is_nested(table.schema.field(n).type)]
    dictionary: bool | list[str] = rng.choice([True, False, rng.sample(names, len(names) // 2)])
    opts: dict[str, Any] = {
        "row_group_size": _rows(rng, table),
        "compression": rng.choice(CODECS),
        "use_dictionary": dictionary,
        "write_statistics": rng.choice([True, True, False, rng.sample(names, len(names) // 2)]),
        "data_page_version": rng.choice(["1.0", "2.0"]),
        "version": rng.choice(["1.0", "2.4", "2.6"]),
        "write_page_index": rng.random() < 0.5,
        "data_page_size": rng.choice([None, 64, 1024, 1 << 20]),
        "max_rows_per_page": rng.choice([None, None, 1, 5, 100]),
        "write_batch_size": rng.choice([None, 1, 7, 1024]),
        "dictionary_pagesize_limit": rng.choice([None, 64, 4096]),
        "store_schema": rng.random() < 0.8,
        "write_page_checksum": rng.random() < 0.3,
    }
    if flat and rng.random() < 0.5:
        # (pyarrow's default of a million distinct values makes a 1 MB filter per chunk)
        ndv = max(1, table.num_rows)
        opts["bloom_filter_options"] = {n: rng.choice([{"ndv": ndv}, {"ndv": 10, "fpp": 0.2}])
                                        for n in rng.sample(flat, rng.randint(1, len(flat)))}
    if rng.random() < 0.2:
        opts["use_deprecated_int96_timestamps"] = True
    elif rng.random() < 0.2:
        opts["coerce_timestamps"] = rng.choice(["ms", "us"])
        opts["allow_truncated_timestamps"] = True
    if rng.random() < 0.15:
        opts["store_decimal_as_integer"] = True
    if dictionary is False and rng.random() < 0.4:
        encodings = {}
        for n in flat:
            t = table.schema.field(n).type
            if pa.types.is_integer(t) and not pa.types.is_dictionary(t):
                encodings[n] = rng.choice(["PLAIN", "DELTA_BINARY_PACKED"])
            elif pa.types.is_string(t) or pa.types.is_binary(t):
                encodings[n] = rng.choice(["PLAIN", "DELTA_LENGTH_BYTE_ARRAY",
                                           "DELTA_BYTE_ARRAY"])
            elif pa.types.is_floating(t):
                encodings[n] = rng.choice(["PLAIN", "BYTE_STREAM_SPLIT"])
        if encodings:
            opts["column_encoding"] = encodings
    try:
        pq.write_table(table, path, **opts)
    except (pa.ArrowException, OSError, ValueError, TypeError) as e:
        raise Unwritable(f"pyarrow: {e}") from e
    return opts


def polars_writer(table: pa.Table, rng: random.Random, path: Path) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "compression": rng.choice(["uncompressed", "snappy", "gzip", "zstd", "lz4", "brotli"]),
        "statistics": rng.choice([True, False, "full"]),
        "row_group_size": _rows(rng, table),
        "data_page_size": rng.choice([None, 64, 1024, 1 << 20]),
    }
    try:
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        frame.write_parquet(path, **opts)
    except (pl.exceptions.PolarsError, pa.ArrowException, ValueError, TypeError) as e:
        raise Unwritable(f"polars: {e}") from e
    except BaseException as e:  # a panic of polars' own (pyo3's PanicException)
        if type(e).__name__ != "PanicException":
            raise
        raise Unwritable(f"polars panicked: {e}") from e
    return opts


def duckdb_writer(table: pa.Table, rng: random.Random, path: Path) -> dict[str, Any]:
    import duckdb

    opts = {"COMPRESSION": rng.choice(["uncompressed", "snappy", "gzip", "zstd", "lz4",
                                       "brotli"]),
            "ROW_GROUP_SIZE": _rows(rng, table),
            "PARQUET_VERSION": rng.choice(["V1", "V2"])}
    if rng.random() < 0.3:
        opts["DICTIONARY_SIZE_LIMIT"] = rng.choice([1, 100])
    with duckdb.connect() as con:
        con.execute("SET TimeZone = 'UTC'")
        con.execute("SET enable_progress_bar = false")
        con.register("fuzz_source", table)
        options = ", ".join(f"{k} {v!r}" if isinstance(v, str) else f"{k} {v}"
                            for k, v in opts.items())
        try:
            con.execute(f"COPY (SELECT * FROM fuzz_source) TO '{path}' "
                        f"(FORMAT parquet, {options})")
        except duckdb.Error as e:
            raise Unwritable(f"duckdb: {e}") from e
    return opts


def fastparquet_writer(table: pa.Table, rng: random.Random, path: Path) -> dict[str, Any]:
    import fastparquet

    opts: dict[str, Any] = {
        "compression": rng.choice([None, "SNAPPY", "GZIP", "ZSTD", "LZ4", "BROTLI"]),
        "row_group_offsets": _rows(rng, table),
        "stats": rng.choice([True, False, "auto"]),
        "times": rng.choice(["int64", "int96"]),
    }
    try:
        frame = table.to_pandas()
        fastparquet.write(str(path), frame, write_index=False, **opts)
    except Exception as e:  # any failure of fastparquet's is its own limit
        raise Unwritable(f"fastparquet: {type(e).__name__}: {e}") from e
    return opts


class SparkWriter:
    """Spark rewrites the table (read from pyarrow's file): INT96 or its other timestamp
    types, the legacy list and decimal layouts. One local session, started on first use
    (about a minute on this machine)."""

    def __init__(self) -> None:
        self._session: Any = None

    @staticmethod
    def available() -> bool:
        try:
            import pyspark  # noqa: F401
        except ImportError:
            return False
        return shutil.which("java") is not None

    def session(self) -> Any:
        if self._session is None:
            from pyspark.sql import SparkSession

            self._session = (SparkSession.builder.master("local[1]")
                             .config("spark.ui.enabled", "false")
                             .config("spark.ui.showConsoleProgress", "false")
                             .config("spark.sql.session.timeZone", "UTC")
                             .config("spark.driver.memory", "768m")
                             .getOrCreate())
            self._session.sparkContext.setLogLevel("OFF")  # its refusals are counted
        return self._session

    def __call__(self, table: pa.Table, rng: random.Random, path: Path) -> dict[str, Any]:
        try:
            spark = self.session()
        except Exception as e:  # no JVM here: Spark writes nothing
            raise Unwritable(f"spark: cannot start: {type(e).__name__}: {e}") from e
        opts = {"spark.sql.parquet.outputTimestampType": rng.choice(
                    ["INT96", "INT96", "TIMESTAMP_MICROS", "TIMESTAMP_MILLIS"]),
                "spark.sql.parquet.writeLegacyFormat": rng.choice(["true", "false"]),
                "spark.sql.parquet.compression.codec": rng.choice(
                    ["uncompressed", "snappy", "gzip", "zstd"]),
                "parquet.block.size": str(rng.choice([1 << 10, 1 << 16, 1 << 27]))}
        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp) / "in.parquet"
            # Spark reads no nanosecond timestamps: its input holds microseconds.
            pq.write_table(table, source, coerce_timestamps="us", allow_truncated_timestamps=True)
            try:
                for key, value in opts.items():
                    spark.conf.set(key, value)
                out = Path(tmp) / "out"
                spark.read.parquet(str(source)).coalesce(1).write.option(
                    "parquet.block.size", opts["parquet.block.size"]).parquet(str(out))
            except Exception as e:  # Spark's own limits (unsigned types, ...)
                raise Unwritable(f"spark: {type(e).__name__}: {str(e)[:200]}") from e
            (part,) = out.glob("part-*.parquet")
            shutil.copyfile(part, path)
        return opts


WRITERS = {"pyarrow": pyarrow_writer, "polars": polars_writer, "duckdb": duckdb_writer,
           "fastparquet": fastparquet_writer}
#: How often each writer is drawn.
WEIGHTS = {"pyarrow": 5, "polars": 2, "duckdb": 2, "fastparquet": 1, "spark": 1}
