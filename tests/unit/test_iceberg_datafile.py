"""A data file's rows by field id, its row groups pruned by statistics with positions kept
as the file's, and deletes applied (position, and equality with null equal to null)."""

from __future__ import annotations

import io

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from s3slice.iceberg import datafile as D
from s3slice.iceberg.metadata import Field, Schema
from s3slice.query import predicate as P


def _file() -> bytes:
    ids = {b"PARQUET:field_id": b"1"}
    table = pa.table([pa.array(range(50), pa.int32()), pa.array([f"s{i}" for i in range(50)])],
                     schema=pa.schema([pa.field("old_id", pa.int32(), metadata=ids),
                                       pa.field("s", pa.string(),
                                                metadata={b"PARQUET:field_id": b"2"})]))
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=10)
    return buf.getvalue()


SCHEMA = Schema(1, (Field(1, "id", "long"), Field(2, "s", "string"), Field(3, "new", "double")))


def test_rows_by_field_id_promoted_renamed_and_added() -> None:
    frame, groups, read = D.read_rows(_file(), "s3://b/f", SCHEMA, ["id", "s", "new"])
    assert (groups, read) == (5, 5)
    assert frame.schema["id"] == pl.Int64 and frame.schema["new"] == pl.Float64
    assert frame["id"].to_list() == list(range(50)) and frame["new"].null_count() == 50


def test_pruned_row_groups_keep_the_files_positions() -> None:
    frame, groups, read = D.read_rows(_file(), "s3://b/f", SCHEMA, ["id"],
                                      predicate=P.Cmp("id", ">=", 35))
    assert (groups, read) == (5, 2)
    deleted = [pl.Series([31, 36, 49], dtype=pl.Int64)]
    kept = D.apply_deletes(frame, deleted, [])
    assert kept["id"].to_list() == [i for i in range(30, 50) if i not in (31, 36, 49)]
    # a column the file lacks is null in all of it: equality with a constant rules it out
    _, _, read = D.read_rows(_file(), "s3://b/f", SCHEMA, ["id"],
                             predicate=P.Cmp("new", "=", 1.0))
    assert read == 0


def test_equality_deletes_match_null_to_null() -> None:
    frame = pl.DataFrame({"id": [1, 2, 3], "__eq2": ["a", None, "c"],
                          "__s3slice_pos": [0, 1, 2]})
    deletes = pl.DataFrame({"__eq2": [None, "c"]}, schema={"__eq2": pl.String})
    assert D.apply_deletes(frame, [], [deletes])["id"].to_list() == [1]
