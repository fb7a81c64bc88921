"""A small predicate language for pruning, and its evaluation against column statistics.

The query layer turns the pushable part of a filter (or of SQL's WHERE) into these nodes.
Pruning asks one question of a row group (a page, a partition): *could any row satisfy the
predicate?* It answers with an over-approximation of the truth values the predicate can
take on the unit's rows (SQL's three values: true, false, null). A unit is skipped only
when *true* is impossible, so anything the statistics cannot decide keeps it.

Each comparison of a column with a constant is judged by polars itself, in the column's own
type: the statistics' minimum and maximum become a column of that type, and polars' SQL
compares them with the constant's own text (``c < 1.5``, ``c <= 1.5``, …), exactly as the
filter will compare the rows. Casts polars makes to compare (an integer column with a
float, a zone-less text with a zoned timestamp) are monotone, so ``lo`` and ``hi`` bound
what any row between them can give. A comparison polars refuses prunes nothing: the
filter then fails on the rows, typed, as it would without pruning.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

import polars as pl

from s3slice.query.pruning import bounds as B

CmpOp = Literal["=", "!=", "<", "<=", ">", ">="]
FLIP: dict[str, CmpOp] = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


literal_sql = B.literal_sql


@dataclasses.dataclass(frozen=True)
class Cmp:
    column: str
    op: CmpOp
    value: Any
    #: The constant's SQL text as polars runs it (None: :func:`literal_sql` of ``value``).
    sql: str | None = dataclasses.field(default=None, compare=False)

    @property
    def text(self) -> str | None:
        return self.sql if self.sql is not None else literal_sql(self.value)


@dataclasses.dataclass(frozen=True)
class Between:
    column: str
    low: Any
    high: Any
    sqls: tuple[str | None, str | None] = dataclasses.field(default=(None, None),
                                                             compare=False)


@dataclasses.dataclass(frozen=True)
class In:
    column: str
    values: tuple[Any, ...]
    sqls: tuple[str | None, ...] | None = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True)
class IsNull:
    column: str


@dataclasses.dataclass(frozen=True)
class And:
    items: tuple[Pred, ...]


@dataclasses.dataclass(frozen=True)
class Or:
    items: tuple[Pred, ...]


@dataclasses.dataclass(frozen=True)
class Not:
    item: Pred


@dataclasses.dataclass(frozen=True)
class Opaque:
    """A part the statistics cannot judge (function calls, column-to-column comparisons)."""


Pred: TypeAlias = Cmp | Between | In | IsNull | And | Or | Not | Opaque
TRUE = Opaque()


def _columns(pred: Pred, leaf: Callable[[Pred], bool]) -> set[str]:
    """Columns of the comparisons in ``pred`` for which ``leaf`` holds."""
    match pred:
        case Cmp(column=c) | Between(column=c) | In(column=c) | IsNull(column=c):
            return {c} if leaf(pred) else set()
        case And(items=items) | Or(items=items):
            return set().union(*(_columns(p, leaf) for p in items))
        case Not(item=item):
            return _columns(item, leaf)
    return set()


def columns_of(pred: Pred) -> set[str]:
    return _columns(pred, lambda _: True)


def equality_columns(pred: Pred) -> set[str]:
    """Columns compared with ``=`` or IN somewhere in ``pred`` (what a Bloom filter answers)."""
    return _columns(pred, lambda p: isinstance(p, In) or (isinstance(p, Cmp) and p.op == "="))


def without(pred: Pred, columns: set[str] | frozenset[str]) -> Pred:
    """``pred`` with every comparison of ``columns`` made opaque (they are judged
    elsewhere: a partition column is a constant of the object, whatever its file holds)."""
    match pred:
        case Cmp(column=c) | Between(column=c) | In(column=c) | IsNull(column=c):
            return TRUE if c in columns else pred
        case And(items=items):
            return And(tuple(without(p, columns) for p in items))
        case Or(items=items):
            return Or(tuple(without(p, columns) for p in items))
        case Not(item=item):
            return Not(without(item, columns))
    return pred


@dataclasses.dataclass(frozen=True, kw_only=True)
class ColumnStats:
    """What a row group's footer says of one column. ``None`` means "not recorded".

    ``min`` and ``max`` are values of the column's polars type ``dtype`` (inferred from
    them when not given); temporal ones may also be their physical integers."""

    num_rows: int
    min: Any = None
    max: Any = None
    null_count: int | None = None
    dtype: pl.DataType | None = None
    #: From a Bloom filter: True when the comparison's constant is certainly not among the
    #: values.
    excludes: Callable[[Cmp], bool] | None = dataclasses.field(default=None, compare=False)

    @property
    def all_null(self) -> bool:
        return self.null_count is not None and self.null_count >= self.num_rows > 0

    @property
    def may_be_null(self) -> bool:
        return self.null_count is None or self.null_count > 0

    @property
    def has_min_max(self) -> bool:
        return self.min is not None and self.max is not None

    @property
    def type(self) -> pl.DataType | None:
        """The polars type of ``min`` and ``max``."""
        if self.dtype is not None:
            return self.dtype
        return _inferred(self.min) if self.has_min_max else None


def _inferred(value: Any) -> pl.DataType | None:
    match value:
        case bool():
            return pl.Boolean()
        case int() if -(1 << 63) <= value < (1 << 63):
            return pl.Int64()
        case float():
            return pl.Float64()
        case str():
            return pl.String()
        case bytes():
            return pl.Binary()
        case dt.datetime():
            return pl.Datetime("us", None if value.tzinfo is None else "UTC")
        case dt.date():
            return pl.Date()
        case decimal.Decimal() if value.is_finite():
            return pl.Decimal(38, max(0, -int(value.as_tuple().exponent)))
    return None


# A set of possible truth values: (true, false, null).
Truth: TypeAlias = tuple[bool, bool, bool]
ANY: Truth = (True, True, True)


def _normal(pred: Pred) -> Pred:
    """``pred`` with BETWEEN and IN spelled as comparisons (polars runs them so)."""
    match pred:
        case Between(column=c, low=lo, high=hi, sqls=(lo_sql, hi_sql)):
            return And((Cmp(c, ">=", lo, lo_sql), Cmp(c, "<=", hi, hi_sql)))
        case In(column=c, values=values, sqls=sqls):
            if not values:
                return TRUE
            texts = sqls if sqls is not None else (None,) * len(values)
            return Or(tuple(Cmp(c, "=", v, s) for v, s in zip(values, texts, strict=True)))
        case And(items=items):
            return And(tuple(_normal(p) for p in items))
        case Or(items=items):
            return Or(tuple(_normal(p) for p in items))
        case Not(item=item):
            return Not(_normal(item))
    return pred


def _comparisons(pred: Pred) -> list[Cmp]:
    match pred:
        case Cmp():
            return [pred]
        case And(items=items) | Or(items=items):
            return [c for p in items for c in _comparisons(p)]
        case Not(item=item):
            return _comparisons(item)
    return []


#: Per (column, type): each bound's row in the judged frame, and per constant text the
#: results of the six comparisons at each row (the last row is NaN for a float type).
_Judged: TypeAlias = tuple[dict[Any, int], B.Answers, bool]


def _usable(s: ColumnStats | None) -> pl.DataType | None:
    """The type of a unit's bounds when they can be judged."""
    if s is None or not s.has_min_max:
        return None
    dtype = s.type
    if dtype is None or not (dtype.is_numeric() or dtype.is_temporal()
                             or dtype in (pl.String, pl.Binary, pl.Boolean)):
        return None
    if dtype.is_float() and (math.isnan(s.min) or math.isnan(s.max)):
        return None
    return dtype


@dataclasses.dataclass
class _Judgement:
    """polars' answers per (column, type), and the (column, type) of each unit's
    statistics that can be judged (by ``id``: they live as long as the judgement)."""

    answers: dict[tuple[str, pl.DataType], _Judged]
    kinds: dict[int, tuple[str, pl.DataType]]


def _judge(cmps: Sequence[Cmp], units: Sequence[Mapping[str, ColumnStats]]) -> _Judgement:
    """Every bound of every unit compared by polars with every constant of its column."""
    texts: dict[str, dict[str, Any]] = {}  # per column, each constant's text and value
    for c in cmps:
        if c.text is not None:
            texts.setdefault(c.column, {})[c.text] = c.value
    bounds: dict[tuple[str, pl.DataType], dict[Any, int]] = {}
    kinds: dict[int, tuple[str, pl.DataType]] = {}
    for unit in units:
        for column in texts:
            s = unit.get(column)
            dtype = _usable(s)
            if s is None or dtype is None:
                continue
            kinds[id(s)] = kind = (column, dtype)
            rows = bounds.setdefault(kind, {})
            rows.setdefault(s.min, len(rows))
            rows.setdefault(s.max, len(rows))
    answers: dict[tuple[str, pl.DataType], _Judged] = {}
    for (column, dtype), rows in bounds.items():
        found = B.compare_all(list(rows), dtype, sorted(texts[column].items()))
        if found is not None:
            answers[(column, dtype)] = (rows, *found)
    return _Judgement(answers, kinds)


def _leaf(c: Cmp, s: ColumnStats | None, judged: _Judgement) -> Truth:
    if s is None:
        return ANY
    if s.all_null:
        return (False, False, True)
    null = s.may_be_null
    if c.op == "=" and s.excludes is not None and s.excludes(c):
        return (False, True, null)
    kind = judged.kinds.get(id(s))
    text = c.text
    if kind is None or text is None or kind not in judged.answers:
        return ANY
    rows, results, nan = judged.answers[kind]
    at = results[text]
    lo_row, hi_row = rows[s.min], rows[s.max]
    found = B.possible(lambda op: B.at(at, lo_row, op), lambda op: B.at(at, hi_row, op), c.op)
    if found is None:
        return ANY
    true, false = found
    if nan:  # NaN is not in the statistics; any row may be NaN
        r = B.at(at, len(at) - 1, c.op)
        true, false = true or r is not False, false or r is not True
    return (true, false, null)


def _truth(pred: Pred, stats: Mapping[str, ColumnStats],
           judged: _Judgement) -> Truth:
    match pred:
        case Cmp(column=c):
            return _leaf(pred, stats.get(c), judged)
        case IsNull(column=c):
            s = stats.get(c)
            if s is None or s.null_count is None:
                return (True, True, False)
            return (s.null_count > 0, s.null_count < s.num_rows, False)
        case Not(item=item):
            t, f, n = _truth(item, stats, judged)
            return (f, t, n)
        case And(items=items):
            parts = [_truth(p, stats, judged) for p in items]
            return (all(p[0] for p in parts), any(p[1] for p in parts),
                    any(p[2] for p in parts))
        case Or(items=items):
            parts = [_truth(p, stats, judged) for p in items]
            return (any(p[0] for p in parts), all(p[1] for p in parts) if parts else False,
                    any(p[2] for p in parts))
    return ANY


def may_match_each(pred: Pred, units: Sequence[Mapping[str, ColumnStats]]) -> list[bool]:
    """For each unit (a row group, a page segment, an object's partition values), False
    only when no row of it can satisfy ``pred``. polars judges each column's bounds once
    for all units."""
    pred = _normal(pred)
    try:
        judged = _judge(_comparisons(pred), units)
    except B.Refused:
        return [True] * len(units)
    return [_truth(pred, unit, judged)[0] for unit in units]


def may_match(pred: Pred, stats: Mapping[str, ColumnStats]) -> bool:
    """False only when no row of the group can satisfy ``pred``."""
    return may_match_each(pred, [stats])[0]


def truth(pred: Pred, stats: Callable[[str], ColumnStats | None]) -> Truth:
    """Over-approximate the truth values ``pred`` can take on one unit."""
    columns = columns_of(pred)
    unit = {c: s for c in columns if (s := stats(c)) is not None}
    pred = _normal(pred)
    try:
        judged = _judge(_comparisons(pred), [unit])
    except B.Refused:
        return ANY
    return _truth(pred, unit, judged)
