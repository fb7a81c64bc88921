"""The references: polars' in-memory evaluation (the file decoded whole, then the same SQL
over the frame) and DuckDB on the same file."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow.parquet as pq


class ReferenceError_(Exception):
    """A reference could not answer (its own limit): the case is skipped."""


def decoded(path: Path) -> pl.DataFrame:
    """The whole file as polars reads it, or as pyarrow does where polars cannot."""
    try:
        return pl.read_parquet(path)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as first:  # noqa: BLE001 - any failure (a panic too): the other reader
        try:
            frame = pl.from_arrow(pq.read_table(path))
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # neither reader: no reference
            raise ReferenceError_(f"neither polars ({first}) nor pyarrow ({e}) reads it") from e
        assert isinstance(frame, pl.DataFrame)
        return frame


def polars_answer(frame: pl.DataFrame, sql: str) -> pl.DataFrame:
    try:
        return pl.SQLContext(frames={"s3object": frame}).execute(sql, eager=True)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # polars refuses (or panics on) the query: no reference
        raise ReferenceError_(f"polars: {type(e).__name__}: {str(e)[:300]}") from e


def duckdb_answer(path: Path, sql: str) -> pl.DataFrame:
    import duckdb

    try:
        with duckdb.connect() as con:
            con.execute("SET TimeZone = 'UTC'")
            con.execute("SET enable_progress_bar = false")
            con.execute(f"CREATE VIEW s3object AS SELECT * FROM read_parquet('{path}')")
            result = con.execute(sql).arrow()
            frame = pl.from_arrow(result.read_all() if hasattr(result, "read_all") else result)
    except Exception as e:  # DuckDB refuses the query or the file: no reference
        raise ReferenceError_(f"duckdb: {type(e).__name__}: {str(e)[:300]}") from e
    assert isinstance(frame, pl.DataFrame)
    return frame
