"""The footer of a Parquet object: parsed by pyarrow from the object's last bytes, with
the bytes before it that the same suffix read brought (page index, Bloom filters)."""

from __future__ import annotations

import base64
import collections
import dataclasses
import struct
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from s3slice.core.errors import ObjectFormatError
from s3slice.core.ranges import Range
from s3slice.parquet import crypto as _crypto
from s3slice.parquet.arrow import zoned

MAGIC = b"PAR1"


FOOTER_TRAILER = 8  # 4-byte little-endian footer length + magic
#: A key with no .csv/.json extension is read as Parquet: what to do when it is not.
NOT_PARQUET_HINT = ("; a key without a .csv, .tsv, .json, .jsonl or .ndjson extension is "
                    "read as Parquet: for CSV or JSON, name the format (\"input\": \"csv\" "
                    "in the request, --input-format csv on the command line)")


class FooterTooLarge(Exception):
    """The tail read holds only part of the footer; ``needed`` bytes from the end will do."""

    def __init__(self, needed: int) -> None:
        super().__init__(needed)
        self.needed = needed


@dataclasses.dataclass(frozen=True, kw_only=True)
class Footer:
    metadata: pq.FileMetaData
    size: int  # object size
    length: int  # footer length, trailer included
    raw: bytes = dataclasses.field(repr=False)  # the last ``length`` bytes of the object
    #: The bytes just before the footer that its suffix read brought too: where writers put
    #: the page index and Bloom filters, which then cost no request.
    before: bytes = dataclasses.field(default=b"", repr=False)
    #: What readers derive from the footer once (the Thrift form of it), kept with it in
    #: the footer cache across warm invocations.
    memo: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @property
    def data_end(self) -> int:
        return self.size - self.length

    @property
    def before_range(self) -> Range:
        """The bytes of the object ``before`` holds."""
        return (self.data_end - len(self.before), self.data_end)

    @property
    def nbytes(self) -> int:
        """What keeping this footer costs (for the cache's bound)."""
        return self.length + len(self.before)

    @property
    def counts_agree(self) -> bool:
        """Whether the row groups' row counts add up to the file's (a damaged footer's may
        not: a reader placing rows by one and bounding them by the other goes astray)."""
        agree = self.memo.get("counts_agree")
        if agree is None:
            md = self.metadata
            agree = self.memo.setdefault("counts_agree", md.num_rows == sum(
                md.row_group(g).num_rows for g in range(md.num_row_groups)))
        return bool(agree)

    @property
    def leaf_tops(self) -> tuple[str, ...]:
        """The top-level column of each leaf column (see :func:`leaf_tops`)."""
        tops = self.memo.get("leaf_tops")
        if tops is None:
            tops = self.memo.setdefault("leaf_tops", leaf_tops(self.metadata))
        return tops  # type: ignore[no-any-return]

    @property
    def shared_paths(self) -> frozenset[str]:
        """Leaf paths that more than one leaf column has (a top-level ``user.id`` and the
        ``id`` of a struct ``user``): statistics or filters found by such a path may be
        another column's."""
        shared = self.memo.get("shared_paths")
        if shared is None:
            counts = collections.Counter(self.metadata.schema.column(i).path
                                         for i in range(self.metadata.num_columns))
            shared = self.memo.setdefault("shared_paths", frozenset(
                p for p, n in counts.items() if n > 1))
        return shared  # type: ignore[no-any-return]

    @property
    def schema_names(self) -> list[str]:
        return list(self.arrow_schema.names)

    @property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema the service reads the object as (see :func:`arrow_schema`)."""
        schema = self.memo.get("arrow_schema")
        if schema is None:
            schema = self.memo.setdefault("arrow_schema", arrow_schema(self))
        return schema  # type: ignore[no-any-return]


#: INT96 timestamps (Spark's) are read at microseconds, as Spark reads them: at
#: nanoseconds, pyarrow's default, dates past 2262-04-11 overflow.
INT96_UNIT = "us"


def arrow_schema(footer: Footer) -> pa.Schema:
    """The Arrow schema of the object as its readers decode it, INT96 at :data:`INT96_UNIT`
    in the time zone its writer's stored Arrow schema gives it (pyarrow's reader drops
    that zone for INT96, polars keeps it)."""
    reader = pq.ParquetFile(pa.BufferReader(MAGIC + footer.raw), metadata=footer.metadata,
                            coerce_int96_timestamp_unit=INT96_UNIT)
    schema = reader.schema_arrow
    md = footer.metadata
    tops = footer.leaf_tops
    int96 = {tops[i] for i in range(md.num_columns)
             if md.schema.column(i).physical_type == "INT96"}
    stored = stored_arrow_schema(md) if int96 else None
    for name in sorted(int96):
        if stored is None:
            break
        i, j = schema.get_field_index(name), stored.get_field_index(name)
        if i >= 0 and j >= 0:
            schema = schema.set(i, schema.field(i).with_type(
                zoned(schema.field(i).type, stored.field(j).type)))
    return schema


def stored_arrow_schema(md: pq.FileMetaData) -> pa.Schema | None:
    """The Arrow schema the writer stored in the footer (``ARROW:schema``), or None when
    there is none or it cannot be read."""
    value = (md.metadata or {}).get(b"ARROW:schema")
    if value is None:
        return None
    try:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(value)))
    except (ValueError, pa.ArrowException):
        return None


#: What is derived from a footer's metadata, by the metadata's identity (each entry keeps
#: its metadata, so that no other takes its id): decoders ask once per row group.
_DERIVED: dict[tuple[int, str], tuple[pq.FileMetaData, Any]] = {}
_DERIVED_MAX = 32


def _derived(md: pq.FileMetaData, name: str, make: Callable[[pq.FileMetaData], Any]) -> Any:
    key = (id(md), name)
    hit = _DERIVED.get(key)
    if hit is not None and hit[0] is md:
        return hit[1]
    value = make(md)
    if len(_DERIVED) >= _DERIVED_MAX:
        _DERIVED.clear()
    _DERIVED[key] = (md, value)
    return value


def nested_columns(md: pq.FileMetaData) -> set[str]:
    """Top-level columns that are structs, lists or maps (their leaves have a path)."""
    return set(_derived(md, "nested", _nested))


def _nested(md: pq.FileMetaData) -> frozenset[str]:
    tops = leaf_tops(md)
    return frozenset(tops[i] for i in range(md.num_columns) if md.schema.column(i).path != tops[i]
                     or md.schema.column(i).max_repetition_level)


def leaf_tops(md: pq.FileMetaData) -> tuple[str, ...]:
    """The top-level column each leaf column (by index) belongs to (see :func:`_leaf_tops`)."""
    return _derived(md, "leaf_tops", _leaf_tops)  # type: ignore[no-any-return]


def _leaf_tops(md: pq.FileMetaData) -> tuple[str, ...]:
    """The top-level column each leaf column (by index) belongs to.

    A leaf's dotted path cannot say it: a top-level name may hold a dot (``user.id``, a
    leaf of its own, beside ``user``, a struct whose ``id`` has the same path). The leaves
    are the schema's in order, so they are counted off each top-level field's Arrow type;
    where that does not add up (it always should), each leaf goes to the longest top-level
    name its path starts with.
    """
    paths = [md.schema.column(i).path for i in range(md.num_columns)]
    try:
        schema = md.schema.to_arrow_schema()
    except (pa.ArrowException, ValueError, TypeError):  # unreadable anyway: as the paths say
        return tuple(p.split(".")[0] for p in paths)
    tops = [f.name for f in schema for _ in range(_leaf_count(f.type))]
    if len(tops) == len(paths) and all(under(p, t) for p, t in zip(paths, tops, strict=True)):
        return tuple(tops)
    names = sorted(schema.names, key=len, reverse=True)
    return tuple(next((n for n in names if under(p, n)), p) for p in paths)


def under(path: str, name: str) -> bool:
    """Whether the dotted ``path`` is ``name`` or lies under it."""
    return path == name or path.startswith(name + ".")


def under_any(path: str, names: AbstractSet[str]) -> bool:
    """Whether the dotted ``path`` is one of ``names`` or lies under one (``a.b.c`` lies
    under ``a`` and ``a.b``): its prefixes looked up, not every name tried."""
    if path in names:
        return True
    i = path.find(".")
    while i != -1:
        if path[:i] in names:
            return True
        i = path.find(".", i + 1)
    return False


def _leaf_count(t: pa.DataType) -> int:
    """The Parquet leaf columns a field of Arrow type ``t`` is stored in."""
    if isinstance(t, pa.ExtensionType):
        return _leaf_count(t.storage_type)
    if pa.types.is_struct(t):
        return sum(_leaf_count(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _leaf_count(t.key_type) + _leaf_count(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or (
            pa.types.is_list_view(t) or pa.types.is_large_list_view(t)):
        return _leaf_count(t.value_type)
    if pa.types.is_dictionary(t):
        return _leaf_count(t.value_type)
    return 1


def parse_footer(tail: bytes, *, size: int, uri: str, keep_before: int = 0) -> Footer:
    """Parse the footer held by the last ``len(tail)`` bytes of an object of ``size`` bytes.

    pyarrow does the parsing; only the eight-byte trailer that frames it is read here. Up to
    ``keep_before`` bytes of ``tail`` before the footer are kept (``Footer.before``).
    """
    if size < len(MAGIC) + FOOTER_TRAILER:
        raise ObjectFormatError(f"not a Parquet object: {size} bytes is too small"
                                f"{NOT_PARQUET_HINT}", uri=uri)
    if len(tail) >= FOOTER_TRAILER and tail[-4:] == _crypto.ENCRYPTED_FOOTER_MAGIC:
        raise ObjectFormatError("an encrypted Parquet object (Parquet modular encryption, "
                                "its footer encrypted: PARE magic): s3slice holds no keys "
                                "and reads no encrypted object", uri=uri)
    if len(tail) < FOOTER_TRAILER or tail[-4:] != MAGIC:
        raise ObjectFormatError(f"not a Parquet object: no PAR1 magic at its end"
                                f"{NOT_PARQUET_HINT}", uri=uri)
    (footer_len,) = struct.unpack("<I", tail[-8:-4])
    total = footer_len + FOOTER_TRAILER
    if total + len(MAGIC) > size:
        raise ObjectFormatError(f"corrupt Parquet footer: it claims {footer_len} bytes in a "
                                f"{size}-byte object", uri=uri)
    if total > len(tail):
        raise FooterTooLarge(total)
    if len(tail) >= size:  # the read holds the whole object: its start, too
        check_head(tail, uri)
    framed = MAGIC + tail[len(tail) - total:]
    try:
        metadata = pq.read_metadata(pa.BufferReader(framed))
    except (OSError, ValueError, pa.ArrowException) as e:
        raise ObjectFormatError(f"corrupt Parquet footer: {e}", uri=uri) from e
    # Before anything asks pyarrow for a column chunk's metadata (an encrypted one aborts
    # the process): the columns are named from the schema, which is never encrypted.
    body = framed[len(MAGIC):-FOOTER_TRAILER]
    if _crypto.may_be_encrypted(body, metadata.serialized_size):
        _crypto.refuse_encrypted(body, lambda i: _leaf_path(metadata, i), uri)
    kept = min(keep_before, len(tail) - total)
    return Footer(metadata=metadata, size=size, length=total, raw=framed[len(MAGIC):],
                  before=bytes(tail[len(tail) - total - kept:len(tail) - total]))


def _leaf_path(md: pq.FileMetaData, i: int) -> str:
    try:
        return str(md.schema.column(i).path)
    except (IndexError, ValueError, pa.ArrowException):
        return f"#{i}"


def check_head(head: bytes | memoryview, uri: str, *, at: int = 0) -> None:
    """Bytes of the object from offset ``at`` must agree with the leading ``PAR1`` where
    they overlap it."""
    if at < len(MAGIC):
        n = min(len(MAGIC) - at, len(head))
        if bytes(head[:n]) != MAGIC[at:at + n]:
            raise ObjectFormatError("not a Parquet object: no PAR1 magic at its start", uri=uri)


def magic_checked(sink: Callable[[int, memoryview], None], uri: str
                  ) -> Callable[[int, memoryview], None]:
    """``sink``, checking the leading ``PAR1`` of any piece that holds some of its bytes
    (a piece may hold fewer than four: each is checked where it overlaps)."""
    def check(start: int, data: memoryview) -> None:
        check_head(data, uri, at=start)
        sink(start, data)
    return check


#: A read whose first range starts within this many bytes of the object's start fetches
#: that range from byte 0, so that the leading ``PAR1`` is checked. The first row group's
#: first column chunk starts right after it, at byte 4: a read that needs it pays 4 bytes
#: in a GET it makes anyway. A read that needs nothing there (a later row group or column
#: only) fetches no byte it does not need, and leaves the magic unchecked.
HEAD_REACH = len(MAGIC)


def reaching_head(ranges: Sequence[Range], sink: Callable[[int, memoryview], None],
                  uri: str, *, reach: int = HEAD_REACH
                  ) -> tuple[list[Range], Callable[[int, memoryview], None]]:
    """``ranges`` and ``sink`` for a fetch that checks the leading magic: the range that
    starts first, when it starts within ``reach`` bytes, is fetched from byte 0; the
    bytes before it are checked and never reach ``sink`` (which sees exactly the bytes of
    ``ranges``)."""
    out = list(ranges)
    if not out:
        return out, sink
    k = min(range(len(out)), key=lambda i: out[i][0])
    first = out[k][0]
    if first > reach:
        return out, sink
    out[k] = (0, out[k][1])

    def trimmed(start: int, data: memoryview) -> None:
        check_head(data, uri, at=start)
        if start < first:
            skip = min(first - start, len(data))
            start, data = start + skip, data[skip:]
            if not len(data):
                return
        sink(start, data)
    return out, trimmed


def footer_of(tail: bytes, size: int, before: Callable[[int, int], bytes], *, uri: str,
              keep_before: int) -> Footer:
    """The footer of an object of ``size`` bytes from its last bytes ``tail``; when the
    footer is longer, ``before(start, end)`` brings the bytes missing in front of the tail
    (and ``keep_before`` more, where the page index and Bloom filters are)."""
    try:
        return parse_footer(tail, size=size, uri=uri, keep_before=keep_before)
    except FooterTooLarge as more:
        start = max(0, size - more.needed - keep_before)
        whole = before(start, size - len(tail)) + tail
        return parse_footer(whole, size=size, uri=uri, keep_before=keep_before)
