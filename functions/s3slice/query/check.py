"""A query checked as the function parses and sandboxes it, without polars: what a
deployment can refuse before anything runs (the CDK constructs call :func:`check_query`
at synth for every pipeline's and workflow's query).

It imports only the standard library, sqlglot and the function's light modules (the
request's parse in :mod:`s3slice.core.model`, the S3 Select dialect, :mod:`.sqlglot.sql`'s parse and
sandbox), never polars, pyarrow or the engine. It refuses exactly what the function's own
analysis refuses at parse and sandbox (it runs the same code): a query that does not parse
(``FilterSyntaxError`` with S3 Select's error name), one that is not a single SELECT, reads
any table but ``s3object`` or calls a function that reads files (``ForbiddenQueryError``), a
filter that is a query, a malformed ``columns``/``limit`` (``RequestError``). What only
polars can judge (a function polars lacks, a type it cannot compare) is refused when the
function first analyses the query, as before: so a query this check passes may still be
refused then, and one it refuses is always refused then.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from s3slice.core.model import Query, parse_query
from s3slice.query.sqlglot.sql import parse_filter, parse_sql


def check_query(raw: Mapping[str, Any]) -> Query:
    """The query ``raw`` (the function's JSON: ``sql``, or ``columns``/``filter``/``limit``),
    parsed and sandboxed. Raises the :class:`~s3slice.S3SliceError` the function raises
    for it (a ``QueryError`` or ``RequestError``, naming the field and, for a parse error,
    S3 Select's name for it)."""
    query = parse_query(raw)
    if query.sql is not None:
        parse_sql(query.sql)
    if query.filter is not None:
        parse_filter(query.filter)
    return query
