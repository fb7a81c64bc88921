"""Parquet's Thrift structures, read with thriftpy2, as the format's own IDL
(``parquet.thrift``, from apache/parquet-format) defines them (:mod:`.thrift_spec` is the
IDL as data), and the column facts the page index and Bloom filters share. pyarrow does
not expose the page index's or Bloom filters' Thrift structures, so they are read here.
"""

from __future__ import annotations

import functools
import struct
import threading
import types
from typing import Any

import pyarrow.parquet as pq

from s3slice.core.errors import ObjectFormatError
from s3slice.parquet import footer as _footer

#: Plain encoding of the fixed-width physical types: struct format and width.
PLAIN = {"INT32": ("<i", 4), "INT64": ("<q", 8), "FLOAT": ("<f", 4), "DOUBLE": ("<d", 8)}


def is_text(col: pq.ColumnSchema) -> bool:
    """A BYTE_ARRAY column that holds UTF-8 text (pyarrow's statistics give ``str``)."""
    return (col.logical_type.type in ("STRING", "ENUM", "JSON")
            or col.converted_type == "UTF8")


def is_unsigned(col: pq.ColumnSchema) -> bool:
    """An integer column ordered and encoded as unsigned."""
    return col.logical_type.type == "INT" and "isSigned=false" in str(col.logical_type)


def column_positions(md: pq.FileMetaData) -> dict[str, int]:
    """Each leaf column's path, to its index in every row group."""
    return {md.schema.column(i).path: i for i in range(md.num_columns)}


_LOAD = threading.Lock()
MODULE = "s3slice_parquet_thrift"


@functools.cache
def _load() -> types.ModuleType:
    """The IDL's classes built from :mod:`.thrift_spec` as thriftpy2's parser builds them
    (``TPayload`` subclasses with ``thrift_spec`` and ``default_spec``; enums with their
    values as attributes), without parsing the IDL: thriftpy2's parser builds its LALR
    tables and parses the IDL on every load (0.08 CPU s, paid by every cold start's
    first job that reads a page index, Bloom filter or footer's Thrift form)."""
    from thriftpy2.thrift import TPayload, TType, gen_init

    from s3slice.parquet.thrift_spec import ENUMS, STRUCTS

    module = types.ModuleType(MODULE)
    for name, values in ENUMS.items():
        enum = type(name, (), {"__module__": MODULE, "_ttype": TType.I32, **values,
                               "_VALUES_TO_NAMES": {v: k for k, v in values.items()},
                               "_NAMES_TO_VALUES": dict(values)})
        setattr(module, name, enum)
    classes = {name: type(name, (TPayload,), {"__module__": MODULE, "_ttype": TType.STRUCT})
               for name in STRUCTS}

    def element(kind: Any) -> Any:  # a list's, set's or map's element spec
        if isinstance(kind, int):
            return kind
        if kind[0] in ("struct", "enum"):
            return (TType.STRUCT, classes[kind[1]]) if kind[0] == "struct" else (
                TType.I32, getattr(module, kind[1]))
        if kind[0] == "map":
            return (TType.MAP, (element(kind[1]), element(kind[2])))
        return (TType.LIST if kind[0] == "list" else TType.SET, element(kind[1]))

    for name, fields in STRUCTS.items():
        spec: dict[int, tuple[Any, ...]] = {}
        for fid, kind, field, required, _ in fields:
            if isinstance(kind, int):
                spec[fid] = (kind, field, required)
            else:
                code, arg = element(kind)
                spec[fid] = (code, field, arg, required)
        defaults = [(field, default) for _, _, field, _, default in fields]
        setattr(classes[name], "default_spec", defaults)  # noqa: B010 (as thriftpy2's parser)
        gen_init(classes[name], spec, defaults)
        setattr(module, name, classes[name])
    return module


def thrift() -> Any:
    """The Parquet Thrift module (built once; objects read in parallel wait for one build)."""
    with _LOAD:
        return _load()


def read_struct(struct_name: str, data: bytes, uri: str) -> Any:
    """One Thrift struct of the Parquet IDL, compact-encoded at the start of ``data``."""
    from thriftpy2.protocol import TCompactProtocolFactory
    from thriftpy2.utils import deserialize

    try:
        factory = TCompactProtocolFactory()  # type: ignore[no-untyped-call]
        return deserialize(getattr(thrift(), struct_name)(), data, factory)
    except Exception as e:  # any Thrift failure means a corrupt structure
        raise ObjectFormatError(f"corrupt Parquet {struct_name}: {e}", uri=uri) from e


def thrift_metadata(footer: _footer.Footer, uri: str) -> Any:
    """The footer as Thrift objects, parsed once per footer (and kept in the footer cache)."""
    fmd = footer.memo.get("thrift")
    if fmd is None:
        fmd = footer.memo.setdefault(
            "thrift", read_struct("FileMetaData", footer.raw[:-_footer.FOOTER_TRAILER], uri))
    return fmd


def encode(obj: Any) -> bytes:
    from thriftpy2.protocol import TCompactProtocolFactory
    from thriftpy2.utils import serialize

    return bytes(serialize(obj, TCompactProtocolFactory()))  # type: ignore[no-untyped-call]


def file_footer(meta: Any) -> bytes:
    """A ``FileMetaData`` as the end of a Parquet file: the compact-encoded metadata, its
    length (4 bytes, little-endian) and the closing magic."""
    body = encode(meta)
    return body + struct.pack("<I", len(body)) + _footer.MAGIC
