"""S3 Select's timestamps as text, in the SQL polars runs: ``TO_TIMESTAMP`` of a text
column (its ISO 8601 forms, with ``Z`` or an offset ``±HH:MM``) and ``TO_STRING(timestamp,
pattern)`` with S3 Select's pattern letters.

Each builds SQL text (polars SQL's ``REGEXP_REPLACE``, ``STRPTIME``, ``STRFTIME``) from
the argument's own SQL, so that one expression serves a naive and a zoned column alike:

- ``TO_TIMESTAMP(text)`` is the instant the text names as a UTC timestamp without zone
  (a text without offset is UTC), as a ``TO_TIMESTAMP`` literal is: the two compare as
  instants. S3 Select keeps the text's own offset on the value (``EXTRACT(HOUR …)`` reads
  the wall time there); polars holds one zone per column, so where a date part or a
  format reads it directly (:func:`wall_time_sql`, placed by
  :func:`~s3slice.query.coercion.zones.with_text_casts`) it is the text's own wall time.
- ``TO_STRING(ts, pattern)`` formats the column's own wall time (a zoned column's in its
  zone, a naive one's as UTC) and its offset (``X``: ``Z`` at UTC, ``x``: ``+00``).

The lowest layer of the query package with :mod:`~s3slice.query.sqlglot.dialect`: it imports
nothing of it.
"""

from __future__ import annotations

import datetime as dt
import re

from s3slice.core.errors import FilterSyntaxError

#: The ISO 8601 forms S3 Select reads (``2024T``, ``2024-06T``, ``2024-06-01T``,
#: ``…T10:30Z``, ``…T10:30:15.123+02:00``), and ``2024-06-01 10:30:15`` (a space for the
#: ``T``), each rewritten to ``YYYY-MM-DDTHH:MM:SS[.f]±HH:MM``: (pattern, replacement).
_NORMALISE = (
    (r"^\s+|\s+$", ""),
    (r"^(\d{4})T$", r"\1-01-01T00:00:00+00:00"),
    (r"^(\d{4}-\d\d)T$", r"\1-01T00:00:00+00:00"),
    (r"^(\d{4}-\d\d-\d\d)T?$", r"\1T00:00:00+00:00"),
    (r"^(\d{4}-\d\d-\d\d) ", r"\1T"),
    (r"[Zz]$", "+00:00"),
    (r"^(\d{4}-\d\d-\d\dT\d\d:\d\d)([+-]|$)", r"\1:00\2"),
    (r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?)$", r"\1+00:00"),
)
_PARSED = "%Y-%m-%dT%H:%M:%S%.f%:z"
_OFFSET, _WALL = r"[+-]\d\d:\d\d$", "%Y-%m-%dT%H:%M:%S%.f"


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _normalised_sql(text: str) -> str:
    out = text
    for pattern, replacement in _NORMALISE:
        out = f"REGEXP_REPLACE({out}, {_quoted(pattern)}, {_quoted(replacement)})"
    return out


def to_timestamp_sql(text: str) -> str:
    """SQL for ``TO_TIMESTAMP(text)`` of a non-constant text: the UTC timestamp without
    zone of the instant it names. A text in none of S3 Select's forms fails the query."""
    return f"CAST(STRPTIME({_normalised_sql(text)}, {_quoted(_PARSED)}) AS TIMESTAMP)"


def wall_time_sql(text: str) -> str:
    """SQL for the wall time a non-constant timestamp text names, as a timestamp without
    zone: the local date and time as written, its offset dropped (``…T00:30+02:00`` is
    00:30). The same forms as :func:`to_timestamp_sql`, which it also fails on."""
    out = f"REGEXP_REPLACE({_normalised_sql(text)}, {_quoted(_OFFSET)}, '')"
    return f"CAST(STRPTIME({out}, {_quoted(_WALL)}) AS TIMESTAMP)"


def wall_time_text(text: str) -> str:
    """The wall time (``YYYY-MM-DD HH:MM:SS[.ffffff]``) a constant timestamp text names,
    its offset dropped, by :func:`parse_timestamp_text`'s rule. ValueError when it is in
    none of S3 Select's forms."""
    return parse_timestamp_text(text).replace(tzinfo=None).isoformat(sep=" ")


# --------------------------------------------------------------------------- TO_STRING
#: Pattern letters that are one strftime field each, by letter and count.
_STRFTIME = {
    ("y", 1): "%Y", ("y", 2): "%y", ("y", 3): "%Y", ("y", 4): "%Y",
    ("M", 1): "%-m", ("M", 2): "%m", ("M", 3): "%b", ("M", 4): "%B",
    ("d", 1): "%-d", ("d", 2): "%d", ("a", 1): "%p",
    ("h", 1): "%-I", ("h", 2): "%I", ("H", 1): "%-H", ("H", 2): "%H",
    ("m", 1): "%-M", ("m", 2): "%M", ("s", 1): "%-S", ("s", 2): "%S",
}
_LETTERS = "yMdahHmsSnXx"


def offset_seconds_sql(ts: str) -> str:
    """SQL for the offset of ``ts`` from UTC in whole seconds: its wall time less its UTC
    wall time (0 for a naive timestamp, read as UTC). ``STRFTIME`` gives a naive and a
    zoned value's wall time alike, where ``%z`` takes only a zoned one."""
    second = "'%Y-%m-%d %H:%M:%S'"
    wall = f"DATE_PART('epoch', CAST(STRFTIME({ts}, {second}) AS TIMESTAMP))"
    utc = f"DATE_PART('epoch', CAST(STRFTIME(CAST({ts} AS TIMESTAMP), {second}) AS TIMESTAMP))"
    return f"CAST({wall} - {utc} AS BIGINT)"


def _offset_sql(ts: str, letter: str, count: int) -> str:
    """``X``/``x`` (hours, and minutes when there are some), ``XX``/``XXXX``/``xx``/``xxxx``
    (``+HHMM``), ``XXX``/``XXXXX``/``xxx``/``xxxxx`` (``+HH:MM``); ``X`` writes ``Z`` for
    UTC."""
    off = offset_seconds_sql(ts)
    sign = f"CASE WHEN {off} < 0 THEN '-' ELSE '+' END"
    hours = f"LPAD(CAST(CAST(FLOOR(ABS({off}) / 3600) AS BIGINT) AS VARCHAR), 2, '0')"
    minutes = (f"LPAD(CAST(CAST(FLOOR((ABS({off}) % 3600) / 60) AS BIGINT) AS VARCHAR), 2, "
               "'0')")
    if count == 1:
        text = (f"CASE WHEN ABS({off}) % 3600 = 0 THEN {sign} || {hours} "
                f"ELSE {sign} || {hours} || {minutes} END")
    elif count in (2, 4):
        text = f"{sign} || {hours} || {minutes}"
    else:
        text = f"{sign} || {hours} || ':' || {minutes}"
    if letter == "X":
        return f"CASE WHEN {off} = 0 THEN 'Z' ELSE {text} END"
    return text


def _tokens(pattern: str) -> list[tuple[str, int] | str]:
    """The pattern as (letter, count) fields and literal texts; ``'…'`` quotes text and
    ``''`` is a quote."""
    out: list[tuple[str, int] | str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "'":
            if pattern.startswith("''", i):
                out.append("'")
                i += 2
                continue
            end = pattern.find("'", i + 1)
            if end < 0:
                raise FilterSyntaxError(f"TO_STRING: the pattern {pattern!r} has an "
                                        "unterminated quote")
            out.append(pattern[i + 1:end])
            i = end + 1
        elif c.isascii() and c.isalpha():
            j = i
            while j < n and pattern[j] == c:
                j += 1
            out.append((c, j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return out


def _field_sql(ts: str, letter: str, count: int, pattern: str) -> str | None:
    """SQL for one field that is not a strftime field (None when it is one)."""
    if (letter, count) in _STRFTIME:
        return None
    if letter == "M" and count == 5:
        return f"SUBSTRING(STRFTIME({ts}, '%B'), 1, 1)"
    if letter == "S" and 1 <= count <= 9:
        return f"SUBSTRING(STRFTIME({ts}, '%9f'), 1, {count})"
    if letter == "n" and count == 1:
        return f"CAST(CAST(STRFTIME({ts}, '%9f') AS BIGINT) AS VARCHAR)"
    if letter in "Xx" and 1 <= count <= 5:
        return _offset_sql(ts, letter, count)
    known = ", ".join(_LETTERS)
    raise FilterSyntaxError(f"TO_STRING: {letter * count!r} in the pattern {pattern!r} is no "
                            f"pattern S3 Select knows (letters {known}; quote text as "
                            "''text'')")


def to_string_sql(ts: str, pattern: str) -> str:
    """SQL for ``TO_STRING(ts, pattern)``: the pattern's strftime fields and literal text
    as one ``STRFTIME``, the others (``MMMMM``, ``S``…, ``n``, ``X``, ``x``) as SQL of
    their own, joined by ``||``."""
    parts: list[str] = []
    strftime = ""
    for token in _tokens(pattern):
        if isinstance(token, str):
            strftime += token.replace("%", "%%")
            continue
        letter, count = token
        field = _field_sql(ts, letter, count, pattern)
        if field is None:
            strftime += _STRFTIME[token]
            continue
        if strftime:
            parts.append(f"STRFTIME({ts}, {_quoted(strftime)})")
            strftime = ""
        parts.append(field)
    if strftime or not parts:
        parts.append(f"STRFTIME({ts}, {_quoted(strftime)})")
    return " || ".join(parts)


def parse_timestamp_text(text: str) -> dt.datetime:
    """The instant an ISO 8601 text in S3 Select's forms names, as an aware datetime (a
    text without offset is UTC): the same rule as :func:`to_timestamp_sql`, for a
    constant. ValueError when it is in none of them."""
    out = text
    for pattern, replacement in _NORMALISE:
        out = re.sub(pattern, replacement, out)
    return dt.datetime.fromisoformat(out)
