"""A small predicate language for pruning, and its evaluation against column statistics.

The query layer turns the pushable part of a filter (or of SQL's WHERE) into these nodes.
Pruning asks one question of a row group: *could any row satisfy the predicate?* It answers
with an over-approximation of the truth values the predicate can take on the group's rows
(SQL's three values: true, false, null). A group is skipped only when *true* is impossible,
so anything the statistics cannot decide keeps the group.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import math
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeAlias

CmpOp = Literal["=", "!=", "<", "<=", ">", ">="]
FLIP: dict[str, CmpOp] = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclasses.dataclass(frozen=True)
class Cmp:
    column: str
    op: CmpOp
    value: Any


@dataclasses.dataclass(frozen=True)
class Between:
    column: str
    low: Any
    high: Any


@dataclasses.dataclass(frozen=True)
class In:
    column: str
    values: tuple[Any, ...]


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class ColumnStats:
    """What a row group's footer says of one column. ``None`` means "not recorded"."""

    num_rows: int
    min: Any = None
    max: Any = None
    null_count: int | None = None
    is_float: bool = False
    #: From a Bloom filter: True when a literal is certainly not among the values.
    excludes: Callable[[Any], bool] | None = dataclasses.field(default=None, compare=False)

    @property
    def all_null(self) -> bool:
        return self.null_count is not None and self.null_count >= self.num_rows > 0

    @property
    def may_be_null(self) -> bool:
        return self.null_count is None or self.null_count > 0

    @property
    def has_min_max(self) -> bool:
        return self.min is not None and self.max is not None


# A set of possible truth values: (true, false, null).
Truth: TypeAlias = tuple[bool, bool, bool]
ANY: Truth = (True, True, True)


def _coerce(value: Any, like: Any) -> Any:
    """``value`` converted to the type of the statistic ``like``; raise when it cannot be."""
    if value is None:
        raise TypeError("null literal")
    if isinstance(like, bool) or isinstance(value, bool):
        if isinstance(like, bool) and isinstance(value, bool):
            return value
        raise TypeError("bool mismatch")
    if isinstance(like, int | float) and not isinstance(like, bool):
        if isinstance(value, int | float):
            return value
        if isinstance(value, decimal.Decimal):
            return float(value)
        raise TypeError("number expected")
    if isinstance(like, decimal.Decimal):
        if isinstance(value, int | float | decimal.Decimal):
            return decimal.Decimal(str(value))
        raise TypeError("number expected")
    if isinstance(like, str):
        if isinstance(value, str):
            return value
        raise TypeError("string expected")
    if isinstance(like, bytes):
        if isinstance(value, str):
            return value.encode()
        if isinstance(value, bytes):
            return value
        raise TypeError("bytes expected")
    if isinstance(like, dt.datetime):
        parsed = value if isinstance(value, dt.datetime) else (
            dt.datetime.fromisoformat(value) if isinstance(value, str) else None)
        if parsed is None:
            if isinstance(value, dt.date):
                parsed = dt.datetime(value.year, value.month, value.day)
            else:
                raise TypeError("timestamp expected")
        if (parsed.tzinfo is None) != (like.tzinfo is None):
            # Naive and aware instants: read the naive one as UTC, as polars does.
            parsed = (parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None
                      else parsed.astimezone(dt.UTC).replace(tzinfo=None))
        return parsed
    if isinstance(like, dt.date):
        if isinstance(value, dt.datetime):
            raise TypeError("a timestamp against a date column is judged by the engine")
        if isinstance(value, dt.date):
            return value
        if isinstance(value, str):
            return dt.date.fromisoformat(value)
        raise TypeError("date expected")
    raise TypeError(f"no pruning for statistics of type {type(like).__name__}")


def _compare(stats: ColumnStats, op: str, raw: Any) -> Truth:
    if stats.all_null:
        return (False, False, True)
    null = stats.may_be_null
    if op == "=" and stats.excludes is not None and stats.excludes(raw):
        return (False, True, null)
    if not stats.has_min_max:
        return ANY
    if isinstance(raw, float) and math.isnan(raw):
        return ANY
    try:
        v = _coerce(raw, stats.min)
        lo, hi = stats.min, stats.max
        if stats.is_float and (math.isnan(lo) or math.isnan(hi)):
            return ANY
        true: bool
        false: bool
        match op:
            case "=":
                true, false = lo <= v <= hi, not (lo == hi == v)
            case "!=":
                true, false = not (lo == hi == v), lo <= v <= hi
            case "<":
                true, false = lo < v, hi >= v
            case "<=":
                true, false = lo <= v, hi > v
            case ">":
                true, false = hi > v, lo <= v
            case ">=":
                true, false = hi >= v, lo < v
            case _:  # pragma: no cover - CmpOp is closed
                return ANY
    except (TypeError, ValueError, decimal.InvalidOperation, OverflowError):
        return ANY
    if stats.is_float:
        # NaN is not in the statistics; polars orders NaN above every number, so NaN rows
        # can make >, >= and != true and the rest false.
        true = true or op in (">", ">=", "!=")
        false = True
    return (true, false, null)


def truth(pred: Pred, stats: Callable[[str], ColumnStats | None]) -> Truth:
    """Over-approximate the truth values ``pred`` can take on a row group."""
    match pred:
        case Cmp(column=c, op=op, value=v):
            s = stats(c)
            return ANY if s is None else _compare(s, op, v)
        case Between(column=c, low=lo, high=hi):
            return truth(And((Cmp(c, ">=", lo), Cmp(c, "<=", hi))), stats)
        case In(column=c, values=values):
            if not values:
                return ANY
            return truth(Or(tuple(Cmp(c, "=", v) for v in values)), stats)
        case IsNull(column=c):
            s = stats(c)
            if s is None or s.null_count is None:
                return (True, True, False)
            return (s.null_count > 0, s.null_count < s.num_rows, False)
        case Not(item=item):
            t, f, n = truth(item, stats)
            return (f, t, n)
        case And(items=items):
            parts = [truth(p, stats) for p in items]
            return (all(p[0] for p in parts), any(p[1] for p in parts),
                    any(p[2] for p in parts))
        case Or(items=items):
            parts = [truth(p, stats) for p in items]
            return (any(p[0] for p in parts), all(p[1] for p in parts) if parts else False,
                    any(p[2] for p in parts))
    return ANY


def may_match(pred: Pred, stats: Mapping[str, ColumnStats]) -> bool:
    """False only when no row of the group can satisfy ``pred``."""
    return truth(pred, stats.get)[0]
