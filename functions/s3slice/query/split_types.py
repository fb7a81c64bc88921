"""Exact sums across batches: the wide partial states and the answer's type.

polars sums an integer column in its own type (``SUM`` of an Int32 column is an Int32, of
an Int64 an Int64) and wraps silently when the sum leaves the type's range. A split sums
each batch, then the batches' sums, so a wrap in any partial, or in the final sum of
the partials, is a wrong answer, whatever the batching. The split therefore:

- sums every partial in a type that cannot wrap: ``SUM(x * CAST(1 AS INT128))`` (an
  integer or boolean becomes Int128; a Float32 Float64; a decimal Decimal(38, s); a
  duration stays a duration), and stores an Int128 partial as Decimal(38, 0), which
  Parquet holds (the Distributed Map writes its partials as Parquet);
- keeps, beside each sum, a witness of the argument's own type (``MIN(x)``: its column has
  the argument's type even over no rows), and at the final step, when the partials'
  schema is known, casts the exact merged value to the answer's type (:func:`resolve`):

  =========================================  =================================================
  argument                                   ``SUM`` answers (``AVG``, ``STDDEV``, ``VAR``)
  =========================================  =================================================
  Int8/16/32, UInt8/16/32, Int64             Int64, exact (polars: Int64, but Int32 and UInt32
                                             stay themselves and wrap; the split widens them)
  UInt64                                     UInt64, exact
  Boolean                                    UInt32 (a count of true values), exact
  Float32                                    Float32, summed in Float64 then rounded once
  Float64, Decimal(p, s), Duration           polars' own type (Decimal(38, s): exact)
  =========================================  =================================================

  An exact sum outside the answer's type (an Int64 or UInt64 sum beyond 64 bits) is not
  wrapped: the cast is strict, and the query fails with a typed ``QueryError`` naming the
  value (polars itself would answer the wrapped value). ``SUM(CAST(x AS DOUBLE))`` or
  ``SUM(CAST(x AS DECIMAL(38, 0)))`` asks for a wider answer. ``AVG`` divides the exact sum
  by the count once, in Float64 (Float32 for a Float32 argument, as polars), so an average
  of Int64 epoch nanoseconds is exact to the last bit of a double. ``STDDEV``/``VAR`` merge
  Float64 states (Float32 arguments are widened first) and answer polars' type; for an
  integer, decimal or boolean argument the merge's means come from the exact sums,
  relative to the group's least value (:func:`pooled_means`), so the merge adds no
  rounding of its own to polars' variance of each batch.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import polars as pl
import sqlglot
from sqlglot import exp

from s3slice.query.split_sql import PolarsOrder, col, select_sql

#: The placeholder function of the final plan's template: ``MARK('kind', witness, e...)``.
MARK = "__s3slice_typed"

#: The partial type of an Int128 sum state: what Parquet can hold, and wide enough for a
#: sum of 64-bit integers over any number of rows a batch can have.
WIDE_DECIMAL = pl.Decimal(38, 0)

#: SUM's answer type by the argument's type (absent: polars' own, no cast).
_SUM_TYPE: dict[type[pl.DataType], str] = {
    pl.Int8: "BIGINT", pl.Int16: "BIGINT", pl.Int32: "BIGINT", pl.Int64: "BIGINT",
    pl.UInt8: "BIGINT", pl.UInt16: "BIGINT", pl.UInt32: "BIGINT", pl.UInt64: "UBIGINT",
    pl.Int128: "INT128", pl.Boolean: "UINT", pl.Float32: "REAL",
}
#: The SQL types the final plan casts to, as polars reads them (``REAL``: sqlglot writes
#: ``FLOAT``, which polars reads as Float64; ``FLOAT(24)`` is Float32 to both).
_SQL_TYPES = {
    "BIGINT": exp.DataType.Type.BIGINT, "UBIGINT": exp.DataType.Type.UBIGINT,
    "UINT": exp.DataType.Type.UINT, "INT128": exp.DataType.Type.INT128,
    "DOUBLE": exp.DataType.Type.DOUBLE,
}


def widened(arg: exp.Expr) -> exp.Expr:
    """``arg`` in the type its partial sum cannot wrap in (parenthesized: an operand)."""
    return exp.Paren(this=exp.Mul(this=exp.Paren(this=arg.copy()), expression=exp.Cast(
        this=exp.Literal.number(1), to=exp.DataType(this=exp.DataType.Type.INT128))))


def as_double(arg: exp.Expr) -> exp.Expr:
    """``arg`` in Float64 (a Float32 widened, an integer converted; a date still refused,
    as polars refuses its variance)."""
    return exp.Mul(this=exp.Paren(this=arg.copy()), expression=exp.Cast(
        this=exp.Literal.number(1), to=exp.DataType(this=exp.DataType.Type.DOUBLE)))


def typed(kind: str, witness: str, *exprs: exp.Expr) -> exp.Expr:
    """A placeholder in the final plan's template: ``kind`` (``sum``, ``avg``, ``var``) of
    ``exprs``, typed at the final step by the type of the partial column ``witness``."""
    return exp.Anonymous(this=MARK, expressions=[exp.Literal.string(kind), col(witness),
                                                 *exprs])


def pooled_means(by: list[exp.Column], g: str, mx: str, n: str, m: str, s: str, w: str
                 ) -> list[exp.Expr]:
    """A variance merge's columns over each partial (grouped by ``by``): ``mx``, the
    partial's mean, and ``g``, its group's pooled mean. For an integer, decimal or boolean
    argument both are taken from the exact sums ``s`` relative to the group's least value
    (the witnesses' MIN), so only differences of the size of the data's spread are rounded,
    however far from zero the values are (epoch nanoseconds); a float argument's are its
    partial means ``m`` (Float64) and their weighted mean."""
    def over(agg: exp.Expr) -> exp.Window:
        return exp.Window(this=agg, partition_by=[c.copy() for c in by] or None)

    def per(value: exp.Expr, count: exp.Expr) -> exp.Expr:
        return exp.Div(this=value, expression=exp.Nullif(this=count,
                                                         expression=exp.Literal.number(0)))
    least = widened(over(exp.Min(this=col(w))))
    float_g = per(over(exp.Sum(this=exp.Mul(this=col(n), expression=col(m)))),
                  over(exp.Sum(this=col(n))))
    exact_g = per(_cast(exp.Sub(this=over(exp.Sum(this=col(s))), expression=exp.Mul(
        this=over(exp.Sum(this=col(n))), expression=least)), "DOUBLE"),
        over(exp.Sum(this=col(n))))
    exact_m = per(_cast(exp.Sub(this=col(s), expression=exp.Mul(
        this=col(n), expression=least.copy())), "DOUBLE"), col(n))
    return [exp.alias_(typed("exact", w, float_g, exact_g), exp.to_identifier(g, quoted=True)),
            exp.alias_(typed("exact", w, col(m), exact_m), exp.to_identifier(mx, quoted=True))]


@functools.lru_cache(maxsize=128)
def _resolve(template: str, schema: tuple[tuple[str, pl.DataType], ...]) -> str:
    types = dict(schema)

    def visit(node: exp.Expr) -> exp.Expr:
        if not (isinstance(node, exp.Anonymous) and str(node.name).lower() == MARK):
            return node
        kind_node, witness, *exprs = node.expressions
        kind = kind_node.name
        dtype = types.get(witness.name)
        base = dtype.base_type() if dtype is not None else None
        if kind == "sum":
            [value] = exprs
            target = _SUM_TYPE.get(base) if base is not None else None
            return _cast(value, target)
        if kind == "avg":
            total, count = exprs
            if dtype is None or not (dtype.is_numeric() or base is pl.Boolean):
                return exp.Div(this=total, expression=count)  # e.g. a duration's mean
            mean = exp.Div(this=_cast(total, "DOUBLE"), expression=count)
            return _cast(mean, "REAL") if base is pl.Float32 else mean
        if kind == "exact":  # a variance's means: exact for integers, decimals, booleans
            inexact, exact = exprs
            whole = dtype is not None and (dtype.is_integer() or dtype.is_decimal()
                                           or base is pl.Boolean)
            chosen: exp.Expr = exact if whole else inexact
            return chosen
        [value] = exprs  # var: Float64 states
        return _cast(value, "REAL") if base is pl.Float32 else value

    tree = sqlglot.parse_one(template, read=PolarsOrder).transform(visit)
    assert isinstance(tree, exp.Select)
    return select_sql(tree)


def _cast(value: exp.Expr, target: str | None) -> exp.Expr:
    if target is None:
        return value
    to = (exp.DataType.build("FLOAT(24)", dialect=PolarsOrder) if target == "REAL"
          else exp.DataType(this=_SQL_TYPES[target]))
    return exp.Cast(this=value, to=to)


def resolve(template: str, schema: pl.Schema) -> str:
    """The final plan's SQL for partials of ``schema``: each placeholder of ``template``
    replaced by its exact value cast to the answer's type (see the module's table)."""
    return _resolve(template, tuple(schema.items()))


def wide_partials(lf: pl.LazyFrame, names: Sequence[str]) -> pl.LazyFrame:
    """A partial frame with its Int128 sum states (``names``) as Decimal(38, 0), which
    Parquet holds; a sum beyond 38 digits fails typed, never wraps."""
    if not names:
        return lf
    import polars.selectors as cs
    return lf.with_columns((cs.by_name(*names, require_all=False) & cs.by_dtype(pl.Int128))
                           .cast(WIDE_DECIMAL))
