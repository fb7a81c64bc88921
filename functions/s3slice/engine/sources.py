"""Many objects per query: glob patterns over keys, hive-style partition columns, and
partition pruning before any object is read.

A glob's ``*`` and ``?`` stay within one path segment, ``**`` spans segments, and
``[...]`` is a character class (``[!...]`` negated). Keys are listed under the pattern's
literal prefix and matched in full.

A key's directories of the form ``name=value`` (``year=2024/month=05/``) give the object
partition columns, URL-decoded, ``__HIVE_DEFAULT_PARTITION__`` (or nothing) being null.
Their types are the ones polars' ``scan_parquet(hive_partitioning=True)`` infers (see
:func:`_column`). Partition columns are appended to each object's rows and take precedence
over a file column of the same name, as in polars and DuckDB: the query's predicate is
evaluated on their values first, an object it rules out is never read, and the file's
own statistics of such a column never prune.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote

import polars as pl

from s3slice.core.model import ObjectRef
from s3slice.query.pruning import predicate as P

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def glob_regex(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := pattern.find("]", i + 2)) > 0:
            body = pattern[i + 1:end]
            negate = body.startswith("!")
            body = re.escape(body[1:] if negate else body).replace("\\-", "-")
            out.append(f"[{'^/' if negate else ''}{body}]")
            i = end + 1
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


def listable(obj: ObjectRef) -> bool:
    """Whether a listed object is read: a folder marker (a key ending in ``/``) and an
    empty object (a Spark folder's ``_SUCCESS``) are skipped. Objects whose size is not
    known are read. The one rule for a prefix, a glob and a Distributed Map's items."""
    return not obj.key.endswith("/") and obj.size != 0


def hive_values(key: str) -> dict[str, str | None]:
    """``name=value`` directories of a key, in order (a later name wins)."""
    values: dict[str, str | None] = {}
    for segment in key.split("/")[:-1]:
        name, eq, value = segment.partition("=")
        if eq and name:
            decoded = unquote(value)
            values[unquote(name)] = None if decoded == HIVE_NULL else decoded
    return values


def _column(values: Sequence[str | None]) -> pl.Series:
    """One partition column's values typed as polars types hive partitions: its CSV
    reader's inference (with dates) over every value, so ``007`` is the integer 7,
    ``1.`` a float, ``2024-01-15`` a date and ``true`` a boolean, while ``+5``,
    ``1_000``, ``nan`` and ``0x10`` stay strings (Python's ``int()`` and ``float()``
    would accept them). An empty value is null in a column of another type, as in polars;
    values polars cannot read as one column (an integer past Int128, a time of day) stay
    strings."""
    present = [v for v in values if v]
    strings = pl.Series(values, dtype=pl.String)
    if not present:
        return strings
    text = "".join('"' + v.replace('"', '""') + '"\n' for v in present)
    try:
        parsed = pl.read_csv(io.BytesIO(text.encode()), has_header=False, quote_char='"',
                             try_parse_dates=True, infer_schema_length=None).to_series()
    except Exception:  # noqa: BLE001 - polars cannot read these values as one type
        return strings
    if parsed.dtype in (pl.String, pl.Time) or parsed.len() != len(present) or (
            parsed.null_count()):
        return strings
    out = iter(parsed.to_list())
    return pl.Series([next(out) if v else None for v in values], dtype=parsed.dtype)


def partitions(objects: Sequence[ObjectRef]) -> tuple[list[dict[str, Any]],
                                                      dict[str, pl.DataType]]:
    """Each object's typed partition values, and each partition column's type."""
    raw = [hive_values(o.key) for o in objects]
    names = list(dict.fromkeys(name for r in raw for name in r))
    columns = {name: _column([r.get(name) for r in raw]) for name in names}
    dtypes = {name: c.dtype for name, c in columns.items()}
    lists = {name: c.to_list() for name, c in columns.items()}
    typed = [{name: lists[name][i] for name in names} for i in range(len(raw))]
    return typed, dtypes


def may_match(predicate: P.Pred, values: Mapping[str, Any],
              types: Mapping[str, pl.DataType] | None = None) -> bool:
    """False only when the predicate is false (or null) for every row given these
    partition values; other columns are unknown, so anything about them may hold."""
    return may_match_each(predicate, [values], types or {})[0]


def may_match_each(predicate: P.Pred, objects: Sequence[Mapping[str, Any]],
                   types: Mapping[str, pl.DataType]) -> list[bool]:
    """:func:`may_match` of each object's partition values, polars judging them at once."""
    return P.may_match_each(predicate, [
        {name: P.ColumnStats(num_rows=1, min=v, max=v, null_count=int(v is None),
                             dtype=types.get(name)) for name, v in values.items()}
        for values in objects])
