"""A split query as it runs: the partial plan over each batch and the final plan over the
partials (:class:`Split`, polars SQL only). Planning one is :mod:`.planner`'s, which needs
sqlglot; a query that cannot combine rows never needs it (:func:`combines_rows`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping

import polars as pl

from s3slice.core.errors import QueryError, S3SliceError
from s3slice.query.analysis import SOURCE_TABLE, Analysis
from s3slice.query.paths import with_paths
from s3slice.query.polars.sql import execute

#: The table the final plan reads the partials from.
PARTIALS_TABLE = "partials"


def combines_rows(analysis: Analysis) -> bool:
    """Whether the query may combine rows across pieces (SQL, or a ``limit``): only then
    has it a split (:func:`s3slice.query.analyzer.split_for`)."""
    return analysis.sql is not None or analysis.query.limit is not None


@dataclasses.dataclass(frozen=True)
class Split:
    """A query as a partial plan over each batch and a final plan over the partials."""

    sql: str  #: the original query
    partial_sql: str  #: over one batch's rows, table ``s3object``
    final_sql: str  #: over the concatenated partial frames, table ``partials``
    #: True for an aggregate (or GROUP BY) query: the partials are merged states; False for
    #: DISTINCT / ORDER BY / LIMIT over rows: the partials are candidate rows.
    aggregate: bool
    #: The partial columns holding exact sums: Int128 in the plan, Decimal(38, 0) in the
    #: partial frame (Parquet holds it); ``final_sql`` is then a template the partials'
    #: schema types (:mod:`.types`).
    wide: tuple[str, ...] = ()

    def partial(self, batch: pl.LazyFrame | pl.DataFrame) -> pl.LazyFrame:
        """The partial frame of one batch (any number of rows, none included)."""
        sql = self.partial_plan(batch.lazy().collect_schema())
        if not self.aggregate:
            return _execute(sql, {SOURCE_TABLE: batch.lazy()})
        from s3slice.query.split.types import wide_partials  # a split query has sqlglot
        return wide_partials(_execute(sql, {SOURCE_TABLE: batch.lazy()}), self.wide)

    def partial_plan(self, schema: Mapping[str, pl.DataType]) -> str:
        """The partial plan's SQL over a batch of ``schema``: an aggregate's template with
        each exact sum's parts typed by its argument (:func:`~.types.sum_parts`)."""
        if not self.aggregate:
            return self.partial_sql
        return _partial_plan(self.partial_sql, tuple(schema.items()))

    def final_plan(self, schema: Mapping[str, pl.DataType],
                   wide: frozenset[str] = frozenset()) -> str:
        """The final plan's SQL over partials of ``schema``: an aggregate's template with
        each exact sum, average and variance cast to its answer's type (the integer sums
        in ``wide`` as Decimal(38, 0): :func:`~.types.wide_sums`)."""
        if not self.aggregate:
            return self.final_sql
        from s3slice.query.split.types import resolve
        return resolve(self.final_sql, pl.Schema(schema), wide)

    def final(self, partials: Iterable[pl.LazyFrame | pl.DataFrame], *,
              schema: Mapping[str, pl.DataType] | None = None) -> pl.LazyFrame:
        """The answer from the partial frames of every batch, in batch order (at least one
        frame: the partial of an empty batch when there are no rows at all). With
        ``schema``, the schema of the batches, the columns are named and typed exactly as
        polars answers the original query over rows of that schema."""
        frames = [p.lazy() for p in partials]
        if not frames:
            raise ValueError("final: no partial frames; pass the partial of an empty batch")
        merged = pl.concat(frames, how="vertical_relaxed")
        kinds = merged.collect_schema()
        wide: frozenset[str] = frozenset()
        if self.aggregate:  # an integer sum beyond its type is answered wider, exact
            from s3slice.query.split.types import wide_sums
            merged = merged.collect().lazy()  # the partials are read once
            wide = wide_sums(self.final_sql, kinds, lambda sql: _execute(
                sql, {PARTIALS_TABLE: merged}).collect())
        answer = _execute(self.final_plan(kinds, wide), {PARTIALS_TABLE: merged})
        if schema is None:
            return answer
        want = self.output_schema(schema)
        have = answer.collect_schema().names()
        if len(have) != len(want):
            raise QueryError(f"the split answer has {len(have)} columns where the query has "
                             f"{len(want)}")
        types = answer.collect_schema().dtypes()
        return answer.select(pl.col(h).cast(_answer_type(a, t)).alias(n) for h, a, (n, t) in zip(
            have, types, want.items(), strict=True))

    def output_schema(self, schema: Mapping[str, pl.DataType]) -> pl.Schema:
        """The names and types polars gives the original query over rows of ``schema``."""
        empty = pl.DataFrame(schema=dict(schema)).lazy()
        return _execute(self.sql, {SOURCE_TABLE: empty}).collect_schema()

    def run(self, batches: Iterable[pl.LazyFrame | pl.DataFrame], *,
            schema: Mapping[str, pl.DataType] | None = None) -> pl.LazyFrame:
        """Both steps in one process: the single-invocation path over many objects."""
        frames = [self.partial(b).collect() for b in batches]
        if not frames:
            if schema is None:
                raise ValueError("run: no batches and no schema to make an empty one from")
            frames = [self.partial(pl.DataFrame(schema=dict(schema))).collect()]
        return self.final(frames, schema=schema)


@functools.lru_cache(maxsize=128)
def _partial_plan(template: str, schema: tuple[tuple[str, pl.DataType], ...]) -> str:
    """:meth:`Split.partial_plan`, once per query and batch schema (a warm function reads
    many objects of one schema)."""
    from s3slice.query.split.types import resolve_partial  # a split query has sqlglot
    empty = pl.DataFrame(schema=dict(schema)).lazy()

    def types_of(exprs: list[str]) -> list[pl.DataType]:
        sql = "SELECT " + ", ".join(f'{e} AS "a{i}"' for i, e in enumerate(exprs))
        return _execute(f"{sql} FROM {SOURCE_TABLE}",
                        {SOURCE_TABLE: empty}).collect_schema().dtypes()
    return resolve_partial(template, types_of)


def _answer_type(have: pl.DataType, polars: pl.DataType) -> pl.DataType:
    """The type of an answer's column: polars', but an exact integer sum where polars' type
    would wrap (an Int64 sum of Int32 values, a Decimal(38, 0) sum beyond Int64:
    :mod:`.types`) keeps its own."""
    if polars.is_integer() and (have.is_decimal() or (
            have.is_integer() and _bits(have) > _bits(polars))):
        return have
    return polars


def _bits(t: pl.DataType) -> int:
    bits: dict[type[pl.DataType], int] = {pl.Int64: 64, pl.UInt64: 64, pl.Int128: 128}
    return bits.get(t.base_type(), 32)


def _execute(sql: str, frames: Mapping[str, pl.LazyFrame]) -> pl.LazyFrame:
    return execute(sql, frames, field="sql")


def used_split(analysis: Analysis, split: Split | None, objects: int,
               rows: pl.DataFrame) -> Split | None:
    """``split`` as one process's read of ``objects`` uses it, over their ``rows``: never
    without objects, nor for one object's rows (they stand alone), but an aggregate's even
    for one object, so that its sums are exact whatever the batching
    (:mod:`.types`); and not when its partial plan cannot run on rows of this schema
    (``AVG`` of a date has no exact sum): polars then answers the rows whole."""
    if split is None or objects == 0 or (objects == 1 and not split.aggregate):
        return None
    try:
        partial_step(analysis, split, rows.clear().lazy()).collect_schema()
    except (S3SliceError, pl.exceptions.PolarsError):
        return None
    return split


def partial_step(analysis: Analysis, split: Split, rows: pl.LazyFrame) -> pl.LazyFrame:
    """The partial plan over one batch of ``rows`` (the analysis's path columns added, as
    :meth:`Analysis.finish` adds them)."""
    if analysis.paths:
        names = set(rows.collect_schema().names())
        rows = with_paths(rows, [p for p in analysis.paths if p.root in names])
    return split.partial(rows)
