"""Files of other writers read as the reference readers read them, on every local path of
the engine (tests/fuzz/service.py's): INT96 columns keep the time zone their writer's
stored Arrow schema gives (as polars does; at microseconds, as Spark and DuckDB read INT96),
fastparquet's INT96 is equal to pyarrow's reading or an ``ObjectFormatError`` where the
readers disagree, and a filtered read of what pyarrow cannot decode (DuckDB's
DELTA_BINARY_PACKED) falls back to polars as the unfiltered one does."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3slice import ObjectFormatError
from tests.fuzz import service, tables, writers
from tests.fuzz.runner import Runner

PATHS = list(service.LOCAL)


def _file(tmp_path: Path, name: str) -> Path:
    (tmp_path / service.BUCKET).mkdir(exist_ok=True)
    return tmp_path / service.BUCKET / name


def _zoned_int96(tmp_path: Path) -> Path:
    zone = pa.timestamp("us", tz="America/New_York")
    base = dt.datetime(2024, 1, 10, tzinfo=dt.UTC)
    n = 300
    table = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "t": pa.array([None if i % 7 == 0 else base + dt.timedelta(hours=i) for i in range(n)],
                      zone),
        "u": pa.array([base + dt.timedelta(minutes=i) for i in range(n)],
                      pa.timestamp("ns", tz="UTC")),
        "s": pa.array([{"a": base + dt.timedelta(days=i), "b": i} for i in range(n)],
                      pa.struct([("a", pa.timestamp("ms", tz="Asia/Kolkata")),
                                 ("b", pa.int32())]))})
    path = _file(tmp_path, "zoned.parquet")
    pq.write_table(table, path, use_deprecated_int96_timestamps=True, row_group_size=64,
                   data_page_size=256, write_page_index=True)
    return path


@pytest.mark.parametrize("request_", [
    {"filter": "t IS NOT NULL"}, {"columns": ["id", "t", "u", "s"]},
    {"filter": "id >= 100 AND id < 130", "columns": ["t", "s"]},
    {"sql": "SELECT MAX(t) AS t, MIN(u) AS u FROM s3object WHERE id > 5"}])
@pytest.mark.parametrize("path", PATHS)
def test_int96_keeps_the_stored_time_zone(tmp_path: Path, path: str,
                                          request_: dict[str, Any]) -> None:
    file = _zoned_int96(tmp_path)
    assert pq.read_metadata(file).schema.column(1).physical_type == "INT96"
    got = service.local_answer(file, request_, path).frame
    # polars keeps each zone (at the stored unit); the service reads INT96 at microseconds.
    frame = pl.read_parquet(file)
    assert frame.schema["t"] == pl.Datetime("us", "America/New_York")
    want = pl.SQLContext(frames={"s3object": frame}).execute(
        request_.get("sql") or "SELECT {} FROM s3object{}".format(
            ", ".join(request_.get("columns", frame.columns)),
            f" WHERE {request_['filter']}" if "filter" in request_ else ""), eager=True)
    want = want.with_columns(pl.col(pl.Datetime("ns", "UTC")).dt.cast_time_unit("us"))
    if "s" in want.columns:
        want = want.with_columns(pl.col("s").cast(pl.Struct(
            {"a": pl.Datetime("us", "Asia/Kolkata"), "b": pl.Int32})))
    assert got.schema == want.schema
    assert got.equals(want)
    # DuckDB reads the same instants (naive, in UTC).
    instants = duckdb.sql(f"SELECT t FROM '{file}' WHERE t IS NOT NULL").pl()["t"]
    if "t" in got.columns and request_ == {"filter": "t IS NOT NULL"}:
        assert got["t"].dt.replace_time_zone(None).to_list() != []
        assert got["t"].dt.convert_time_zone("UTC").dt.replace_time_zone(None).to_list() == (
            instants.cast(pl.Datetime("us")).to_list())


def _fastparquet(tmp_path: Path, unit: str, zone: str | None, groups: int) -> Path:
    fastparquet = pytest.importorskip("fastparquet")
    base = dt.datetime(2024, 1, 2, 3, 4, 5, 6)
    values = [None if i % 4 == 1 else base + dt.timedelta(days=i) for i in range(9)]
    table = pa.table({"id": pa.array(range(9), pa.int64()),
                      "t": pa.array(values, pa.timestamp(unit)).cast(pa.timestamp(unit)),
                      "x": pa.array([float(i) for i in range(9)])})
    if zone is not None:
        table = table.set_column(1, "t", table["t"].cast(pa.timestamp(unit, tz=zone)))
    path = _file(tmp_path, f"fp-{unit}-{zone}-{groups}.parquet".replace("/", "_"))
    fastparquet.write(str(path), table.to_pandas(), write_index=False, times="int96",
                      row_group_offsets=groups)
    return path


@pytest.mark.parametrize("zone", [None, "UTC", "Australia/Lord_Howe"])
@pytest.mark.parametrize("unit", ["ns", "us", "s"])
@pytest.mark.parametrize("groups", [1, 4, 100])
def test_fastparquet_int96_is_pyarrow_s_reading_or_refused(
        tmp_path: Path, unit: str, zone: str | None, groups: int) -> None:
    """fastparquet pads each INT96 page (polars refuses every one), reads non-nanosecond
    units as nanoseconds, and for some zones writes its int64s in the INT96 slots, Julian
    day 0, which pyarrow reads as 1970-01-01 and Spark and DuckDB as 4714-11-24 BC: the
    service answers as pyarrow reads (at microseconds) or refuses, never otherwise."""
    file = _fastparquet(tmp_path, unit, zone, groups)
    readable = zone != "Australia/Lord_Howe"  # fastparquet's own values, well formed
    try:
        want = pl.from_arrow(pq.read_table(file, coerce_int96_timestamp_unit="us"))
    except (OSError, pa.ArrowException):  # its int64s misread as INT96 run off the page
        assert not readable
        want = None
    for path in ("single", "ranges", "batches", "pages"):
        for request_ in ({"filter": "x >= 2"}, {"columns": ["t", "id"]}):
            refused: ObjectFormatError | None = None
            try:
                got = service.local_answer(file, request_, path).frame
            except ObjectFormatError as e:
                refused = e
            if refused is not None:
                assert not readable, refused
                assert ("'t'" in refused.message and "INT96" in refused.message) or (
                    want is None and "corrupt Parquet data" in refused.message), refused
                continue
            assert isinstance(want, pl.DataFrame), "pyarrow cannot read it: no answer"
            expected = want.filter(pl.col("x") >= 2) if "filter" in request_ else want.select(
                "t", "id")
            assert got["t"].dt.replace_time_zone(None).to_list() == expected["t"].to_list()
            assert got["id"].to_list() == expected["id"].to_list()
    if not readable and groups == 1:  # one value a page: day 0 in every one
        with pytest.raises(ObjectFormatError, match="Julian day 0"):
            service.local_answer(file, {"columns": ["t"]}, "single")


def _duckdb_delta(tmp_path: Path) -> Path:
    """The fuzzer's case 72112241404332 (its local CI slice): DuckDB's V2 file of a random
    table, whose DELTA_BINARY_PACKED columns pyarrow cannot decode ("InitHeader EOF")."""
    rng = random.Random(72112241404332)
    rng.random()
    rng.choice(list(service.LOCAL))
    assert Runner(only="local").writer(rng) == "duckdb"
    table = tables.random_table(rng, nested=True, min_rows=0)
    path = _file(tmp_path, "duckdb-v2.parquet")
    writers.duckdb_writer(table, rng, path)
    return path


@pytest.mark.parametrize("path", ["single", "whole", "auto", "ranges", "batches"])
@pytest.mark.parametrize("filter_", [None, "c2 IS NULL", "c1 <= '' OR c5 > 1"])
def test_a_filtered_read_pyarrow_cannot_decode_falls_back_to_polars(
        tmp_path: Path, path: str, filter_: str | None) -> None:
    file = _duckdb_delta(tmp_path)
    try:
        pq.read_table(file)
        pyarrow_reads = True
    except (OSError, pa.ArrowException):
        pyarrow_reads = False
    frame = pl.read_parquet(file)
    assert not pyarrow_reads
    request_: dict[str, Any] = {"columns": ["c3", "c2", "c1", "c4"]}
    if filter_ is not None:
        request_["filter"] = filter_
    got = service.local_answer(file, request_, path).frame
    want = pl.SQLContext(frames={"s3object": frame}).execute(
        f"SELECT c3, c2, c1, c4 FROM s3object{'' if filter_ is None else ' WHERE ' + filter_}",
        eager=True)
    assert got.height == want.height and want.height > 0
    assert sorted(map(str, got.rows())) == sorted(map(str, want.rows()))
