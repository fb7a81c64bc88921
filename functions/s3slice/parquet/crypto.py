"""Parquet modular encryption, found in a footer before any native reader sees it.

pyarrow aborts the process (a C++ exception thrown through code that cannot pass it on)
when asked for the metadata of a column chunk encrypted with a column key, and reading an
encrypted column's pages fails at best. s3slice holds no keys, so an object with
encrypted columns (or an encrypted footer, ``PARE``) is refused by name, with a typed
error, before pyarrow touches a column chunk.

The footer is walked here in its Thrift compact encoding, without building any object:
only the ``ColumnChunk`` fields that mark encryption (``crypto_metadata``,
``encrypted_column_metadata``) and the file's ``encryption_algorithm`` are looked for;
every other value is skipped by its type. The walk costs about 2 µs a footer byte in
Python (pyarrow parses one in some 50 ns), so it is made only where encryption may be
(:func:`may_be_encrypted`, a byte search): a plaintext footer of an encrypted file is
followed by its signature, bytes pyarrow's parse leaves over, and a column encrypted with
a column key (what aborts pyarrow) has a ``ColumnCryptoMetaData`` whose encoding starts
with the bytes ``2C 19`` (its field 2, a struct, then that struct's field 1, a list).
"""

from __future__ import annotations

from collections.abc import Callable

from s3slice.core.errors import ObjectFormatError

ENCRYPTED_FOOTER_MAGIC = b"PARE"

_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = (
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
#: Nesting beyond this is no Parquet footer (the deepest is a few levels).
_MAX_DEPTH = 64


class _Corrupt(Exception):
    pass


class _Walker:
    """A cursor over compact-encoded Thrift that skips values by type."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        try:
            b = self.data[self.pos]
        except IndexError:
            raise _Corrupt("the footer ends inside a value") from None
        self.pos += 1
        return b

    def varint(self) -> int:
        data, pos, shift, out = self.data, self.pos, 0, 0
        while True:
            try:
                b = data[pos]
            except IndexError:
                raise _Corrupt("the footer ends inside a number") from None
            pos += 1
            out |= (b & 0x7F) << shift
            if b < 0x80:
                self.pos = pos
                return out
            shift += 7
            if shift > 70:
                raise _Corrupt("a number too long")

    def field(self, last: int) -> tuple[int, int]:
        """The next field's (id, type) after field ``last``; type 0 at the struct's end."""
        b = self.byte()
        kind = b & 0x0F
        if kind == _STOP:
            return 0, _STOP
        delta = b >> 4
        if delta:
            return last + delta, kind
        z = self.varint()
        return (z >> 1) ^ -(z & 1), kind

    def header(self) -> tuple[int, int]:
        """A list's or set's (size, element type)."""
        b = self.byte()
        size = b >> 4
        if size == 15:
            size = self.varint()
        return size, b & 0x0F

    def skip(self, kind: int, depth: int = 0) -> None:
        if depth > _MAX_DEPTH:
            raise _Corrupt("values nested too deep")
        if kind in (_TRUE, _FALSE):
            return
        if kind == _BYTE:
            self.pos += 1
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self.pos += 8
        elif kind == _BINARY:
            n = self.varint()
            self.pos += n
        elif kind in (_LIST, _SET):
            size, elem = self.header()
            if elem in (_TRUE, _FALSE):
                self.pos += size
            else:
                for _ in range(size):
                    self.skip(elem, depth + 1)
        elif kind == _MAP:
            size = self.varint()
            if size:
                types = self.byte()
                for _ in range(size):
                    self.skip(types >> 4, depth + 1)
                    self.skip(types & 0x0F, depth + 1)
        elif kind == _STRUCT:
            self.struct(lambda fid, k: False, depth + 1)
        else:
            raise _Corrupt(f"a value of unknown type {kind}")
        if self.pos > len(self.data):
            raise _Corrupt("the footer ends inside a value")

    def struct(self, visit: Callable[[int, int], bool], depth: int = 0) -> None:
        """Walk one struct: ``visit(field id, type)`` reads the field's value and returns
        True, or returns False for it to be skipped."""
        last = 0
        while True:
            fid, kind = self.field(last)
            if kind == _STOP:
                return
            if not visit(fid, kind):
                self.skip(kind, depth)
            last = fid


def encryption(footer: bytes) -> tuple[bool, list[int]]:
    """Whether the compact-encoded ``FileMetaData`` in ``footer`` sets an encryption
    algorithm, and the indexes (in each row group's order) of the column chunks that are
    encrypted. Raises ``ValueError`` when the bytes are not such a structure."""
    w = _Walker(footer)
    algorithm = False
    columns: set[int] = set()

    def column_chunks(fid: int, kind: int) -> bool:  # RowGroup
        if fid != 1 or kind != _LIST:
            return False
        size, elem = w.header()
        for i in range(size):
            if elem != _STRUCT:
                w.skip(elem)
                continue

            def chunk(cid: int, ckind: int, i: int = i) -> bool:
                if cid in (8, 9):  # crypto_metadata, encrypted_column_metadata
                    columns.add(i)
                return False
            w.struct(chunk, 2)
        return True

    def top(fid: int, kind: int) -> bool:  # FileMetaData
        nonlocal algorithm
        if fid == 8:  # encryption_algorithm
            algorithm = True
            return False
        if fid != 4 or kind != _LIST:
            return False
        size, elem = w.header()
        for _ in range(size):
            if elem == _STRUCT:
                w.struct(column_chunks, 1)
            else:
                w.skip(elem)
        return True

    try:
        w.struct(top)
    except (_Corrupt, RecursionError) as e:
        raise ValueError(str(e)) from e
    return algorithm, sorted(columns)


#: ``ENCRYPTION_WITH_COLUMN_KEY`` (field 2 of the union, a struct) then its
#: ``path_in_schema`` (field 1, a list): in the compact encoding, with short field headers.
_COLUMN_KEY = b"\x2c\x19"


def may_be_encrypted(footer: bytes, parsed: int) -> bool:
    """Whether a footer (its ``FileMetaData`` bytes, of which a parse used ``parsed``) may
    mark encryption: bytes are left after the structure (a plaintext footer's signature),
    or the bytes of a column key's crypto metadata appear in it."""
    return parsed != len(footer) or _COLUMN_KEY in footer


def refuse_encrypted(footer: bytes, names: Callable[[int], str], uri: str) -> None:
    """An :class:`ObjectFormatError` naming the encrypted columns when the footer (its
    compact-encoded ``FileMetaData``) has any. A signed plaintext footer over columns none
    of which is encrypted reads as any other; a footer this walk cannot follow is left to
    pyarrow, which parsed it."""
    try:
        _, columns = encryption(footer)
    except ValueError:
        return
    if columns:
        named = ", ".join(dict.fromkeys(repr(names(i)) for i in columns))
        raise ObjectFormatError(
            f"encrypted Parquet columns {named} (Parquet modular encryption): s3slice holds "
            "no keys and reads no encrypted column", uri=uri)
