"""A result written as it is computed: its pieces are held while they are small, and once
they are not, appended to one Parquet file in the temporary directory, which is then
uploaded (in parts when large). A large result is never held whole, in memory or as
bytes; a small one is written as any other answer is."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from s3slice.core.errors import OutputError, contained
from s3slice.fetch.image import tmp_dir_error

#: polars' names of the Parquet codecs, as pyarrow knows them.
_CODECS = {"uncompressed": "none"}


class ParquetSpool:
    """A :class:`s3slice.readers.base.PieceSink` holding up to ``hold_bytes`` of pieces, then
    writing them and the rest to one Parquet file in ``directory``."""

    def __init__(self, directory: str, compression: str, *, hold_bytes: int) -> None:
        self.directory = directory
        self.compression = _CODECS.get(compression, compression)
        try:
            fd, name = tempfile.mkstemp(prefix="s3slice-out-", suffix=".parquet", dir=directory)
        except OSError as e:
            raise tmp_dir_error(directory, e) from e
        os.close(fd)
        self.path = Path(name)
        self.rows = 0
        self._writer: pq.ParquetWriter | None = None
        self._schema: pa.Schema | None = None
        self.hold_bytes = hold_bytes
        self._held: list[pl.DataFrame] = []
        self._held_bytes = 0

    def write(self, piece: pl.DataFrame) -> None:
        with contained(self._unwritable, native=(pa.ArrowException,)):
            size = int(piece.estimated_size())
            if self._writer is None and self._held_bytes + size <= self.hold_bytes:
                self._held.append(piece)
                self._held_bytes += size
            else:
                for held in self._held:
                    self._write(held)
                self._write(piece)
                self._held, self._held_bytes = [], 0
        self.rows += piece.height

    def _unwritable(self, text: str) -> OutputError:
        return OutputError(f"cannot write the result to {self.path}: {text}")

    def _write(self, piece: pl.DataFrame) -> None:
        table = piece.to_arrow()
        try:
            if self._writer is None:
                self._writer = self._open(table.schema)
            elif self._schema is not None and table.schema != self._schema:
                table = table.cast(self._schema)
            self._writer.write_table(table)
        except OSError as e:
            raise tmp_dir_error(self.directory, e) from e

    def _open(self, schema: pa.Schema) -> pq.ParquetWriter:
        self._schema = schema
        return pq.ParquetWriter(self.path, schema,
                                compression=self.compression)  # type: ignore[arg-type]

    def reset(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self.path.write_bytes(b"")
        self.rows = 0
        self._held, self._held_bytes = [], 0

    def finish(self, schema: pl.DataFrame) -> Path | pl.DataFrame:
        """The finished file; or, when every piece was held (a small answer), the answer
        itself: its pieces, or no rows of ``schema``'s columns."""
        if self._writer is None:
            return (pl.concat(self._held, how="vertical_relaxed") if self._held
                    else schema.clear())
        with contained(self._unwritable, native=(pa.ArrowException,)):
            return self._finish(schema)

    def _finish(self, schema: pl.DataFrame) -> Path:
        try:
            if self._writer is None:
                empty: pa.Table = schema.clear().to_arrow()
                self._writer = self._open(empty.schema)
                self._writer.write_table(empty)
            self._writer.close()
        except OSError as e:
            raise tmp_dir_error(self.directory, e) from e
        return self.path

    def close(self) -> None:
        """Remove the file (also after a failure)."""
        if self._writer is not None:
            self._writer.close()
        self.path.unlink(missing_ok=True)
