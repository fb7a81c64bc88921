"""A data file's rows in the table's schema, by field id at every depth
(:mod:`s3slice.iceberg.columns`: a renamed column or nested field keeps its id, one added
later is its ``initial-default`` (else null) in older files, a dropped one is not read,
an ``int`` becomes a ``long``; a file without ids through the table's name mapping), with
its position deletes and equality deletes applied."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import IO, Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from s3slice.core.errors import ObjectFormatError
from s3slice.iceberg import columns as C
from s3slice.iceberg import manifests as M
from s3slice.iceberg import types as T
from s3slice.iceberg.metadata import Field, Schema
from s3slice.parquet.arrow import empty_table
from s3slice.parquet.plan import polars_types, row_group_stats
from s3slice.query.pruning import predicate as P

_POS = "__s3slice_pos"
_NONE: Mapping[int, Any] = {}


def _nodes(schema: pa.Schema, mapping: C.Mapping | None, uri: str) -> dict[int, C.Node]:
    """A data file's top-level fields by their Iceberg ids (:func:`columns.file_fields`)."""
    return {n.id: n for n in C.file_fields(schema, mapping, uri) if n.id is not None}


def footer(tail: bytes) -> pq.FileMetaData | None:
    """A file's footer from its last bytes, when they hold it whole (pyarrow would read
    64 KiB from the end for it)."""
    size = int.from_bytes(tail[-8:-4], "little") if len(tail) >= 8 else len(tail)
    if tail[-4:] != b"PAR1" or size + 8 > len(tail):
        return None
    try:
        return pq.read_metadata(io.BytesIO(tail))
    except (pa.ArrowException, OSError, ValueError):
        return None


def _open(source: bytes | IO[bytes], uri: str, metadata: pq.FileMetaData | None = None
          ) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(io.BytesIO(source) if isinstance(source, bytes) else source,
                              metadata=metadata)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise ObjectFormatError(f"not a readable Parquet file: {e}", uri=uri) from None


def _read(pf: pq.ParquetFile, names: Sequence[str], uri: str) -> pa.Table:
    try:
        return pf.read(columns=list(names))
    except (pa.ArrowException, OSError, ValueError) as e:
        raise ObjectFormatError(f"unreadable: {e}", uri=uri) from None


def _column(table: pa.Table, node: C.Node | None, field: Field, rows: int, uri: str,
            constants: Mapping[int, Any] = _NONE) -> pl.Series:
    """The file's column ``node`` as the table's ``field`` (nested fields by id, promoted
    types cast); when the file lacks it, the file's identity partition value of it (the
    spec's first rule of column projection: a file of a migrated Hive table may leave
    its partition columns out), else its ``initial-default``, else null."""
    dtype = field.dtype
    if node is None and field.id not in constants:
        defaults = pl.from_arrow(C.default_array(field.type, field.initial_default, rows, uri))
        assert isinstance(defaults, pl.Series)
        return defaults.alias(field.name)
    if node is None:
        value = T.natural(field.type, constants.get(field.id))
        try:
            return pl.Series(field.name, [value] * rows, dtype=dtype)
        except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
            raise ObjectFormatError(f"column {field.name!r}: the file's partition value "
                                    f"{value!r} is not a {field.type}", uri=uri) from None
    column = table.column(node.name)
    if isinstance(field.type, dict):  # nested: projected a row group (chunk) at a time
        column = pa.chunked_array([C.project(field.type, node, chunk, uri)
                                   for chunk in column.chunks or [column.combine_chunks()]])
    else:
        C.project(field.type, node, column, uri)  # refuses a nested column read as a primitive
    series = pl.from_arrow(column)
    assert isinstance(series, pl.Series)
    series = series.alias(field.name)
    if series.dtype == dtype:
        return series
    try:
        return series.cast(dtype)
    except pl.exceptions.PolarsError as e:
        raise ObjectFormatError(f"column {node.name!r} ({series.dtype} in the file) cannot "
                                f"be read as the table's {field.type}: {e}", uri=uri) from None


def _kept_groups(pf: pq.ParquetFile, predicate: P.Pred, file_names: dict[str, str | None],
                 rows_of: Sequence[int]) -> list[int]:
    """The row groups whose statistics may hold a row ``predicate`` matches (the columns
    by their table names; one the file lacks is null throughout it)."""
    md = pf.metadata
    columns = P.columns_of(predicate)
    wanted = {name: c for c in columns if (name := file_names.get(c)) is not None}
    types = polars_types(pf.schema_arrow)
    units = []
    for g in range(md.num_row_groups):
        found = row_group_stats(md, g, wanted, types)
        unit = {wanted[k]: v for k, v in found.items()}
        unit.update({c: P.ColumnStats(num_rows=rows_of[g], null_count=rows_of[g])
                     for c in columns if c in file_names and file_names[c] is None})
        units.append(unit)
    return [g for g, keep in enumerate(P.may_match_each(predicate, units)) if keep]


def read_rows(source: bytes | IO[bytes], uri: str, schema: Schema, names: Sequence[str],
              extra: Sequence[Field] = (), predicate: P.Pred = P.TRUE,
              metadata: pq.FileMetaData | None = None, mapping: C.Mapping | None = None,
              constants: Mapping[int, Any] = _NONE) -> tuple[pl.DataFrame, int, int]:
    """The file's rows as ``names`` of ``schema`` (and ``extra`` fields, for equality
    deletes, named ``__eq<id>``), with each row's position in the file; only the row groups
    whose statistics may match ``predicate`` (positions stay the file's). Also the number
    of row groups, and of those read. A file without field ids is read through the
    table's name ``mapping``; a column the file lacks is its value in ``constants`` (the
    file's identity partition values, by source field id) if there, else null."""
    pf = _open(source, uri, metadata)
    nodes = _nodes(pf.schema_arrow, mapping, uri)
    by_id = {fid: n.name for fid, n in nodes.items()}
    fields = [schema.by_name()[n] for n in names]
    md = pf.metadata
    rows_of = [md.row_group(g).num_rows for g in range(md.num_row_groups)]
    groups = list(range(md.num_row_groups))
    if predicate is not P.TRUE and groups:
        # (a column the file lacks is all null in it, unless a partition value or an
        # initial-default fills it: then its statistics are unknown here)
        file_names = {f.name: by_id.get(f.id) for f in schema.fields
                      if f.id in by_id or (f.id not in constants
                                           and f.initial_default is None)}
        groups = _kept_groups(pf, predicate, file_names, rows_of)
    wanted = list(dict.fromkeys(n for f in (*fields, *extra) if (n := by_id.get(f.id))))
    try:
        table = (pf.read_row_groups(groups, columns=wanted) if groups
                 else empty_table(pf.schema_arrow).select(wanted))
    except (pa.ArrowException, OSError, ValueError) as e:
        raise ObjectFormatError(f"unreadable: {e}", uri=uri) from None
    rows = table.num_rows
    columns = [_column(table, nodes.get(f.id), f, rows, uri, constants) for f in fields]
    columns += [_column(table, nodes.get(f.id), f, rows, uri, constants).alias(f"__eq{f.id}")
                for f in extra]
    frame = pl.DataFrame(columns, height=rows) if columns else pl.DataFrame(height=rows)
    starts = [sum(rows_of[:g]) for g in groups]
    positions = pl.concat([pl.int_range(s, s + rows_of[g], dtype=pl.Int64, eager=True)
                           for s, g in zip(starts, groups, strict=True)]) if groups else (
        pl.Series([], dtype=pl.Int64))
    return frame.with_columns(positions.alias(_POS)), md.num_row_groups, len(groups)


def positions_frame(data: bytes, uri: str) -> pl.DataFrame:
    """A position delete file's (file_path, pos) rows."""
    pf = _open(data, uri)
    frame = pl.from_arrow(_read(pf, ["file_path", "pos"], uri))
    assert isinstance(frame, pl.DataFrame)
    return frame.with_columns(pl.col("pos").cast(pl.Int64))


def positions_of(frame: pl.DataFrame, target: str) -> pl.Series:
    """The deleted row positions of the data file ``target``."""
    return frame.filter(pl.col("file_path") == target)["pos"]


def equality_rows(data: bytes, uri: str, file: M.DataFile, fields: dict[int, Field]
                  ) -> pl.DataFrame:
    """An equality delete file's rows, its columns named ``__eq<id>``."""
    pf = _open(data, uri)
    nodes = {n.id: n for n in map(C.by_ids, pf.schema_arrow) if n.id is not None}
    nested = [i for i in file.equality_ids if i not in fields]
    if nested:
        raise ObjectFormatError(f"equality deletes by field ids {nested}, which are no "
                                f"top-level column of the table (nested fields), are not "
                                f"supported; nothing was read", uri=uri)
    missing = [i for i in file.equality_ids if i not in nodes]
    if missing:
        raise ObjectFormatError(f"equality delete file lacks field ids {missing}", uri=uri)
    table = _read(pf, [nodes[i].name for i in file.equality_ids], uri)
    rows = table.num_rows
    return pl.DataFrame([_column(table, nodes[i], fields[i], rows, uri).alias(f"__eq{i}")
                         for i in file.equality_ids])


def apply_deletes(frame: pl.DataFrame, deleted: Sequence[pl.Series],
                  equalities: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """``frame`` less its deleted positions and its rows equal (null equal to null, as
    Iceberg compares them) to a row of an equality delete file; helper columns dropped."""
    if deleted:
        gone = pl.concat(list(deleted)).unique()
        frame = frame.filter(~pl.col(_POS).is_in(gone.implode()))
    for eq in equalities:
        frame = frame.join(eq.unique(), on=eq.columns, how="anti", nulls_equal=True)
    return frame.drop([c for c in frame.columns if c == _POS or c.startswith("__eq")])

