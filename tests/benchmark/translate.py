"""The benchmark's neutral query (``cases.Query``) in each engine's language: a polars
lazy query, SQL text (DuckDB), a pyarrow filter, and the reading of fetched bytes and the
combining of per-object partial answers that the download-then-read approaches share.
Each engine is imported where it is used, so a worker loads only its approach's."""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .cases import Predicate, Query

if TYPE_CHECKING:
    import polars as pl


def needed_columns(q: Query) -> list[str] | None:
    """Columns the query touches (output + predicates), or None for all."""
    if q.share_nonzero:
        return list(q.share_nonzero)
    if q.columns is None:
        return None
    cols = list(q.columns)
    cols += [p.column for p in q.where if p.column not in cols]
    return cols


def polars_query(lf: pl.LazyFrame, q: Query) -> pl.LazyFrame:
    import polars as pl

    ops: dict[str, Callable[[pl.Expr, Any], pl.Expr]] = {
        "<=": lambda c, v: c <= v,
        ">=": lambda c, v: c >= v,
        "<": lambda c, v: c < v,
        ">": lambda c, v: c > v,
        "==": lambda c, v: c == v,
        "!=": lambda c, v: c != v,
    }
    if q.where:
        lf = lf.filter(
            pl.all_horizontal([ops[p.op](pl.col(p.column), pl.lit(p.value)) for p in q.where])
        )
    if q.share_nonzero:
        group, value = q.share_nonzero
        return lf.group_by(pl.col(group).cast(pl.String)).agg(
            (pl.col(value) != 0).cast(pl.Float64).mean().alias("share")
        )
    if q.columns is not None:
        lf = lf.select(q.columns)
    return lf


def _sql_literal(v: Any) -> str:
    if isinstance(v, dt.datetime):
        return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return repr(v)


def sql_query(table: str, q: Query) -> str:
    sql_op = {"==": "="}
    where = " AND ".join(
        f'"{p.column}" {sql_op.get(p.op, p.op)} {_sql_literal(p.value)}' for p in q.where
    )
    if q.share_nonzero:
        g, v = q.share_nonzero
        select = f'CAST("{g}" AS VARCHAR) AS "{g}", avg(CAST("{v}" != 0 AS DOUBLE)) AS share'
        return (
            f"SELECT {select} FROM {table}"
            + (f" WHERE {where}" if where else "")
            + f' GROUP BY "{g}"'
        )
    cols = "*" if q.columns is None else ", ".join(f'"{c}"' for c in q.columns)
    return f"SELECT {cols} FROM {table}" + (f" WHERE {where}" if where else "")


def arrow_filter(preds: list[Predicate]) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    expr = None
    for p in preds:
        value = (
            pa.scalar(p.value, pa.timestamp("us")) if isinstance(p.value, dt.datetime) else p.value
        )
        field_ = pc.field(p.column)
        e = {
            "<=": field_ <= value,
            ">=": field_ >= value,
            "<": field_ < value,
            ">": field_ > value,
            "==": field_ == value,
            "!=": field_ != value,
        }[p.op]
        expr = e if expr is None else expr & e
    return expr


def read_buffer(data: bytes | io.BytesIO, fmt: str, q: Query) -> pl.DataFrame:
    """What the download-then-read approaches do with the bytes they fetched."""
    import polars as pl

    if fmt == "csv":
        return polars_query(pl.read_csv(data).lazy(), q).collect()
    return polars_query(pl.scan_parquet(data), q).collect()


def combine(frames: list[pl.DataFrame], q: Query) -> pl.DataFrame:
    """Per-object partial reads → the query's answer (re-aggregates the share)."""
    import polars as pl

    frame = pl.concat(frames, how="vertical_relaxed")
    if q.share_nonzero:
        return polars_query(frame.lazy(), q).collect()
    return frame


def per_object_query(q: Query) -> Query:
    """For a per-object read whose results are combined later: no aggregation yet."""
    if q.share_nonzero:
        return Query(list(q.share_nonzero), q.where)
    return q
