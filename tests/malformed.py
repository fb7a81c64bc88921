"""Parquet objects that readers get wrong, built from good ones by rewriting their footer.

The footer is the Parquet Thrift ``FileMetaData``; it is parsed and re-encoded with the
service's own IDL (``s3slice.parquet.pages``), so each object is exactly the good one but for the
footer fields named.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import struct
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from s3slice.parquet import thrift as _thrift


def write(table: pa.Table, **kwargs: Any) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, **kwargs)
    return buf.getvalue()


def footer_length(data: bytes) -> int:
    return int(struct.unpack("<I", data[-8:-4])[0])


def body_of(data: bytes) -> bytes:
    return data[:len(data) - 8 - footer_length(data)]


def thrift_footer(data: bytes) -> Any:
    return _thrift.read_struct("FileMetaData", data[-8 - footer_length(data):-8], "test")


def with_thrift_footer(data: bytes, fmd: Any) -> bytes:
    footer = _thrift.encode(fmd)
    return body_of(data) + footer + struct.pack("<I", len(footer)) + b"PAR1"


def inflated_row_count(rows: int = 6, claimed: int = 10) -> tuple[bytes, pa.Table]:
    """A one-row-group object whose footer claims ``claimed`` rows where its pages hold
    ``rows``: pyarrow decodes ``rows`` without a word, polars' reader panics."""
    table = pa.table({"id": pa.array(range(rows), pa.int64()),
                      "v": pa.array([float(i) / 2 for i in range(rows)])})
    data = write(table, write_page_index=False)
    fmd = thrift_footer(data)
    fmd.num_rows = claimed
    fmd.row_groups[0].num_rows = claimed
    return with_thrift_footer(data, fmd), table


def legacy_two_level_list() -> tuple[bytes, list[dict[str, Any]]]:
    """parquet-mr's legacy shape, with no LIST annotation::

        required int32 id;
        repeated group phoneNumbers { repeated group phone { required int64 number;
                                                             optional binary kind (STRING) } }

    Written as the standard three-level list of lists with required elements (the same
    repetition and definition levels, so the same pages), then the footer's schema is
    rewritten to the two-level form. Returns the object and its rows as pyarrow reads them.
    """
    phone = pa.struct([pa.field("number", pa.int64(), nullable=False),
                       pa.field("kind", pa.string())])
    inner = pa.list_(pa.field("element", phone, nullable=False))
    outer = pa.list_(pa.field("element", inner, nullable=False))
    values = [[], [[]], [[{"number": 5, "kind": None}]], [[{"number": 1, "kind": "home"}], []],
              [[{"number": 1, "kind": "home"}, {"number": 2, "kind": None}]],
              [[{"number": 3, "kind": "mobile"}]]]
    schema = pa.schema([pa.field("id", pa.int32(), nullable=False),
                        pa.field("phoneNumbers", outer, nullable=False)])
    table = pa.table({"id": pa.array(range(1, len(values) + 1), pa.int32()),
                      "phoneNumbers": pa.array(values, outer)}, schema=schema)
    data = write(table, write_page_index=False)
    fmd = thrift_footer(data)
    # root, id, phoneNumbers (LIST), list, element (LIST), list, element, number, kind
    s = fmd.schema
    assert [e.name for e in s] == ["schema", "id", "phoneNumbers", "list", "element", "list",
                                   "element", "number", "kind"]
    s[3].name, s[3].num_children = "phoneNumbers", 1
    s[5].name, s[5].num_children = "phone", 2
    fmd.schema = [s[0], s[1], s[3], s[5], s[7], s[8]]
    for group in fmd.row_groups:
        for chunk in group.columns:
            path = chunk.meta_data.path_in_schema
            if len(path) > 1:
                chunk.meta_data.path_in_schema = ["phoneNumbers", "phone", path[-1]]
    rewritten = with_thrift_footer(data, fmd)
    return rewritten, pq.read_table(pa.BufferReader(rewritten)).to_pylist()


def fixed_offset_time_zone() -> tuple[bytes, pa.Table]:
    """Timestamps in the zone ``-02:15``, which Arrow allows and polars cannot parse."""
    instants = [dt.datetime(2024, 1, 1, 12, 0, tzinfo=dt.UTC) + dt.timedelta(minutes=37 * i)
                for i in range(5)]
    table = pa.table({"id": pa.array(range(5), pa.int64()),
                      "at": pa.array(instants, pa.timestamp("us", tz="-02:15"))})
    return write(table), table


def int96_after_2262() -> tuple[bytes, list[dt.datetime]]:
    """INT96 timestamps as Spark writes them, some past 2262-04-11 (the end of int64
    nanoseconds)."""
    values = [dt.datetime(2500, 1, 1, 0, 0, 0, 123456), dt.datetime(2020, 6, 1, 12, 30),
              dt.datetime(9999, 12, 31, 23, 59, 59), dt.datetime(1600, 3, 1)]
    table = pa.table({"id": pa.array(range(len(values)), pa.int64()),
                      "ts": pa.array(values, pa.timestamp("us"))})
    return write(table, use_deprecated_int96_timestamps=True), values


def encrypted(table: pa.Table, columns: list[str], *, plaintext_footer: bool = True,
              **kwargs: Any) -> bytes:
    """``table`` written with Parquet modular encryption (pyarrow's writer, AES-GCM):
    ``columns`` encrypted with a column key, the footer in plaintext (signed) or
    encrypted (``PARE``). The test KMS "wraps" a key by prefixing its master key's text:
    no secrecy, these objects only have to be encrypted."""
    import pyarrow.parquet.encryption as pe

    keys = {"footer": "0123456789012345", "col": "1234567890123450"}

    class Kms(pe.KmsClient):
        def __init__(self, _: Any) -> None:
            super().__init__()

        def wrap_key(self, key_bytes: bytes, master_key_identifier: str) -> str:
            return base64.b64encode(keys[master_key_identifier].encode() + key_bytes).decode()

        def unwrap_key(  # type: ignore[override]  # the stubs say str; pyarrow wants bytes
                self, wrapped_key: str, master_key_identifier: str) -> bytes:
            return base64.b64decode(wrapped_key)[len(keys[master_key_identifier]):]

    config = pe.EncryptionConfiguration(
        footer_key="footer", column_keys={"col": list(columns)},
        plaintext_footer=plaintext_footer, encryption_algorithm="AES_GCM_V1")
    properties = pe.CryptoFactory(Kms).file_encryption_properties(
        pe.KmsConnectionConfig(custom_kms_conf=keys), config)
    return write(table, encryption_properties=properties, **kwargs)


def column_key_marked(data: bytes, column: int) -> bytes:
    """A plain object whose footer marks ``column``'s chunks as encrypted with a column
    key (``crypto_metadata``), with no encryption algorithm nor signature: what a fuzzer
    makes, on which pyarrow's metadata access aborts the process."""
    t = _thrift.thrift()
    fmd = thrift_footer(data)
    for group in fmd.row_groups:
        chunk = group.columns[column]
        chunk.crypto_metadata = t.ColumnCryptoMetaData(
            ENCRYPTION_WITH_COLUMN_KEY=t.EncryptionWithColumnKey(
                path_in_schema=list(chunk.meta_data.path_in_schema)))
    return with_thrift_footer(data, fmd)
