"""A projection copied as column chunks, without decoding, is the oracle's answer (a plain
read of those columns) for polars, pyarrow and DuckDB; what cannot be copied exactly is
not; a copied chunk whose pages do not match its metadata is an ObjectFormatError."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import io
import struct
from collections.abc import Callable
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3slice.core.errors import ObjectFormatError
from s3slice.parquet import chunk_copy
from s3slice.parquet.arrow import compatible
from s3slice.parquet.chunk_copy import Layout, check_chunks, check_decodes, copy_layout
from s3slice.parquet.footer import MAGIC, parse_footer
from s3slice.parquet.plan import plan_parquet
from s3slice.query.pruning import predicate as P

N = 3_000


def table() -> pa.Table:
    i = list(range(N))
    return pa.table({
        "id": pa.array(i, pa.int64()),
        "small": pa.array([x % 7 if x % 5 else None for x in i], pa.int32()),
        "price": pa.array([x / 3 for x in i], pa.float64()),
        "name": pa.array([f"name-{x % 13}" if x % 11 else None for x in i], pa.string()),
        "flag": pa.array([x % 2 == 0 for x in i], pa.bool_()),
        "day": pa.array([dt.date(2020, 1, 1) + dt.timedelta(days=x % 400) for x in i],
                        pa.date32()),
        "at": pa.array([dt.datetime(2021, 1, 1) + dt.timedelta(seconds=x) for x in i],
                       pa.timestamp("us", tz="Europe/Paris")),
        "amount": pa.array([decimal.Decimal(x) / 100 for x in i], pa.decimal128(12, 2)),
        "blob": pa.array([bytes([x % 256]) * (x % 5) for x in i], pa.binary()),
        "kind": pa.array([("a", "b", "c")[x % 3] for x in i]).dictionary_encode(),
    })


WRITERS: dict[str, Callable[[pa.Table], bytes]] = {
    "pyarrow snappy": lambda t: _pyarrow(t, compression="snappy", row_group_size=700),
    "pyarrow zstd, page index, v2 pages": lambda t: _pyarrow(
        t, compression="zstd", row_group_size=1000, write_page_index=True,
        data_page_version="2.0", data_page_size=2048),
    "pyarrow uncompressed, no dictionary": lambda t: _pyarrow(
        t, compression="none", use_dictionary=False, row_group_size=N),
    "pyarrow gzip, no statistics": lambda t: _pyarrow(
        t, compression="gzip", write_statistics=False, row_group_size=1234),
    "polars zstd": lambda t: _polars(t, compression="zstd", row_group_size=900),
    "polars lz4": lambda t: _polars(t, compression="lz4", row_group_size=1500),
}


def _pyarrow(t: pa.Table, **kwargs: object) -> bytes:
    buf = io.BytesIO()
    pq.write_table(t, buf, **kwargs)  # type: ignore[arg-type]
    return buf.getvalue()


def _polars(t: pa.Table, **kwargs: object) -> bytes:
    buf = io.BytesIO()
    frame = pl.from_arrow(t)
    assert isinstance(frame, pl.DataFrame)
    frame.write_parquet(buf, **kwargs)  # type: ignore[arg-type]
    return buf.getvalue()


def layout_of(data: bytes, columns: list[str]) -> Layout | None:
    footer = parse_footer(data, size=len(data), uri="u", keep_before=0)
    plan = plan_parquet(footer, columns=columns, predicate=P.TRUE, uri="u")
    return copy_layout(footer, plan, "u")


def copyable(data: bytes, columns: list[str]) -> Layout:
    """``layout_of`` for columns that can be copied."""
    layout = layout_of(data, columns)
    assert layout is not None
    return layout


def copied(data: bytes, layout: Layout) -> bytearray:
    """The output as the reader builds it: magic, each run at its place, the footer."""
    out = bytearray(layout.size)
    out[:len(MAGIC)] = MAGIC

    def write(at: int, chunk: memoryview) -> None:
        out[at:at + len(chunk)] = chunk
    place = layout.placing(write)
    for (start, end), _ in layout.runs():
        for a in range(start, end, 4096):  # as a fetch delivers it: in pieces
            place(a, memoryview(data)[a:min(end, a + 4096)])
    out[layout.footer_at:] = layout.footer
    return out


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("columns", [
    ["id"], ["name", "id"], ["at", "amount", "kind"], ["small", "flag", "day", "blob"],
    list(table().column_names),
])
def test_a_copy_is_the_oracle_for_every_reader(writer: str, columns: list[str],
                                               tmp_path: Path) -> None:
    data = WRITERS[writer](table())
    source = tmp_path / "source.parquet"
    source.write_bytes(data)
    layout = copyable(data, columns)
    out = copied(data, layout)
    check_chunks(layout, lambda at, n: bytes(out[at:at + n]), "u")
    path = tmp_path / "copy.parquet"
    path.write_bytes(out)
    in_order = [c for c in table().column_names if c in columns]

    # A dictionary is typed as its values in the copy, as every decoded answer types it.
    theirs_pl = pl.read_parquet(source, columns=in_order)
    theirs_pl = theirs_pl.with_columns(
        pl.col(c).cast(pl.String) for c, t in theirs_pl.schema.items()
        if isinstance(t, pl.Categorical | pl.Enum))
    assert pl.read_parquet(path).equals(theirs_pl)
    theirs_pa = pq.read_table(source, columns=in_order)
    theirs_pa = theirs_pa.cast(compatible(theirs_pa.schema))
    mine_pa = pq.read_table(path)
    assert not any(pa.types.is_dictionary(f.type) for f in mine_pa.schema)
    # (polars' writer keeps a dictionary's strings as large_string: the same values)
    assert mine_pa.cast(theirs_pa.schema).equals(theirs_pa)
    assert pq.read_metadata(path).num_rows == N == layout.rows
    select = ", ".join(f'"{c}"' for c in in_order)
    mine, theirs = (f"SELECT {select} FROM read_parquet('{p}')" for p in (path, source))
    # Compared inside DuckDB: every row of each is a row of the other, as often.
    for a, b in ((mine, theirs), (theirs, mine)):
        assert duckdb.sql(f"SELECT count(*) FROM ({a} EXCEPT ALL {b})").fetchall() == [(0,)]
    assert duckdb.sql(f"SELECT count(*) FROM ({mine})").fetchall() == [(N,)]


@pytest.mark.parametrize("order", [["kind", "id"], ["price", "name", "id", "flag"]])
def test_a_copy_has_the_requested_order(order: list[str], tmp_path: Path) -> None:
    data = WRITERS["pyarrow snappy"](table())
    footer = parse_footer(data, size=len(data), uri="u", keep_before=0)
    plan = plan_parquet(footer, columns=order, predicate=P.TRUE, uri="u")
    layout = copy_layout(footer, plan, "u", order=order)
    assert layout is not None
    out = copied(data, layout)
    check_chunks(layout, lambda at, n: bytes(out[at:at + n]), "u")
    path = tmp_path / "copy.parquet"
    path.write_bytes(out)
    want = pq.read_table(io.BytesIO(data), columns=order)
    got = pq.read_table(path)
    assert got.column_names == order
    want = want.cast(compatible(want.schema))
    assert got.cast(want.schema).equals(want)
    assert pl.read_parquet(path).columns == order


def test_only_the_needed_chunks_are_asked_for() -> None:
    data = WRITERS["pyarrow snappy"](table())
    md = pq.read_metadata(io.BytesIO(data))
    layout = copyable(data, ["price", "id"])
    wanted = [md.schema.names.index(c) for c in ("id", "price")]
    chunks = sum(md.row_group(g).column(i).total_compressed_size
                 for g in range(md.num_row_groups) for i in wanted)
    assert sum(end - start for (start, end), _ in layout.runs()) == chunks
    assert layout.size == len(MAGIC) + chunks + len(layout.footer)
    assert layout.codecs == {"SNAPPY"}


def test_neighbouring_chunks_are_one_run() -> None:
    data = WRITERS["pyarrow snappy"](table())
    layout = copyable(data, list(table().column_names))
    groups = pq.read_metadata(io.BytesIO(data)).num_row_groups
    assert len(layout.runs()) == 1 < groups  # every chunk: the file's body, as it is


@pytest.mark.parametrize("frame", [
    pl.DataFrame({"id": [1, 2], "s": [{"a": 1}, {"a": 2}]}),
    pl.DataFrame({"id": [1, 2], "l": [[1], [2, 3]]}),
])
def test_a_nested_schema_is_not_copied(frame: pl.DataFrame) -> None:
    buf = io.BytesIO()
    frame.write_parquet(buf)
    assert layout_of(buf.getvalue(), ["id"]) is None


def test_a_page_that_does_not_fit_its_chunk_is_an_object_format_error() -> None:
    data = WRITERS["pyarrow uncompressed, no dictionary"](table())
    layout = copyable(data, ["id"])
    out = copied(data, layout)
    first = layout.chunks[0]
    broken = bytearray(out)
    broken[first.at:first.at + 8] = b"\xff" * 8  # the first page header
    with pytest.raises(ObjectFormatError, match="column 'id' of row group 0"):
        check_chunks(layout, lambda at, n: bytes(broken[at:at + n]), "u")


def test_a_chunk_holding_other_counts_than_its_metadata_is_refused() -> None:
    data = WRITERS["pyarrow snappy"](table())
    layout = copyable(data, ["id"])
    out = copied(data, layout)
    first = layout.chunks[0]
    lying = dataclasses.replace(layout, chunks=(
        dataclasses.replace(first, num_values=first.num_values + 1),))
    with pytest.raises(ObjectFormatError, match="metadata 701 values"):
        check_chunks(lying, lambda at, n: bytes(out[at:at + n]), "u")


def test_the_footer_closes_the_file() -> None:
    data = WRITERS["polars zstd"](table())
    layout = copyable(data, ["id"])
    assert layout.footer.endswith(MAGIC)
    (length,) = struct.unpack("<I", layout.footer[-8:-4])
    assert length == len(layout.footer) - 8


def test_a_page_that_does_not_decompress_is_caught_by_decoding_it(tmp_path: Path) -> None:
    """Its header intact, its compressed bytes not: the page walk cannot tell, a decode
    can."""
    data = WRITERS["pyarrow snappy"](table())
    layout = copyable(data, ["name", "id"])
    out = copied(data, layout)
    path = tmp_path / "copy.parquet"
    path.write_bytes(out)
    check_decodes(str(path), layout, ["id", "name"], "u")  # as copied, it decodes
    chunk = layout.chunks[2]
    out[chunk.at + 60:chunk.at + 90] = b"\xff" * 30
    check_chunks(layout, lambda at, n: bytes(out[at:at + n]), "u")
    path.write_bytes(out)
    with pytest.raises(ObjectFormatError, match="does not decode"):
        check_decodes(str(path), layout, ["id", "name"], "u")


def test_a_page_header_longer_than_the_first_read_is_read_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Long strings give a page header long statistics: more than the first 1 KiB read."""
    long = pa.table({"id": pa.array(range(200), pa.int64()),
                     "s": pa.array([f"{i:04d}" + "x" * 1500 for i in range(200)])})
    data = _pyarrow(long, compression="none", use_dictionary=False, write_statistics=True,
                    data_page_size=64 * 1024)
    layout = copyable(data, ["s"])
    out = copied(data, layout)
    check_chunks(layout, lambda at, n: bytes(out[at:at + n]), "u")
    path = tmp_path / "copy.parquet"
    path.write_bytes(out)
    check_decodes(str(path), layout, ["s"], "u")
    assert pl.read_parquet(path).equals(pl.read_parquet(io.BytesIO(data), columns=["s"]))
    # The first read alone does not hold these headers.
    monkeypatch.setattr(chunk_copy, "_HEADER_READS", (1024,))
    with pytest.raises(ObjectFormatError, match="no page header"):
        check_chunks(layout, lambda at, n: bytes(out[at:at + n]), "u")
