"""A SQL text that does not parse, told in S3 Select's terms: its error names
(``ParseExpectedExpression``, ``ParseUnexpectedToken``, ...) and the construct as the query
writes it (``'>'``, ``WHERE``, ``CAST``), never the parser's classes or keyword slots."""

from __future__ import annotations

import re
from typing import Any

#: sqlglot's expression classes, as the query writes the construct.
_CONSTRUCTS = {
    "GT": "the operator '>'", "GTE": "the operator '>='", "LT": "the operator '<'",
    "LTE": "the operator '<='", "EQ": "the operator '='", "NEQ": "the operator '<>'",
    "Add": "the operator '+'", "Sub": "the operator '-'", "Mul": "the operator '*'",
    "Div": "the operator '/'", "Mod": "the operator '%'", "DPipe": "the operator '||'",
    "And": "AND", "Or": "OR", "Not": "NOT", "Neg": "the sign '-'", "Is": "IS",
    "In": "IN", "Between": "BETWEEN", "Like": "LIKE", "ILike": "ILIKE",
    "Where": "WHERE", "Having": "HAVING", "Group": "GROUP BY", "Order": "ORDER BY",
    "Ordered": "ORDER BY", "Limit": "LIMIT", "Select": "SELECT", "From": "FROM",
    "Alias": "AS", "Cast": "CAST", "TryCast": "CAST", "Case": "CASE", "If": "WHEN",
    "Paren": "the parenthesis", "Count": "COUNT", "Sum": "SUM", "Avg": "AVG", "Min": "MIN",
    "Max": "MAX", "Coalesce": "COALESCE", "Nullif": "NULLIF", "Substring": "SUBSTRING",
    "Trim": "TRIM", "Extract": "EXTRACT", "Lower": "LOWER", "Upper": "UPPER",
}
_MISSING = re.compile(r"Required keyword: '\w+' missing for <class '[\w.]*?(\w+)'>")
_EXPECTED = re.compile(r"^Expect(?:ing|ed) (.+?)(?: after (\w+))?$")


def describe(first: dict[str, Any]) -> str:
    """One sqlglot error (its ``description``, ``line``, ``col``, ``highlight``) in S3
    Select's terms, with where it is."""
    text = str(first.get("description") or "")
    near = str(first.get("highlight") or "")
    where = f" at line {first.get('line')}, column {first.get('col')}"
    missing = _MISSING.search(text)
    if missing:
        construct = _CONSTRUCTS.get(missing.group(1), missing.group(1).upper())
        return f"ParseExpectedExpression: {construct} needs an expression{where}"
    if text.startswith(("Invalid expression", "Unexpected token")):
        return f"ParseUnexpectedToken: unexpected {near!r}{where}" if near else (
            f"ParseUnexpectedToken{where}")
    expected = _EXPECTED.match(text)
    if expected:
        what, after = expected.groups()
        if what == ")":
            return f"ParseExpectedRightParen: expected ')'{where}, near {near!r}"
        if what == "TYPE":
            return f"ParseExpectedTypeName: expected a type name after {after or 'CAST'}{where}"
        return f"ParseExpectedToken: expected {what}{where}" + (f", near {near!r}" if near
                                                                 else "")
    # Anything else: the message without the parser's class names.
    text = re.sub(r"<class '[\w.]*?(\w+)'>", lambda m: _CONSTRUCTS.get(m.group(1), m.group(1)),
                  text)
    return f"ParseError: {text}{where}" + (f", near {near!r}" if near else "")


def describe_token_error(text: str) -> str:
    """sqlglot could not split the text into tokens: most often a quote left open."""
    for quote, name in (("'", "string"), ('"', "quoted name")):
        if _unbalanced(text, quote):
            return f"LexerInvalidLiteral: a {name} opened with {quote} is never closed"
    return "LexerInvalidChar: a character that cannot start a token"


def _unbalanced(text: str, quote: str) -> bool:
    inside: str | None = None
    for ch in text:
        if inside is None and ch in "'\"":
            inside = ch
        elif ch == inside:
            inside = None
    return inside == quote


#: polars' error when a running sum of a decimal column leaves its 128-bit integer.
DECIMAL_OVERFLOW = "overflow in decimal addition"


def sum_overflow(sql: str | None, error: str) -> str | None:
    """The message for polars' decimal-sum overflow (``error``), naming the query's sums by
    their arguments as the query writes them (``SUM(amount)``), never a column polars made
    up for a partial; None when ``error`` is another."""
    if DECIMAL_OVERFLOW not in error:
        return None
    sums: list[str] = []
    if sql is not None:
        import sqlglot  # only on this error's path
        from sqlglot import exp

        try:
            tree = sqlglot.parse_one(sql)
        except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, RecursionError):
            tree = None
        for node in tree.find_all(exp.Sum, exp.Avg) if tree is not None else ():
            text = f"{type(node).__name__.upper()}({node.this.sql()})"
            if text not in sums:
                sums.append(text)
    named = ", ".join(sums) if sums else "a SUM of a decimal column"
    return (f"{named}: a sum of a decimal column left the 38 digits decimal(38, s) holds "
            "(polars adds decimals exactly, in 128 bits, and refuses rather than wrap); "
            "SUM(CAST(x AS DOUBLE)) answers approximately")
