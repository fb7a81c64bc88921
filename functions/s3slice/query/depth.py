"""How deep a query text nests, from its tokens alone, before any parser recurses on it.

The parsers of a query (sqlglot's, polars') and every walk of the tree they build recurse
once or more per level of the expression: a text nested deep enough (49 parentheses, a few
hundred ``NOT``, nested subqueries, a chain of 500 ``AND``) exhausts Python's stack, a
``RecursionError`` that no caller's ``Catch`` names. :func:`check_depth` refuses such a text
first, with a :class:`FilterSyntaxError` naming the limit, by one pass over its characters.

The depth is a bound on the tree's, in levels: each operator of a chain (``AND``, ``OR``,
arithmetic, concatenation) adds one level to the expression it is in (a parser makes a
chain a left-deep tree), and so does each comparison of a run of them (``a < b < c``); each
parenthesis (a call's, a subquery's, a list's), bracket, ``NOT`` or ``SELECT`` adds
:data:`GROUP_LEVELS` (a parser descends some twenty frames into one, and polars' parser
counts them against its own limit of 50). A comma ends an expression. A text may be at most
:data:`MAX_DEPTH` levels deep: 40 nested parentheses or ``NOT``, a chain of 320 ``AND``, or
any mix of them; real queries stay far below. Quoted text (strings, quoted names) and
comments hold no levels. A parser's ``RecursionError`` on a text that passed (a construct
the bound does not count) is the same typed error (:func:`too_deep`).
"""

from __future__ import annotations

from s3slice.core.errors import FilterSyntaxError

#: The deepest a query text may nest, in levels (see the module's text).
MAX_DEPTH = 320
#: The levels a parenthesis, bracket, NOT or SELECT adds.
GROUP_LEVELS = 8

_CHAIN_WORDS = frozenset({"AND", "OR"})
_COMPARISON_WORDS = frozenset({"LIKE", "BETWEEN", "IN", "IS"})
#: Words that open a level of their own in a parser, as a parenthesis does.
_GROUP_WORDS = frozenset({"NOT", "SELECT"})
_OPERATOR_CHARS = frozenset("+-*/%<>=!|&^~")
_COMPARISON_CHARS = frozenset("<>=!")
_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$")


class _Level:
    """One open group: the operators of its current expression, and the deepest of the
    expressions and groups inside it so far."""

    __slots__ = ("best", "compared", "inner", "most_compared", "ops")

    def __init__(self) -> None:
        self.ops = 0  # operators of the current expression (since the last comma)
        self.compared = 0  # comparisons since its last AND, OR or NOT
        self.most_compared = 0  # the longest such run
        self.inner = 0  # the deepest group closed inside the current expression
        self.best = 0  # the deepest finished expression of this group

    def chain(self, levels: int) -> None:
        self.ops += levels
        self.compared = 0

    def compare(self) -> None:
        self.compared += 1
        self.most_compared = max(self.most_compared, self.compared)

    def finish(self) -> None:
        self.best = max(self.best, self.ops + self.most_compared + self.inner)
        self.ops = self.inner = self.compared = self.most_compared = 0


def depth_of(text: str) -> int:
    """The bound on ``text``'s expression depth, in levels (see the module's text)."""
    stack = [_Level()]
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"`":  # a string or a quoted name: '' (or "") inside is the quote itself
            j = i + 1
            while j < n:
                if text[j] == c:
                    if j + 1 < n and text[j + 1] == c:
                        j += 2
                        continue
                    break
                j += 1
            i = j + 1
            continue
        if c == "-" and text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        if c in "([":
            stack.append(_Level())
        elif c in ")]":
            if len(stack) > 1:
                closed = stack.pop()
                closed.finish()
                top = stack[-1]
                top.inner = max(top.inner, closed.best + GROUP_LEVELS)
        elif c == ",":
            stack[-1].finish()
        elif c in _OPERATOR_CHARS:
            j = i + 1
            while j < n and text[j] in _OPERATOR_CHARS and j - i < 2:
                j += 1  # <=, <>, !=, ||: one operator
            if c in _COMPARISON_CHARS:
                stack[-1].compare()
            else:
                stack[-1].ops += 1
            i = j
            continue
        elif c in _WORD_CHARS:
            j = i + 1
            while j < n and text[j] in _WORD_CHARS:
                j += 1
            word = text[i:j].upper()
            if word in _CHAIN_WORDS:
                stack[-1].chain(1)
            elif word in _GROUP_WORDS:
                stack[-1].chain(GROUP_LEVELS)
            elif word in _COMPARISON_WORDS:
                stack[-1].compare()
            i = j
            continue
        i += 1
    # Groups left open (the parser refuses the text) still count.
    deepest = 0
    while stack:
        level = stack.pop()
        level.finish()
        deepest = level.best + (GROUP_LEVELS if stack else 0)
        if stack:
            stack[-1].inner = max(stack[-1].inner, deepest)
    return deepest


def check_depth(text: str, field: str) -> None:
    """Refuse ``text`` (the request's ``field``) when it nests deeper than
    :data:`MAX_DEPTH` levels, before any parser sees it."""
    depth = depth_of(text)
    if depth > MAX_DEPTH:
        raise FilterSyntaxError(
            f"{field}: the query nests {depth} levels deep, over the limit of {MAX_DEPTH} "
            f"(each parenthesis, NOT or SELECT adds {GROUP_LEVELS} levels, each AND, OR or "
            "other operator of an expression one): split it, or use IN (...) for a long "
            "chain of OR")


def too_deep(field: str) -> FilterSyntaxError:
    """The error for a text a parser could not follow to its depth (a ``RecursionError``
    below :data:`MAX_DEPTH`: a construct the bound does not count)."""
    return FilterSyntaxError(f"{field}: the query nests too deeply to be parsed (the limit "
                             f"is {MAX_DEPTH} levels; each parenthesis, NOT or SELECT "
                             f"adds {GROUP_LEVELS}, each operator one)")
