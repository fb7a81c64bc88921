"""Many objects per query: glob patterns over keys, hive-style partition columns, and
partition pruning before any object is read.

A glob's ``*`` and ``?`` stay within one path segment, ``**`` spans segments, and
``[...]`` is a character class (``[!...]`` negated). Keys are listed under the pattern's
literal prefix and matched in full.

A key's directories of the form ``name=value`` (``year=2024/month=05/``) give the object
partition columns, URL-decoded, ``__HIVE_DEFAULT_PARTITION__`` being null. A column's type
is Int64 when every object's value is an integer, Float64 when every value is a number,
else String. Partition columns are appended to each object's rows and take precedence
over a file column of the same name; the query's predicate is evaluated on them first,
and an object it rules out is never read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote

import polars as pl

from s3slice._model import ObjectRef
from s3slice.query import predicate as P

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


def _dtype(values: Sequence[str | None]) -> pl.DataType:
    present = [v for v in values if v is not None]
    for dtype, convert in ((pl.Int64(), int), (pl.Float64(), float)):
        try:
            for v in present:
                convert(v)
        except ValueError:
            continue
        if present:
            return dtype
    return pl.String()


def _typed(value: str | None, dtype: pl.DataType) -> Any:
    if value is None:
        return None
    if dtype == pl.Int64():
        return int(value)
    if dtype == pl.Float64():
        return float(value)
    return value


def partitions(objects: Sequence[ObjectRef]) -> tuple[list[dict[str, Any]],
                                                      dict[str, pl.DataType]]:
    """Each object's typed partition values, and each partition column's type."""
    raw = [hive_values(o.key) for o in objects]
    names = list(dict.fromkeys(name for r in raw for name in r))
    dtypes = {name: _dtype([r.get(name) for r in raw]) for name in names}
    typed = [{name: _typed(r.get(name), dtypes[name]) for name in names} for r in raw]
    return typed, dtypes


def may_match(predicate: P.Pred, values: Mapping[str, Any]) -> bool:
    """False only when the predicate is false (or null) for every row given these
    partition values; other columns are unknown, so anything about them may hold."""
    stats = {name: P.ColumnStats(num_rows=1, min=v, max=v, null_count=int(v is None),
                                 is_float=isinstance(v, float))
             for name, v in values.items()}
    return P.may_match(predicate, stats)
