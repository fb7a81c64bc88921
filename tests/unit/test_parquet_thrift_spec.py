"""The Parquet Thrift classes the function builds from ``thrift_spec`` are the IDL's, as
thriftpy2's own parser builds them, and they read and write what pyarrow writes."""

from __future__ import annotations

import io
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import thriftpy2
from thriftpy2.protocol import TCompactProtocolFactory
from thriftpy2.utils import deserialize, serialize

from s3slice.parquet import thrift as T
from s3slice.parquet.footer import FOOTER_TRAILER
from tests import parquet_thrift_gen as gen


def _comparable(spec: tuple[Any, ...]) -> Any:
    return tuple(_comparable(x) if isinstance(x, tuple) else
                 x.__name__ if isinstance(x, type) else x for x in spec)


def test_the_generated_spec_is_what_the_generator_writes_from_the_idl() -> None:
    assert gen.OUT.read_text() == gen.source(), "run python -m tests.parquet_thrift_gen"


def test_the_built_classes_are_the_idl_parse() -> None:
    parsed = thriftpy2.load(str(gen.IDL), module_name="parquet_check_thrift")
    built = T.thrift()
    meta = parsed.__thrift_meta__
    assert len(meta["structs"]) + len(meta["unions"]) > 40 and len(meta["enums"]) > 5
    for cls in (*meta["structs"], *meta["unions"]):
        mine = getattr(built, cls.__name__)
        assert {k: _comparable(v) for k, v in mine.thrift_spec.items()} == {
            k: _comparable(v) for k, v in cls.thrift_spec.items()}, cls.__name__
        assert mine.default_spec == cls.default_spec, cls.__name__
        assert mine().__dict__ == cls().__dict__, cls.__name__
    for enum in meta["enums"]:
        mine = getattr(built, enum.__name__)
        assert mine._VALUES_TO_NAMES == enum._VALUES_TO_NAMES
        assert all(getattr(mine, k) == v for k, v in enum._NAMES_TO_VALUES.items())


def test_a_footer_reads_and_writes_back_byte_for_byte() -> None:
    table = pa.table({"i": pa.array([1, None, 3], pa.int64()),
                      "s": pa.array(["a", "b", None]),
                      "d": pa.array([Decimal("1.5"), Decimal("2.5"), None], pa.decimal128(9, 2)),
                      "l": pa.array([[1], [], None], pa.list_(pa.int32()))})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=2, write_page_index=True)
    data = buf.getvalue()
    length = int.from_bytes(data[-8:-4], "little")
    body = data[-FOOTER_TRAILER - length:-FOOTER_TRAILER]
    fmd = T.read_struct("FileMetaData", body, "mem://t")
    md = pq.read_metadata(pa.BufferReader(data))
    assert fmd.num_rows == md.num_rows == 3 and len(fmd.row_groups) == md.num_row_groups == 2
    assert [e.name for e in fmd.schema if e.num_children is None] == ["i", "s", "d", "element"]
    chunk = fmd.row_groups[1].columns[0]
    assert chunk.meta_data.type == T.thrift().Type.INT64
    assert chunk.meta_data.data_page_offset == md.row_group(1).column(0).data_page_offset
    assert chunk.offset_index_offset is not None and chunk.column_index_offset is not None
    again = T.encode(fmd)
    assert T.read_struct("FileMetaData", again, "mem://t") == fmd
    # the same bytes as thriftpy2's classes from the IDL write for the same footer
    factory = TCompactProtocolFactory()  # type: ignore[no-untyped-call]
    parsed = thriftpy2.load(str(gen.IDL), module_name="parquet_bytes_thrift")
    assert bytes(serialize(deserialize(parsed.FileMetaData(), body, factory), factory)) == again
