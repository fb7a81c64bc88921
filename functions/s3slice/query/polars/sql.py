"""The one way SQL text reaches polars: checked, then run over the registered frames only.

The sandbox decides on one parse (sqlglot's, or polars' own for a plain filter), and the
text polars runs is generated from that parse. Two tokenizers can still read one text
differently (sqlglot ends a ``--`` comment at ``\\r``, polars only at ``\\n``; dollar
quotes, ``E''`` strings, nested comments, backslashes), so before polars sees any text,
:func:`check_text` requires it to be in a lexical form that no tokenizer can read two
ways: no comments, no ``;``, ``$``, ``#``, backtick or backslash outside quotes, no
prefixed quotes (``E'…'``, ``U&'…'``), only space, tab and ``\\n`` between tokens, and no
control or line-separator character anywhere. In that form string literals, quoted
identifiers and words have the same bounds for both parsers, and the words can be checked:
no call of polars' SQL table functions (``read_parquet``, ``read_csv``, ``read_json``,
``read_ndjson``, ``read_ipc``: always available in polars 2.1, they cannot be switched off)
or of any name holding ``read_`` or ``scan_``, and, in a filter, no ``SELECT`` or
``VALUES``. ``pl.sql_expr`` runs a subquery's table function while it parses, so even a
parse by polars needs checked text.

Defence in depth: after planning, the plan polars resolved is compared with the frames
registered for the query, and a scan they do not hold is refused before its rows are read
(resolving a file scan reads the file's schema: the text check is what keeps polars from
opening anything at all).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping

import polars as pl

from s3slice.core.errors import FilterSyntaxError, ForbiddenQueryError, plain
from s3slice.query.source import FILE_FUNCTION_PREFIXES as FILE_FUNCTION_PREFIXES

#: Words that make a subquery; a filter is a condition on columns.
_SUBQUERY_WORDS = frozenset({"select", "values"})
_SPACE = frozenset(" \t\n")
_OPERATORS = frozenset("()[],.+-*/%=<>!|&^~:")
_QUOTES = frozenset("'\"")
_SCAN = re.compile(r"\bSCAN \[[^\n]*")
_QUOTED = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"")
_ISO_TEXT = re.compile(r"'\d{4}-\d\d-\d\d")
_CAST_TIMESTAMP = re.compile(r"\bAS\s+(TIMESTAMP|DATETIME)\b", re.IGNORECASE)
_NUMBER = re.compile(r"(?<![\w.])\.?\d")


def _unsafe_in_quotes(c: str) -> bool:
    """A character refused even inside quotes: controls (but tab and newline), and the
    line and paragraph separators some tokenizers end a comment or a line at."""
    if c in "\t\n":
        return False
    return unicodedata.category(c) in ("Cc", "Zl", "Zp")


def _word_char(c: str) -> bool:
    return c == "_" or c.isalnum()


def check_text(text: str, *, field: str, expression: bool = False) -> None:
    """Refuse (:class:`ForbiddenQueryError`) SQL text that two SQL tokenizers could read
    differently, or that calls a table function; ``expression``: a filter, where a
    subquery is refused too."""
    def refuse(why: str) -> ForbiddenQueryError:
        return ForbiddenQueryError(f"{field}: {why}; a query reads only its own sources, "
                                   "and its text must read the same to every SQL parser")

    i, n = 0, len(text)
    previous = ""  # the last character of the previous token
    while i < n:
        c = text[i]
        if c in _SPACE:
            i, previous = i + 1, c
            continue
        if c in _QUOTES:
            if previous and (_word_char(previous) or previous == "&"):
                raise refuse(f"a prefixed quote ({text[max(0, i - 2):i + 1]!r}) is not allowed")
            end = _closing(text, i)
            if end < 0:
                raise refuse(f"an unterminated {c} quote")
            bad = next((ch for ch in text[i + 1:end] if _unsafe_in_quotes(ch)), None)
            if bad is not None:
                raise refuse(f"the control character U+{ord(bad):04X} in a quoted text")
            if c == '"':
                _check_call(text[i + 1:end].replace('""', '"'), text, end + 1, refuse)
            i, previous = end + 1, c
            continue
        if _word_char(c):
            j = i
            while j < n and _word_char(text[j]):
                j += 1
            word = text[i:j].lower()
            _check_call(word, text, j, refuse)
            if expression and (word in _SUBQUERY_WORDS or (word[:1].isdigit()
                               and word.endswith(tuple(_SUBQUERY_WORDS)))):
                raise refuse(f"{word.upper()} (a subquery) is not allowed in a filter")
            i, previous = j, text[j - 1]
            continue
        if text.startswith(("--", "/*"), i):
            raise refuse("a comment is not allowed")
        if c not in _OPERATORS:
            raise refuse(f"the character {c!r} (U+{ord(c):04X}) is not allowed outside quotes")
        i, previous = i + 1, c


def reads_one_way(text: str, *, expression: bool = False) -> bool:
    """Whether ``text`` passes :func:`check_text`: only then may polars parse it."""
    try:
        check_text(text, field="sql", expression=expression)
    except ForbiddenQueryError:
        return False
    return True


def _closing(text: str, start: int) -> int:
    """The index of the quote that closes the one at ``start`` (a doubled quote is one
    character of the text), or -1."""
    q = text[start]
    i = start + 1
    while True:
        i = text.find(q, i)
        if i < 0:
            return -1
        if i + 1 < len(text) and text[i + 1] == q:
            i += 2
            continue
        return i


def _check_call(name: str, text: str, after: int,
                refuse: Callable[[str], ForbiddenQueryError]) -> None:
    """Refuse ``name(`` when ``name`` is a function that reads files."""
    j = after
    while j < len(text) and text[j] in _SPACE:
        j += 1
    # Any name that holds one: polars reads ``1read_csv`` as a number and then a name.
    if text.startswith("(", j) and any(p in name.lower() for p in FILE_FUNCTION_PREFIXES):
        raise refuse(f"the function {name} is not allowed")


def execute(sql: str, frames: Mapping[str, pl.LazyFrame], *,
            field: str = "sql") -> pl.LazyFrame:
    """``sql`` run lazily by polars over ``frames`` and nothing else, after
    :func:`check_text`; a plan that scans anything the frames do not is refused."""
    check_text(sql, field=field)
    sql = _typed_literals(sql, frames, field)
    ctx = pl.SQLContext(frames=dict(frames))
    try:
        lf = ctx.execute(sql, eager=False)
    except (pl.exceptions.SQLSyntaxError, pl.exceptions.SQLInterfaceError,
            pl.exceptions.InvalidOperationError) as e:
        raise FilterSyntaxError(f"{field}: {plain(' '.join(str(e).split()))}") from e
    _check_plan(lf, frames, field)
    return lf


def _typed_literals(sql: str, frames: Mapping[str, pl.LazyFrame], field: str) -> str:
    """``sql`` with its literals read by the types of the columns they meet: a zone-less
    timestamp as UTC against a zoned column (:mod:`~s3slice.query.coercion.zones`), a number
    against a text column as a comparison of numbers
    (:mod:`~s3slice.query.coercion.text_numbers`). The modules, and sqlglot, are imported only
    when the text names such a column and holds such a literal."""
    timestamps = "TIMESTAMP" in sql.upper() or _ISO_TEXT.search(sql) is not None
    numbers = _NUMBER.search(_QUOTED.sub("''", sql)) is not None
    if not timestamps and not numbers:
        return sql
    stamps: dict[str, pl.Datetime] = {}
    strings: set[str] = set()
    times: set[str] = set()  # timestamps and dates, for TO_TIMESTAMP of one
    for frame in frames.values():
        for name, dtype in frame.collect_schema().items():
            if isinstance(dtype, pl.Datetime | pl.Date):
                times.add(name)
            if timestamps and isinstance(dtype, pl.Datetime):
                stamps[name] = dtype
            elif dtype == pl.String:
                strings.add(name)
    zoned = {n: stamps[n] for n in _named(sql, set(stamps))}
    texts = _named(sql, strings) if numbers else set()
    # CAST(text AS TIMESTAMP): a text column or literal read as S3 Select reads it.
    casts = _CAST_TIMESTAMP.search(sql) is not None
    if not zoned and not texts and not casts:
        return sql
    from sqlglot.errors import ParseError, TokenError  # sqlglot only when needed

    from s3slice.query.coercion import text_numbers, zones
    try:
        out = (zones.with_text_casts(sql, frozenset(_named(sql, strings)),
                                     frozenset(_named(sql, times))) if casts else sql)
        out = zones.with_utc_literals(out, zoned) if zoned else out
        out = text_numbers.as_numbers(out, frozenset(texts)) if texts else out
    except (ParseError, TokenError):
        return sql  # a text sqlglot cannot re-read runs as it is
    if out != sql:
        check_text(out, field=field)
    return out


def _named(sql: str, names: set[str]) -> set[str]:
    """Those of ``names`` that ``sql`` holds as a word."""
    return {n for n in names
            if re.search(r"(?<![\w\"])" + re.escape(n) + r"(?![\w\"])", sql)
            or f'"{n}"' in sql}


def _scans(lf: pl.LazyFrame) -> set[str] | None:
    """The scans of ``lf``'s resolved plan; None when polars cannot resolve it (then the
    query fails when it runs, typed there, and reads nothing)."""
    try:
        plan = lf.explain(optimized=False)
    except Exception:  # noqa: BLE001 - any failure to plan: the run raises it, typed
        return None
    return {m.group(0) for m in _SCAN.finditer(plan)}


def _check_plan(lf: pl.LazyFrame, frames: Mapping[str, pl.LazyFrame], field: str) -> None:
    scans = _scans(lf)
    if not scans:
        return
    allowed: set[str] = set()
    for frame in frames.values():
        allowed |= _scans(frame) or set()
    foreign = sorted(scans - allowed)
    if foreign:
        raise ForbiddenQueryError(f"{field}: the query reads {foreign[0]!r}, which is not its "
                                  "source; a query reads only its own sources")
