"""S3 Select's SQL dialect: its date functions, which polars SQL lacks, parsed by sqlglot
into expressions polars runs; and the constants sqlglot literals stand for.

The lowest layer of the query package: it imports nothing of it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import sqlglot
from sqlglot import exp, generator, parser
from sqlglot.dialects.dialect import Dialect

from s3slice.core.errors import FilterSyntaxError
from s3slice.query.coercion.time_text import (
    offset_seconds_sql,
    parse_timestamp_text,
    to_string_sql,
    to_timestamp_sql,
)


def literal(node: exp.Expr) -> tuple[bool, Any]:
    """(True, value) when ``node`` is a constant the statistics can be compared with."""
    if isinstance(node, exp.Paren):
        return literal(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return True, node.this
        text = node.this
        try:
            return True, int(text)
        except ValueError:
            try:
                return True, float(text)
            except ValueError:
                return False, None
    if isinstance(node, exp.Neg):
        ok, v = literal(node.this)
        return (True, -v) if ok and isinstance(v, int | float) else (False, None)
    if isinstance(node, exp.Boolean):
        return True, bool(node.this)
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        to = node.to.this
        try:
            if to == exp.DataType.Type.DATE:
                return True, dt.date.fromisoformat(node.this.this)
            if to in (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.DATETIME):
                return True, dt.datetime.fromisoformat(node.this.this)
        except ValueError:
            return False, None
    return False, None


# S3 Select's date functions, which polars SQL lacks, parsed by sqlglot into expressions
# polars runs. Their date part is a bare word: year, month, day, hour, minute or second.
_SECONDS = {"day": 86400, "hour": 3600, "minute": 60, "second": 1}
_DATE_PARTS = ("year", "month", *_SECONDS)


def _date_part(node: exp.Expr, function: str) -> str:
    part = node.name.lower() if isinstance(node, exp.Column | exp.Var | exp.Literal) else ""
    part = part.removesuffix("s") if part.endswith("s") and part[:-1] in _DATE_PARTS else part
    if part not in _DATE_PARTS:
        raise FilterSyntaxError(f"{function}: the date part must be one of "
                                f"{', '.join(_DATE_PARTS)}, got {node.sql()!r}")
    return part


def _arity(args: Sequence[exp.Expr], n: int, function: str) -> None:
    if len(args) != n:
        raise FilterSyntaxError(f"{function} takes {n} argument(s), got {len(args)}")


def _date_add(args: Sequence[exp.Expr]) -> exp.Expr:
    """DATE_ADD(part, quantity, timestamp)."""
    _arity(args, 3, "DATE_ADD")
    part, quantity, ts = _date_part(args[0], "DATE_ADD"), args[1], args[2]
    if part in _SECONDS:
        return sqlglot.parse_one(f"({ts.sql()}) + ({quantity.sql()}) * INTERVAL '1' "
                                 f"{part.upper()}")
    ok, value = literal(quantity)
    if not ok or not isinstance(value, int) or isinstance(value, bool):
        raise FilterSyntaxError(f"DATE_ADD({part}, ...): the quantity must be a whole number "
                                f"literal, got {quantity.sql()!r}")
    months = abs(value) * (12 if part == "year" else 1)
    sign = "-" if value < 0 else "+"
    return sqlglot.parse_one(f"({ts.sql()}) {sign} INTERVAL '{months}' MONTH")


def _date_diff(args: Sequence[exp.Expr]) -> exp.Expr:
    """DATE_DIFF(part, t1, t2): t2 - t1 in whole parts, as S3 Select (MinIO) counts them:
    complete years (by month and day), calendar months, elapsed days, hours, minutes and
    seconds, each truncated toward zero."""
    _arity(args, 3, "DATE_DIFF")
    part = _date_part(args[0], "DATE_DIFF")
    if part in _SECONDS:  # elapsed parts: the instants
        return sqlglot.parse_one(f"CAST((DATE_PART('epoch', {args[2].sql()}) - "
                                 f"DATE_PART('epoch', {args[1].sql()})) "
                                 f"/ {_SECONDS[part]} AS BIGINT)")
    # The calendar parts: each value's own date (a text's wall time, _own_text)
    a, b = _own_text(args[1]).sql(), _own_text(args[2]).sql()
    years = f"(EXTRACT(YEAR FROM {b}) - EXTRACT(YEAR FROM {a}))"
    if part == "year":
        # Whole years, as S3 Select (MinIO) counts them: a year is complete when the later
        # date's month and day reach the earlier one's (the time of day is not counted).
        # (polars' month and day are 8-bit: widened before they are multiplied)
        day_a = f"(CAST(EXTRACT(MONTH FROM {a}) AS INT) * 100 + EXTRACT(DAY FROM {a}))"
        day_b = f"(CAST(EXTRACT(MONTH FROM {b}) AS INT) * 100 + EXTRACT(DAY FROM {b}))"
        later = f"DATE_PART('epoch', {b}) >= DATE_PART('epoch', {a})"
        return sqlglot.parse_one(
            f"CASE WHEN {later} THEN {years} - CASE WHEN {day_b} < {day_a} THEN 1 ELSE 0 END "
            f"ELSE {years} + CASE WHEN {day_a} < {day_b} THEN 1 ELSE 0 END END")
    return sqlglot.parse_one(f"({years} * 12 + EXTRACT(MONTH FROM {b}) "
                             f"- EXTRACT(MONTH FROM {a}))")


def _to_timestamp(args: Sequence[exp.Expr]) -> exp.Expr:
    """TO_TIMESTAMP(text): an ISO 8601 timestamp (``2024T``, ``2024-05-01T``,
    ``…T10:30Z``, ``…T10:30:15.5+02:00``) as the UTC timestamp without time zone of the
    instant it names (:mod:`~s3slice.query.coercion.time_text`)."""
    _arity(args, 1, "TO_TIMESTAMP")
    text = args[0]
    if isinstance(text, exp.Literal) and text.is_string:
        # A constant: parsed now, so that it can prune row groups like any literal.
        try:
            value = parse_timestamp_text(text.this)
        except ValueError as e:
            raise FilterSyntaxError(f"TO_TIMESTAMP: {text.this!r} is not an ISO 8601 "
                                    "timestamp") from e
        offset = value.utcoffset()
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        out = exp.cast(exp.Literal.string(value.isoformat(sep=" ")),
                       exp.DataType.Type.TIMESTAMP)
        if offset:  # its own wall time, for a date part or a format (_own_text)
            out.meta[_OWN_TEXT] = text.this
        return out
    return sqlglot.parse_one(to_timestamp_sql(text.sql()))


#: The text a ``TO_TIMESTAMP`` literal with an offset was read from (its node's meta).
_OWN_TEXT = "s3select_text"


def _own_text(node: exp.Expr) -> exp.Expr:
    """``node`` as ``CAST(text AS TIMESTAMP)`` of its own text when it is a ``TO_TIMESTAMP``
    literal with an offset (read as the UTC instant): a date part or a format reads its
    own wall time and offset there, as S3 Select does
    (:func:`~s3slice.query.coercion.zones.with_text_casts`). Else ``node``."""
    inner = node
    while isinstance(inner, exp.Paren):
        inner = inner.this
    text = inner.meta.get(_OWN_TEXT) if isinstance(inner, exp.Cast) else None
    if text is None:
        return node
    return exp.cast(exp.Literal.string(text), exp.DataType.Type.TIMESTAMP)


def _parse_extract(self: parser.Parser) -> exp.Expr | None:
    """EXTRACT(part FROM ts), ``ts`` by :func:`_own_text`."""
    node: exp.Expr | None = parser.Parser.FUNCTION_PARSERS["EXTRACT"](self)
    if isinstance(node, exp.Extract) and node.expression is not None:
        node.set("expression", _own_text(node.expression))
    return node


def _to_string(args: Sequence[exp.Expr]) -> exp.Expr:
    """TO_STRING(timestamp, pattern): the timestamp as text, by S3 Select's pattern
    letters (:func:`~s3slice.query.coercion.time_text.to_string_sql`)."""
    _arity(args, 2, "TO_STRING")
    pattern = args[1]
    if not (isinstance(pattern, exp.Literal) and pattern.is_string):
        raise FilterSyntaxError("TO_STRING: the pattern must be a text literal, got "
                                f"{pattern.sql()!r}")
    return sqlglot.parse_one(to_string_sql(f"({_own_text(args[0]).sql()})", pattern.this))


def _utcnow(args: Sequence[exp.Expr]) -> exp.Expr:
    """UTCNOW(): the time the query was analysed, once for the whole query."""
    _arity(args, 0, "UTCNOW")
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    return exp.cast(exp.Literal.string(now.isoformat(sep=" ")), exp.DataType.Type.TIMESTAMP)


class S3SelectDialect(Dialect):
    """sqlglot's default dialect plus S3 Select's date functions. ``ORDER BY`` puts nulls
    last, ascending and descending alike, as Athena (Trino) and DuckDB do, unless the
    query says ``NULLS FIRST``; the SQL polars runs always spells the null order out
    (polars' own default puts them first on ``DESC``)."""

    NULL_ORDERING = "nulls_are_last"

    class Parser(parser.Parser):
        # sqlglot's extension point is this class attribute.
        FUNCTIONS = {**parser.Parser.FUNCTIONS, "DATE_ADD": _date_add,  # noqa: RUF012
                     "DATE_DIFF": _date_diff, "TO_STRING": _to_string,
                     "TO_TIMESTAMP": _to_timestamp, "UTCNOW": _utcnow}
        FUNCTION_PARSERS = {**parser.Parser.FUNCTION_PARSERS,  # noqa: RUF012
                            "EXTRACT": _parse_extract}

    class Generator(generator.Generator):
        """The text polars runs is generated from the checked tree: spelled as polars reads
        it where sqlglot's default spelling is one polars lacks."""

        def ordered_sql(self, expression: exp.Ordered) -> str:
            # Always explicit: polars' default null order is not the query's.
            desc = " DESC" if expression.args.get("desc") else ""
            nulls = " NULLS FIRST" if expression.args.get("nulls_first") else " NULLS LAST"
            return f"{self.sql(expression, 'this')}{desc}{nulls}"

        def extract_sql(self, expression: exp.Extract) -> str:
            # S3 Select's TIMEZONE_HOUR and TIMEZONE_MINUTE: the value's offset from UTC
            # (a zoned column's; 0 for a naive one, which is UTC), truncated toward zero.
            part = expression.this.name.upper()
            if part not in ("TIMEZONE_HOUR", "TIMEZONE_MINUTE"):
                return super().extract_sql(expression)
            off = offset_seconds_sql(self.sql(expression, "expression"))
            hours = f"CAST({off} / 3600 AS BIGINT)"
            if part == "TIMEZONE_HOUR":
                return hours
            return f"CAST(({off} - {hours} * 3600) / 60 AS BIGINT)"

        def trim_sql(self, expression: exp.Trim) -> str:
            # polars reads TRIM(BOTH ' ' FROM x), not the default TRIM(x, ' ').
            if expression.expression is None:
                return super().trim_sql(expression)
            position = self.sql(expression, "position") or "BOTH"
            return (f"TRIM({position} {self.sql(expression, 'expression')} FROM "
                    f"{self.sql(expression, 'this')})")
