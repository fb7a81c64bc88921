"""How a value is written as text: the one rule of every text answer.

Every path that writes values as text (inline ``rows``, NDJSON and CSV outputs, S3
Select's JSON and CSV records, and the command line's ``--print json|csv|table``) writes
them by this rule:

- a timestamp: ISO 8601 with ``T``, the fraction of a second only when it is not zero (3, 6
  or 9 digits), and the offset (``+02:00``, ``+00:00``) when the column has a zone; a
  zone-less column has none: ``2024-06-01T12:00:00.000500``, ``2024-06-01T14:00:00+02:00``;
- a date ``2024-06-01``; a time ``01:02:03.000400`` (``01:00:00``); a duration ISO 8601
  (``P1DT5.000007S``, a day being 24 hours; ``-PT3S``); a decimal its exact text (``1.50``,
  a JSON string); binary its base64 text (RFC 4648, padded);
- a struct, list, array or map (a list of ``key``/``value`` records): a JSON value in JSON
  answers, its compact JSON text in a CSV field or a printed cell, nested values by the
  same rule;
- NaN and infinities in JSON: the strings of :data:`NON_FINITE` (``null`` is only a null);
- text as it is (non-ASCII characters are never escaped).

This module holds the rule for values already in JSON form (no polars: the command line
imports it); :mod:`s3slice.answer.textual` applies it to a polars frame.
"""

from __future__ import annotations

import json
import math
from typing import Any

#: How a float that JSON cannot hold is written in every JSON answer (inline rows, NDJSON
#: outputs, S3 Select's JSON records): as a string, as Spark's and Jackson's JSON writers
#: do, so it is never confused with a null.
NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}

#: chrono formats (polars' ``dt.to_string``): ``%.f`` writes no fraction for a whole
#: second, else 3, 6 or 9 digits.
DATETIME_FORMAT = "%Y-%m-%dT%H:%M:%S%.f"
ZONED_DATETIME_FORMAT = DATETIME_FORMAT + "%:z"
TIME_FORMAT = "%H:%M:%S%.f"
#: polars' ISO 8601 form of a duration.
DURATION_FORMAT = "iso"


class Number(str):
    """A JSON number's own text, written back as it was read."""


def dump(value: Any) -> str:
    """Compact JSON (no spaces), non-ASCII as is, each :class:`Number` as its text."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{dump(k)}:{dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dump(v) for v in value) + "]"
    if isinstance(value, Number):
        return str.__str__(value)
    if isinstance(value, float) and not math.isfinite(value):
        return dump(NON_FINITE[repr(value)])
    return json.dumps(value, ensure_ascii=False)


def patched(written: Any, value: Any) -> Any:
    """``written`` (polars' JSON of ``value``), its NaN and infinities as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return NON_FINITE[repr(value)]
    if isinstance(value, dict) and isinstance(written, dict):
        return {k: patched(written.get(k), value.get(k)) for k in written}
    if isinstance(value, list) and isinstance(written, list):
        return [patched(w, v) for w, v in zip(written, value, strict=False)]
    return written


def cell_text(value: Any) -> str | None:
    """A JSON value (as in a response's ``rows``) as a CSV field or a printed cell: text as
    it is, a number or a boolean as JSON writes it, a record or a list as its compact JSON
    text; None for a null."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return dump(value)
