"""A query, analysed: what it reads, what it may prune by, and how polars runs it.

:mod:`.analyzer` makes an :class:`Analysis` (from polars' own parse of a plain filter, or
from sqlglot's of anything else); this module holds what every reader needs of one, and
imports neither parser. Execution is polars' own: polars SQL for the filter of each piece
and for the query over all of them, always through :mod:`.polars.sql`, which refuses text
that SQL parsers could read differently and any plan that reads beyond the given frames.
"""

from __future__ import annotations

import dataclasses
import re
import types
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from s3slice.core.errors import FilterSyntaxError, QueryError, UnknownColumnError, plain
from s3slice.core.model import Query
from s3slice.query.paths import Path, with_paths
from s3slice.query.polars.sql import check_text, execute
from s3slice.query.pruning import predicate as P
from s3slice.query.pruning.scan_safe import scan_where
from s3slice.query.source import SOURCE_TABLE as SOURCE_TABLE

#: S3 Select's date functions, which polars SQL lacks: a query that calls one is
#: translated (by :mod:`.sqlglot.dialect`) before polars runs it.
S3SELECT_FUNCTIONS = ("DATE_ADD", "DATE_DIFF", "TO_TIMESTAMP", "UTCNOW")


def uses_s3select_functions(text: str) -> bool:
    upper = text.upper()
    return any(name in upper for name in S3SELECT_FUNCTIONS)


def reads_the_clock(text: str) -> bool:
    """Whether the query text may call ``UTCNOW()``, whose value is fixed when the query is
    analysed (so such an analysis is never reused)."""
    return "UTCNOW" in text.upper()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Analysis:
    """A query, understood: its columns, its pruning predicate and how to run it."""

    query: Query
    columns: tuple[str, ...] | None  # None: every column
    referenced: frozenset[str]  # every name the query uses as a source column
    #: Names that are a source column or one of the query's own aliases (``SUM(v) AS v``
    #: orders by ``v``): fetched when the data has them, never an unknown column.
    optional: frozenset[str] = frozenset()
    #: Path expressions (``s.b.c``, ``s.tags[0]``), each computed as a column of its own;
    #: ``where_paths`` are those the row filter uses.
    paths: tuple[Path, ...] = ()
    where_paths: tuple[Path, ...] = ()
    #: Source columns the query names whole (not only through a path).
    whole: frozenset[str] = frozenset()
    predicate: P.Pred
    where: str | None  # the row filter polars applies to each piece as it is read
    sql: str | None  # the SQL run over the concatenated pieces (sources renamed)
    table_names: tuple[str, ...]
    #: One object's hive partition values and their types (see :mod:`s3slice.engine.sources`).
    #: Read-only when empty: an analysis is shared by every read of its query.
    partitions: Mapping[str, Any] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({}))
    partition_types: Mapping[str, pl.DataType] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({}))
    #: The partition values rule every row out: read the schema, no rows.
    pruned: bool = False

    def for_object(self, values: Mapping[str, Any], types: Mapping[str, pl.DataType], *,
                   pruned: bool = False) -> Analysis:
        if not values and not pruned:
            return self
        # A partition column's value is the object's, whatever its file holds (as in
        # polars and DuckDB): the file's statistics of that name never prune.
        return dataclasses.replace(self, partitions=values, partition_types=types,
                                   pruned=pruned,
                                   predicate=P.without(self.predicate, frozenset(values)))

    def fields(self) -> dict[str, frozenset[str]]:
        """Columns the query reads only through attribute paths (``s.b.c``, ``s.b.d[0]``),
        each with the dotted fields it needs (``b.c``, ``b.d``): their other fields need
        not be read. A column also named whole, or indexed at its root, is not here."""
        if self.columns is None:  # SELECT *: every column whole
            return {}
        whole = set(self.whole)
        out: dict[str, set[str]] = {}
        for path in self.paths:
            attributes: list[str] = []
            for step in path.steps:
                if not isinstance(step, str):
                    break
                attributes.append(step)
            if not attributes:
                whole.add(path.root)
            else:
                out.setdefault(path.root, set()).add(".".join([path.root, *attributes]))
        return {c: frozenset(f) for c, f in out.items() if c not in whole}

    @property
    def per_object(self) -> bool:
        """True when each object's result stands alone (no aggregate, order or limit)."""
        return self.sql is None and self.query.limit is None

    @property
    def early_limit(self) -> int | None:
        """Rows after which reading may stop: a limit with nothing else needing all rows."""
        return self.query.limit if self.sql is None else None

    def needed_columns(self, schema: Sequence[str], *, source: str) -> list[str]:
        """Columns to fetch, in schema order, after checking that every name exists."""
        names = set(schema) | set(self.partitions)
        missing = sorted(c for c in self.referenced if c not in names)
        if missing:
            raise UnknownColumnError(missing, source=source,
                                     available=[*schema, *self.partitions])
        # A partition column is a constant of the object, never fetched.
        stored = [c for c in schema if c not in self.partitions]
        if self.columns is None:
            return stored
        wanted = self.referenced | self.optional | set(self.columns)
        return [c for c in stored if c in wanted]

    def prefilter(self, lf: pl.LazyFrame) -> pl.LazyFrame:
        """The per-piece step: the row filter, and the limit when nothing else needs rows."""
        if self.partitions:
            lf = lf.with_columns(pl.lit(v, dtype=self.partition_types[k]).alias(k)
                                 for k, v in self.partitions.items())
        if self.where is not None:
            if self.where_paths:
                lf = with_paths(lf, self.where_paths)
            lf = _sql_filter(lf, self.where)
            if self.where_paths:
                lf = lf.drop([p.name for p in self.where_paths])
        return self._projected(lf) if self.sql is None else lf

    def scanned(self, lf: pl.LazyFrame) -> pl.DataFrame:
        """The per-piece step over ``lf``, a scan by a reader that skips row groups by
        their statistics (polars' Parquet reader), collected. The scan is handed only the
        part of the row filter its statistics judge exactly (:mod:`.pruning.scan_safe`); when that
        is not the whole filter, the whole filter then runs on the decoded frame, where no
        optimizer can push it back into the scan. polars' own errors are raised as they
        are (the readers fall back on them)."""
        if self.where is None:
            return self.prefilter(lf).collect()
        pushed, whole = scan_where(self.predicate, self.where)
        if whole:
            return self.prefilter(lf).collect()
        if pushed is not None:
            lf = _sql_filter(lf, pushed)
        return self.prefilter(lf.collect().lazy()).collect()

    def _projected(self, lf: pl.LazyFrame) -> pl.LazyFrame:
        """A ``columns``/``filter`` query's projection and limit."""
        if self.columns is not None:
            lf = lf.select(list(self.columns))
        if self.query.limit is not None:
            lf = lf.limit(self.query.limit)
        return lf

    def finish(self, lf: pl.LazyFrame) -> pl.LazyFrame:
        """The final step over all pieces: projection and limit, or the whole SQL."""
        if self.sql is None:
            return self._projected(lf)
        if self.paths:
            names = set(lf.collect_schema().names())
            lf = with_paths(lf, [p for p in self.paths if p.root in names])
        return execute(self.sql, dict.fromkeys(self.table_names, lf), field="sql")


def collect(lf: pl.LazyFrame) -> pl.DataFrame:
    """Run a lazy query; what polars rejects at run time becomes a :class:`QueryError`."""
    try:
        return lf.collect()
    except (pl.exceptions.ColumnNotFoundError, pl.exceptions.SchemaFieldNotFoundError) as e:
        raise QueryError(f"the query names a column the data does not have: "
                         f"{_first_line(e)}") from e
    except (pl.exceptions.InvalidOperationError, pl.exceptions.SchemaError,
            pl.exceptions.ComputeError, pl.exceptions.SQLSyntaxError,
            pl.exceptions.SQLInterfaceError, pl.exceptions.DuplicateError) as e:
        raise QueryError(_not_a_number(e) or "the query cannot run on this data: "
                         f"{_first_line(e)}") from e


_CONVERSION = re.compile(r"conversion from `str` to `(\w+)` failed in column '([^']*)' for "
                         r"\d+ out of \d+ values: (.*)")


def _not_a_number(e: BaseException) -> str | None:
    """polars' failed conversion of text to a number (a text column compared with a number
    literal, or cast to one), said with the column, its values and the comparison."""
    text = str(e).strip()
    found = _CONVERSION.match(text.splitlines()[0]) if text else None
    if found is None:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    where = lines[-1] if len(lines) > 1 else ""
    return (f"the text column {found.group(2)!r} holds {found.group(3)}, which is not a "
            f"number ({found.group(1)}), where the query reads it as one: {where}; "
            "compare it with text ('5'), or filter those rows out first")


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


_PIECE = "__s3slice_piece"


def _sql_filter(lf: pl.LazyFrame, where: str) -> pl.LazyFrame:
    """``lf``'s rows for which ``where`` holds, by polars' SQL engine (as the final SQL
    runs it: ``pl.sql_expr`` alone casts a string to a timestamp strictly, which polars
    no longer allows, where SQL parses it)."""
    check_text(where, field="filter")
    return execute(f'SELECT * FROM "{_PIECE}" WHERE ({where})', {_PIECE: lf},
                   field=f"filter {where!r}")


def check_filter(text: str) -> pl.Expr:
    """The filter as polars parses it; one polars cannot run fails now, before any byte is
    read."""
    check_text(text, field="filter", expression=True)
    try:
        return pl.sql_expr(text)
    except (pl.exceptions.SQLSyntaxError, pl.exceptions.SQLInterfaceError,
            pl.exceptions.InvalidOperationError) as e:
        raise FilterSyntaxError(f"filter {text!r}: {plain(str(e))}") from e
