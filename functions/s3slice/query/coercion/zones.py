"""A zone-less timestamp literal against a time-zone-aware column means UTC.

``TO_TIMESTAMP('2024-06-01T00:00:00Z')``, ``UTCNOW()``, ``CAST('…' AS TIMESTAMP)`` and
``TIMESTAMP '…'`` are polars timestamps without a zone (an offset, when the text has one,
is applied first: the literal is the UTC wall time). polars refuses to compare one with a
column of ``Datetime(unit, zone)``; S3 Select and DuckDB (with its default ``TimeZone``
``UTC``, as on Lambda) read it as UTC. So where such a literal meets a zoned column
(``=``, ``<>``, ``<``, ``<=``, ``>``, ``>=``, ``IS [NOT] DISTINCT FROM``, ``BETWEEN``,
``IN``), it is written as the text ``'… +00:00'``, which polars reads in the column's own
type: the same instant, at the column's unit (ns exact), in its zone; see
:func:`with_utc_literals`. A naive column compares wall times.

Run by :func:`s3slice.query.polars.sql.execute` once the frames (and so the columns'
types) are known: the filter, the query and the statistics' comparisons (pruning) are
rewritten by this one rule, so pruning stays exact.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

import polars as pl
import sqlglot
from sqlglot import exp

from s3slice.query.coercion.comparisons import rewrite_comparisons
from s3slice.query.coercion.time_text import (
    parse_timestamp_text,
    to_timestamp_sql,
    wall_time_sql,
    wall_time_text,
)
from s3slice.query.sqlglot.dialect import S3SelectDialect

_TIMESTAMP_TYPES = (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.DATETIME)


def with_utc_literals(sql: str, columns: Mapping[str, pl.Datetime]) -> str:
    """``sql`` with each timestamp literal (``CAST('…' AS TIMESTAMP)`` or ISO 8601 text)
    compared with one of the timestamp ``columns`` (or a ``DATE_ADD`` of one) read
    exactly, as UTC when it has no offset: a zoned column at milliseconds or microseconds
    is compared as ``CAST(ts AS TIMESTAMP)`` (its UTC wall time at microseconds: exact)
    with the literal's UTC wall time; a column at nanoseconds meets it as text polars
    reads in the column's own type (``'…+00:00'`` when zoned); a naive column at ms/us
    with a TIMESTAMP of the UTC wall time (polars reads an offset in text by dropping
    it). Unchanged when there is none."""
    tree = sqlglot.parse_one(sql, read=S3SelectDialect)

    def fix(column: exp.Expr, literals: list[exp.Expr],
            _: exp.Expr) -> tuple[exp.Expr, list[exp.Expr]] | None:
        dtype = _type_of(column, columns)
        texts = [_utc_text(e) for e in literals]
        if dtype is None or all(t is None for t in texts):
            return None
        zoned = dtype.time_zone is not None
        if zoned and dtype.time_unit != "ns":
            column = exp.cast(column.copy(), exp.DataType.Type.TIMESTAMP)
        out: list[exp.Expr] = []
        for e, t in zip(literals, texts, strict=True):
            if t is None:
                out.append(e)
            elif dtype.time_unit == "ns":  # text: polars reads it in the column's type
                out.append(exp.Literal.string(t + ("+00:00" if zoned else "")))
            else:
                out.append(exp.cast(exp.Literal.string(t), exp.DataType.Type.TIMESTAMP))
        return column, out

    if not rewrite_comparisons(tree, fix):
        return sql
    return tree.sql(dialect=S3SelectDialect, comments=False)


def _utc_text(node: exp.Expr) -> str | None:
    """The UTC wall time (``YYYY-MM-DD HH:MM:SS[.ffffff]``) a timestamp literal names: a
    ``CAST('…' AS TIMESTAMP)`` (zone-less: UTC) or a string (``'2024-06-01'``,
    ``'…T10:30Z'``, ``'…+02:00'``: an offset is applied, none means UTC); None for
    anything else, or a text Python does not read as ISO 8601 (polars then reads it)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Cast):
        if node.to.this not in _TIMESTAMP_TYPES:
            return None
        node = node.this
    if not (isinstance(node, exp.Literal) and node.is_string):
        return None
    text = str(node.this).strip()
    try:
        value = dt.datetime.fromisoformat(text.removesuffix("T"))
    except ValueError:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value.isoformat(sep=" ")


def _type_of(node: exp.Expr, columns: Mapping[str, pl.Datetime]) -> pl.Datetime | None:
    """The type of ``node`` when it is one of ``columns``, or one moved by an interval
    (DATE_ADD); else None."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column):
        return columns.get(node.name)
    if isinstance(node, exp.Add | exp.Sub) and _has_interval(node.expression):
        return _type_of(node.this, columns)
    return None


def _has_interval(node: exp.Expr) -> bool:
    return node.find(exp.Interval) is not None


def with_text_casts(sql: str, texts: frozenset[str],
                    stamps: frozenset[str] = frozenset()) -> str:
    """``sql`` with ``CAST(x AS TIMESTAMP)`` of a text read as S3 Select reads it, as
    ``TO_TIMESTAMP(x)`` does: a text column's value (one of ``texts``) or a string
    literal in S3 Select's ISO 8601 forms (``2024T``, ``…T10:30Z``, ``…+02:00``) is the
    UTC timestamp without zone of the instant it names (polars' own CAST refuses an
    offset). ``TO_TIMESTAMP`` of a column that is already a timestamp or a date (one of
    ``stamps``) is that value as a UTC timestamp without zone. Where such a text's
    timestamp is directly what a date part (``EXTRACT`` but ``EPOCH``) or a format
    (``STRFTIME``) reads, it is its own wall time instead (:func:`_with_wall_times`), as
    S3 Select reads it. Unchanged when there is none."""
    tree = sqlglot.parse_one(sql, read=S3SelectDialect)
    changed = _with_wall_times(tree, texts, stamps)

    def fix(node: exp.Expr) -> exp.Expr:
        nonlocal changed
        if not (isinstance(node, exp.Cast) and node.to.this in _TIMESTAMP_TYPES):
            return node
        parsed = _parsed_text(node)
        if parsed is not None and parsed.name in stamps:
            changed = True
            return exp.cast(parsed.copy(), exp.DataType.Type.TIMESTAMP)
        this = node.this
        if isinstance(this, exp.Column) and this.name in texts:
            changed = True
            return sqlglot.parse_one(to_timestamp_sql(this.sql()), read=S3SelectDialect)
        if isinstance(this, exp.Literal) and this.is_string:
            try:
                value = parse_timestamp_text(str(this.this))
            except ValueError:
                return node  # polars reads it, or says why not
            text = value.astimezone(dt.UTC).replace(tzinfo=None).isoformat(sep=" ")
            if text != this.this:
                changed = True
                return exp.cast(exp.Literal.string(text), exp.DataType.Type.TIMESTAMP)
        return node

    out = tree.transform(fix)
    return out.sql(dialect=S3SelectDialect, comments=False) if changed else sql


def _parsed_text(node: exp.Cast) -> exp.Column | None:
    """The column ``TO_TIMESTAMP(column)`` was expanded from (:func:`to_timestamp_sql`:
    a ``STRPTIME`` of ``REGEXP_REPLACE``s of it), or None."""
    inner = node.this
    if not (isinstance(inner, exp.Anonymous) and inner.name.upper() == "STRPTIME"
            and len(inner.expressions) == 2):
        return None
    text = inner.expressions[0]
    while isinstance(text, exp.RegexpReplace):
        text = text.this
    return text if isinstance(text, exp.Column) else None


def _with_wall_times(tree: exp.Expr, texts: frozenset[str], stamps: frozenset[str]) -> bool:
    """``tree`` changed in place so that a text's timestamp (``CAST(text AS TIMESTAMP)``
    or ``TO_TIMESTAMP(text)`` of a text column or literal) read directly by ``EXTRACT``
    (a part other than ``EPOCH``) or as ``STRFTIME``'s value is the text's own wall time
    (``…T00:30+02:00`` is 00:30), as S3 Select keeps the text's offset on its value. The
    offset follows (:func:`~s3slice.query.coercion.time_text.offset_seconds_sql` is the
    wall time less the UTC one); everything else (comparisons, ``DATE_ADD``, ``epoch``)
    reads the instant. Whether it changed anything."""
    changed = False
    for node in list(tree.find_all(exp.Extract, exp.Anonymous)):
        if isinstance(node, exp.Extract):
            if node.this.name.upper() == "EPOCH":
                continue
            arg = node.expression
        elif node.name.upper() == "STRFTIME" and node.expressions:
            arg = node.expressions[0]
        else:
            continue
        while isinstance(arg, exp.Paren):
            arg = arg.this
        wall = _wall_time(arg, texts, stamps)
        if wall is not None:
            arg.replace(wall)
            changed = True
    return changed


def _wall_time(node: exp.Expr, texts: frozenset[str],
               stamps: frozenset[str]) -> exp.Expr | None:
    """The wall time of ``node`` when it is a text's timestamp, or None."""
    if not (isinstance(node, exp.Cast) and node.to.this in _TIMESTAMP_TYPES):
        return None
    parsed = _parsed_text(node)
    if parsed is not None and parsed.name not in stamps:  # TO_TIMESTAMP(text column)
        return sqlglot.parse_one(wall_time_sql(parsed.sql()), read=S3SelectDialect)
    this = node.this
    if isinstance(this, exp.Column) and this.name in texts:
        return sqlglot.parse_one(wall_time_sql(this.sql()), read=S3SelectDialect)
    if isinstance(this, exp.Literal) and this.is_string:
        try:
            text = wall_time_text(str(this.this))
        except ValueError:
            return None  # polars reads it, or says why not
        return exp.cast(exp.Literal.string(text), exp.DataType.Type.TIMESTAMP)
    return None
