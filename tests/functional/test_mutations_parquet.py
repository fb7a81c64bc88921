"""Malformed mutations of valid Parquet objects, read through the engine by every
strategy: column chunk sizes understated and overstated, offsets that disagree, values
counts that disagree with the rows, encrypted columns, compression and dictionary bombs.

Each read ends as an answer equal to pyarrow's read of the same bytes, or as an
``ObjectFormatError`` naming the object: never zeros decoded where no byte was fetched,
never a process that dies.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3slice import Engine, FooterCache, LocalFetcher, ObjectFormatError, Settings
from s3slice.parquet import plan as _plan
from tests import malformed
from tests.support import read_request

BUCKET = "data"
ROWS = 20_000
STRATEGIES = ["auto", "ranges", "whole", "batches"]


def _table() -> pa.Table:
    return pa.table({
        "id": pa.array(range(ROWS), pa.int64()),
        "s": pa.array([f"v{(i * 7) % 300}" for i in range(ROWS)]),
        "z": pa.array([float(i % 977) for i in range(ROWS)]),
    })


#: One row group of three chunks, its middle one dictionary-encoded strings, in small
#: pages: a chunk's last page is a few hundred bytes.
BASE = malformed.write(_table(), row_group_size=ROWS // 2, compression="none",
                       data_page_size=2_048, write_page_index=False)


def _engine(root: Path, **kw: Any) -> Engine:
    base: dict[str, Any] = {"memory_mb": 2048, "footer_size": 1024, "small_object_size": 0}
    base.update(kw)
    return Engine(Settings(**base), fetcher=LocalFetcher(root), footer_cache=FooterCache(1 << 20))


def _put(root: Path, data: bytes, name: str = "t.parquet") -> str:
    (root / BUCKET).mkdir(exist_ok=True)
    (root / BUCKET / name).write_bytes(data)
    return f"s3://{BUCKET}/{name}"


def _pyarrow(data: bytes, columns: list[str] | None) -> pl.DataFrame | None:
    """pyarrow's read of the same bytes, all of them at hand; None when it fails."""
    try:
        table = pq.read_table(pa.BufferReader(data), columns=columns)
    except (OSError, ValueError, pa.ArrowException):
        return None
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def _read(root: Path, data: bytes, columns: list[str] | None, strategy: str,
          **kw: Any) -> pl.DataFrame | ObjectFormatError:
    uri = _put(root, data)
    request: dict[str, Any] = {"source": uri}
    if columns is not None:
        request["columns"] = columns
    try:
        return read_request(_engine(root, strategy=strategy, **kw), request).frame
    except ObjectFormatError as e:
        failed = e
    assert failed.uri == uri
    return failed


def _equal_or_refused(got: pl.DataFrame | ObjectFormatError, want: pl.DataFrame | None
                      ) -> None:
    if isinstance(got, ObjectFormatError):
        return
    assert want is not None, "the service answered bytes pyarrow cannot read"
    assert got.equals(want), (got.tail(3), want.tail(3))


def _chunk_meta(column: int, change: Callable[[Any], None], *, group: int = 0,
                created_by: str | None = None) -> bytes:
    fmd = malformed.thrift_footer(BASE)
    if created_by is not None:
        fmd.created_by = created_by
    change(fmd.row_groups[group].columns[column].meta_data)
    return malformed.with_thrift_footer(BASE, fmd)


def _shift(field: str, by: int) -> Callable[[Any], None]:
    def change(meta: Any) -> None:
        setattr(meta, field, getattr(meta, field) + by)
    return change


def _set(field: str, value: Any) -> Callable[[Any], None]:
    def change(meta: Any) -> None:
        setattr(meta, field, value)
    return change


_SIZE, _VALUES = "total_compressed_size", "num_values"
_DICT, _DATA = "dictionary_page_offset", "data_page_offset"
MUTATIONS: dict[str, Callable[[], bytes]] = {
    "size understated by a page's tail": lambda: _chunk_meta(1, _shift(_SIZE, -40)),
    "size understated by half": lambda: _chunk_meta(1, _shift(_SIZE, -3_000)),
    "size overstated into the next chunk": lambda: _chunk_meta(1, _shift(_SIZE, 500)),
    "last chunk overstated into the next group": lambda: _chunk_meta(2, _shift(_SIZE, 300)),
    "first chunk understated": lambda: _chunk_meta(0, _shift(_SIZE, -64)),
    "dictionary offset 0": lambda: _chunk_meta(1, _set(_DICT, 0)),
    "dictionary offset after the data page": lambda: _chunk_meta(1, _shift(_DICT, 64)),
    "data page offset before its start": lambda: _chunk_meta(2, _shift(_DATA, -200)),
    "data page offset past its start": lambda: _chunk_meta(1, _shift(_DATA, 17)),
    "values count understated": lambda: _chunk_meta(0, _shift(_VALUES, -5)),
    "values count overstated": lambda: _chunk_meta(1, _shift(_VALUES, 1_000)),
    "old parquet-mr, size without the dictionary header": lambda: _chunk_meta(
        1, _shift(_SIZE, -40), created_by="parquet-mr version 1.2.8"),
}


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("columns", [None, ["s"], ["id", "z"]])
@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_mutated_footer_reads_as_pyarrow_or_is_refused(
        tmp_path: Path, mutation: str, columns: list[str] | None, strategy: str) -> None:
    data = MUTATIONS[mutation]()
    _equal_or_refused(_read(tmp_path, data, columns, strategy), _pyarrow(data, columns))


@pytest.mark.parametrize("strategy", ["ranges", "batches", "whole"])
def test_an_old_parquet_mr_chunk_reads_the_bytes_pyarrow_reads_past_it(
        tmp_path: Path, strategy: str) -> None:
    """parquet-mr before 1.2.9 left the dictionary page's header out of a chunk's size;
    pyarrow reads 100 bytes more, which the plan fetches: the answer is pyarrow's, where a
    ranged read decoded zeros there as dictionary index 0 (``v0``)."""
    data = MUTATIONS["old parquet-mr, size without the dictionary header"]()
    got = _read(tmp_path, data, ["s"], strategy)
    assert isinstance(got, pl.DataFrame)
    assert got.equals(pl.from_arrow(_table().select(["s"])))


def test_a_read_past_the_fetched_bytes_is_refused_never_decoded_as_zeros(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Were the plan to miss bytes a decoder reads (here: the padding above, unplanned),
    the image refuses them: a typed error, where they read as zeros before."""
    data = MUTATIONS["old parquet-mr, size without the dictionary header"]()
    monkeypatch.setattr(_plan, "pads_chunks", lambda footer: False)
    got = _read(tmp_path, data, ["s"], "ranges")
    assert isinstance(got, ObjectFormatError)
    assert "never fetched" in got.message


# ------------------------------------------------------------------------ encryption

ENCRYPTED: dict[str, Callable[[], bytes]] = {
    "a column key, plaintext footer": lambda: malformed.encrypted(_table(), ["s"]),
    "two columns, plaintext footer": lambda: malformed.encrypted(_table(), ["id", "z"]),
    "encrypted footer": lambda: malformed.encrypted(_table(), ["s"], plaintext_footer=False),
    "crypto metadata, no algorithm": lambda: malformed.column_key_marked(BASE, 1),
}


@pytest.mark.parametrize("request_extra", [{}, {"columns": ["id"]}, {"filter": "id > 5"},
                                           {"columns": ["s"], "filter": "z < 3"}])
@pytest.mark.parametrize("kind", sorted(ENCRYPTED))
def test_encrypted_columns_are_refused_by_name_before_any_decode(
        tmp_path: Path, kind: str, request_extra: dict[str, Any]) -> None:
    uri = _put(tmp_path, ENCRYPTED[kind]())
    with pytest.raises(ObjectFormatError, match="encrypted") as info:
        read_request(_engine(tmp_path, small_object_size=1 << 20),
                     {"source": uri, **request_extra})
    assert info.value.uri == uri
    if "footer" not in kind:
        assert "'s'" in info.value.message or "'id'" in info.value.message


# ----------------------------------------------------------------------------- bombs


@pytest.mark.parametrize(("name", "table"), [
    # One long string repeated: a dictionary of one value, indexes of a few bytes.
    ("dictionary", lambda: pa.table({"s": pa.array(["x" * 4_000] * 100_000)})),
    # Zeros compress to nothing: 8 bytes a row decoded.
    ("zstd", lambda: pa.table({"z": pa.array(pa.nulls(12_000_000, pa.int64()).fill_null(0))})),
    # Nulls: a few bytes of levels.
    ("nulls", lambda: pa.table({"n": pa.nulls(12_000_000, pa.int64())})),
])
def test_a_row_group_that_decodes_past_the_memory_is_refused_with_its_figure(
        tmp_path: Path, name: str, table: Callable[[], pa.Table]) -> None:
    data = malformed.write(table(), compression="zstd", row_group_size=1 << 30,
                           use_dictionary=name == "dictionary")
    assert len(data) < 2 << 20  # a small object
    uri = _put(tmp_path, data)
    engine = _engine(tmp_path, memory_mb=128)  # the decode would need more than 76 MB
    with pytest.raises(ObjectFormatError, match=r"row group 0 decodes to [\d,]+ bytes") as info:
        read_request(engine, {"source": uri})
    assert info.value.uri == uri
    # The same object with memory for it is read.
    got = read_request(_engine(tmp_path, memory_mb=4096), {"source": uri, "limit": 3}).frame
    assert got.height == 3


def test_a_file_within_the_memory_is_not_refused(tmp_path: Path) -> None:
    uri = _put(tmp_path, BASE)
    got = read_request(_engine(tmp_path, memory_mb=128), {"source": uri}).frame
    assert got.equals(pl.from_arrow(_table()))
