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

  An exact integer sum outside the answer's type (an Int64 or UInt64 sum beyond 64
  bits) is never wrapped (polars itself would answer the wrapped value): when the merged
  sum of any group leaves the type, that output answers Decimal(38, 0), the exact value
  (DuckDB's HUGEINT; Parquet and Arrow hold it, Int128 they do not). :func:`wide_sums`
  decides it from the merged sums, before the final plan runs, so the type depends on
  the data alone, never on the batching. ``SUM(CAST(x AS DECIMAL(38, 0)))`` asks for
  the wide answer always. A decimal's SUM and AVG are summed in parts
  (:func:`sum_parts`: the unscaled integer part cut at 10^20, and the fraction), so no
  running sum leaves 128 bits where the exact total fits; a total beyond 38 digits is
  refused before the final plan runs (:func:`wide_sums`). ``AVG`` divides the exact sum
  by the count once, in Float64 (Float32 for a Float32 argument, as polars), so an average
  of Int64 epoch nanoseconds is exact to the last bit of a double. ``STDDEV``/``VAR`` merge
  Float64 states (Float32 arguments are widened first) and answer polars' type; for an
  integer, decimal or boolean argument the merge's means come from the exact sums,
  relative to the group's least value (:func:`pooled_means`), so the merge adds no
  rounding of its own to polars' variance of each batch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import polars as pl
import sqlglot
from sqlglot import exp

from s3slice.core.errors import QueryError
from s3slice.query.split.sql import PolarsOrder, col, select_sql
from s3slice.query.sqlglot.sql_errors import DECIMAL_OVERFLOW

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
#: The range of each integer answer type of SUM: a merged sum outside it is answered in
#: :data:`WIDE_DECIMAL` instead (:func:`wide_sums`).
_BOUNDS = {"BIGINT": (-(2**63), 2**63 - 1), "UBIGINT": (0, 2**64 - 1), "UINT": (0, 2**32 - 1)}


def widened(arg: exp.Expr) -> exp.Expr:
    """``arg`` in the type its partial sum cannot wrap in (parenthesized: an operand)."""
    return exp.Paren(this=exp.Mul(this=exp.Paren(this=arg.copy()), expression=exp.Cast(
        this=exp.Literal.number(1), to=exp.DataType(this=exp.DataType.Type.INT128))))


#: Where a decimal's unscaled integer part is cut for its exact sum (:func:`sum_parts`).
_CUT = 10**20


def sum_parts(arg: exp.Expr) -> list[exp.Expr]:
    """The partial sums' arguments of an exact SUM of ``arg``, typed per batch by ``arg``'s
    type (:func:`resolve_partial`): for a decimal, its integer part cut at 10^20 (high and
    low, each an Int128 whose sum over any batch fits) and its fraction (``|f| < 1``), so
    no running sum leaves 128 bits where the exact total fits (polars' own decimal sum
    fails as soon as one does); for any other type ``arg`` widened (:func:`widened`)."""
    return [exp.Anonymous(this=MARK, expressions=[exp.Literal.string(part), arg.copy()])
            for part in ("hi", "lo", "frac")]


def _int128(value: exp.Expr) -> exp.Expr:
    return exp.Cast(this=value, to=exp.DataType(this=exp.DataType.Type.INT128))


def _part(part: str, arg: exp.Expr, dtype: pl.DataType | None) -> exp.Expr:
    if not isinstance(dtype, pl.Decimal):
        return widened(arg) if part == "hi" else _int128(exp.Null())
    whole = _int128(exp.Paren(this=arg.copy()))
    cut = _int128(exp.Literal.number(_CUT))
    if part == "hi":
        return widened(exp.Anonymous(this="DIV", expressions=[whole, cut]))
    if part == "lo":
        return exp.Mod(this=whole, expression=cut)
    return exp.Sub(this=exp.Paren(this=arg.copy()), expression=exp.Cast(
        this=whole.copy(), to=exp.DataType.build(f"DECIMAL(38, {dtype.scale})")))


def _whole(exprs: Sequence[exp.Expr], dtype: pl.DataType | None) -> exp.Expr:
    """The exact merged sum from the final plan's sums of :func:`sum_parts` (``exprs``)."""
    if len(exprs) != 3 or not isinstance(dtype, pl.Decimal):
        return exprs[0]
    hi, lo, frac = (e.copy() for e in exprs)
    whole = exp.Add(this=exp.Mul(this=hi, expression=_int128(exp.Literal.number(_CUT))),
                    expression=lo)
    return exp.Paren(this=exp.Add(this=exp.Cast(this=whole, to=exp.DataType.build(
        f"DECIMAL(38, {dtype.scale})")), expression=frac))


@functools.lru_cache(maxsize=128)
def _resolve_partial(template: str, types: tuple[pl.DataType, ...]) -> str:
    marks = iter(types)

    def visit(node: exp.Expr) -> exp.Expr:
        if not _is_mark(node):
            return node
        part, arg = node.expressions
        return _part(part.name, arg, next(marks))
    tree = sqlglot.parse_one(template, read=PolarsOrder).transform(visit)
    assert isinstance(tree, exp.Select)
    return select_sql(tree)


def resolve_partial(template: str, types_of: Callable[[list[str]], list[pl.DataType]]
                    ) -> str:
    """The partial plan's SQL for one batch: each :func:`sum_parts` placeholder of
    ``template`` resolved by its argument's type (``types_of``: the types of SQL
    expressions over the batch's columns)."""
    ordered: list[exp.Expr] = []  # the marks' arguments, in the order transform visits

    def visit(node: exp.Expr) -> exp.Expr:
        if _is_mark(node):
            ordered.append(node.expressions[1])
        return node
    sqlglot.parse_one(template, read=PolarsOrder).transform(visit)
    if not ordered:
        return template
    return _resolve_partial(template, tuple(types_of([a.sql(dialect=PolarsOrder, comments=False)
                                                      for a in ordered])))


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


def _sum_target(node: exp.Expr, types: dict[str, pl.DataType]) -> str | None:
    """The answer type of a ``sum`` placeholder ``node`` (None: polars' own)."""
    _, witness, *_ = node.expressions
    dtype = types.get(witness.name)
    return _SUM_TYPE.get(dtype.base_type()) if dtype is not None else None


def _is_mark(node: exp.Expr, kind: str | None = None) -> bool:
    return (isinstance(node, exp.Anonymous) and str(node.name).lower() == MARK
            and (kind is None or node.expressions[0].name == kind))


@functools.lru_cache(maxsize=128)
def _resolve(template: str, schema: tuple[tuple[str, pl.DataType], ...],
             wide: frozenset[str] = frozenset()) -> str:
    types = dict(schema)

    def visit(node: exp.Expr) -> exp.Expr:
        if not _is_mark(node):
            return node
        kind_node, witness, *exprs = node.expressions
        kind = kind_node.name
        dtype = types.get(witness.name)
        base = dtype.base_type() if dtype is not None else None
        if kind == "sum":
            value = _whole(exprs, dtype)
            target = _sum_target(node, types)
            return _cast(value, "WIDE" if target in _BOUNDS and exprs[0].sql() in wide
                         else target)
        if kind == "avg":
            first, count, *parts = exprs
            total = _whole([first, *parts], dtype)
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
          else exp.DataType.build("DECIMAL(38, 0)") if target == "WIDE"
          else exp.DataType(this=_SQL_TYPES[target]))
    return exp.Cast(this=value, to=to)


def resolve(template: str, schema: pl.Schema, wide: frozenset[str] = frozenset()) -> str:
    """The final plan's SQL for partials of ``schema``: each placeholder of ``template``
    replaced by its exact value cast to the answer's type (see the module's table); the
    integer sums named in ``wide`` (:func:`wide_sums`) as Decimal(38, 0)."""
    return _resolve(template, tuple(schema.items()), wide)


#: The bounds of :func:`_check`: an integer sum's text and its answer type's range, or a
#: decimal sum's scale (its integer part must stay below 10^(38 - scale)).
_Bound = tuple[str, int, int] | int


@functools.lru_cache(maxsize=128)
def _check(template: str, schema: tuple[tuple[str, pl.DataType], ...]
           ) -> tuple[str, tuple[_Bound, ...]] | None:
    """The query computing, per group, what the final plan's sums need checked before it
    runs (column ``c{i}`` per bound, Decimal(38, 0)): every integer sum exactly, and for
    a decimal sum or average the merged high part of its integer part (``l{i}`` the low
    part, :func:`sum_parts`); None when the query has neither."""
    types = dict(schema)
    tree = sqlglot.parse_one(template, read=PolarsOrder)
    found: dict[str, tuple[list[exp.Expr], _Bound]] = {}
    for node in tree.find_all(exp.Anonymous):
        if not _is_mark(node) or node.expressions[0].name not in ("sum", "avg"):
            continue
        kind, witness, first, *rest = node.expressions
        dtype = types.get(witness.name)
        target = _sum_target(node, types) if kind.name == "sum" else None
        if target in _BOUNDS:
            found.setdefault(first.sql(), ([node], (first.sql(), *_BOUNDS[str(target)])))
        elif isinstance(dtype, pl.Decimal) and len(rest) in (2, 3):  # sum_parts' sums
            found.setdefault(first.sql(), ([first, rest[-2]], dtype.scale or 0))
    if not found:
        return None
    check = exp.select(*[exp.alias_(e.copy(), f"{'cl'[j]}{i}") for i, (exprs, _) in
                         enumerate(found.values()) for j, e in enumerate(exprs)])
    source = tree.args.get("from_") or tree.args.get("from")
    assert isinstance(source, exp.From)
    check.set("from_", source.copy())
    if tree.args.get("group") is not None:
        check.set("group", tree.args["group"].copy())
    return (_resolve(select_sql(check), schema, frozenset(found)),
            tuple(bound for _, bound in found.values()))


def wide_sums(template: str, schema: pl.Schema, run: Callable[[str], pl.DataFrame]
              ) -> frozenset[str]:
    """The integer sums of ``template`` that some group's exact value takes outside the
    answer type (Int64, UInt64): the final plan answers those as Decimal(38, 0), exact
    (DuckDB's HUGEINT), where polars would wrap. ``run`` executes a query over the
    partials. The choice depends on the merged sums alone, never on the batching. A
    decimal sum whose exact value leaves decimal(38, s) raises :class:`QueryError` with
    polars' own words for it (:data:`DECIMAL_OVERFLOW`), which the engine names by the
    query's sums (:func:`~s3slice.query.sqlglot.sql_errors.sum_overflow`)."""
    found = _check(template, tuple(schema.items()))
    if found is None:
        return frozenset()
    sql, bounds = found
    frame = run(sql)
    wide = set()
    for i, bound in enumerate(bounds):
        values = [int(v) for v in frame[f"c{i}"] if v is not None]
        if isinstance(bound, int):  # a decimal: its integer part, exact in Python
            lows = [int(v) if v is not None else 0 for v in frame[f"l{i}"]]
            if any(abs(h * _CUT + low) >= 10 ** (38 - bound) for h, low in zip(
                    [int(v) if v is not None else 0 for v in frame[f"c{i}"]], lows,
                    strict=True)):
                raise QueryError(f"{DECIMAL_OVERFLOW}: a sum of a decimal column left the "
                                 "38 digits decimal(38, s) holds")
        elif values and (min(values) < bound[1] or max(values) > bound[2]):
            wide.add(bound[0])
    return frozenset(wide)


def wide_partials(lf: pl.LazyFrame, names: Sequence[str]) -> pl.LazyFrame:
    """A partial frame with its Int128 sum states (``names``) as Decimal(38, 0), which
    Parquet holds; a sum beyond 38 digits fails typed, never wraps."""
    if not names:
        return lf
    import polars.selectors as cs
    return lf.with_columns((cs.by_name(*names, require_all=False) & cs.by_dtype(pl.Int128))
                           .cast(WIDE_DECIMAL))
