"""Deep nesting is a typed refusal naming the limit, never a ``RecursionError`` (issue 36
§4): parentheses, ``NOT``, nested subqueries, long ``AND``/``OR`` chains and arithmetic, in
``filter``, ``sql`` and S3 Select's ``Expression``, through the real handler. Texts just
inside the limit are answered, equal to DuckDB on the same object, so the limit is not a
refusal of what the parsers can follow."""

from __future__ import annotations

import io
import random
from collections.abc import Iterator
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlglot

from s3slice import FOOTER_CACHE, FilterSyntaxError, Query
from s3slice.entry import dispatch as _entry
from s3slice.query import analyzer
from s3slice.query.depth import GROUP_LEVELS, MAX_DEPTH, depth_of
from tests.support import S3Env, invoke

pytestmark = pytest.mark.integration

DATA = "deep-data"
KEY = "t.parquet"
TABLE = pa.table({"a": pa.array(range(50), pa.int64()),
                  "b": pa.array([f"v{i % 7}" for i in range(50)])})
SELECT = "SELECT a FROM s3object WHERE "


def nested_subqueries(n: int) -> str:
    return ("SELECT a FROM s3object WHERE a IN (" * n + "SELECT a FROM s3object"
            + ")" * n)


#: Texts over the limit, as a filter's condition (the SQL wraps it in a SELECT).
DEEP = {
    "49 parentheses": "(" * 49 + "a > 1" + ")" * 49,
    "107 NOT": "NOT " * 107 + "a > 1",
    "2000 AND": " AND ".join(["a > 1"] * 2000),
    "2000 OR": " OR ".join(f"a = {i}" for i in range(2000)),
    "5000 +": "a" + " + 1" * 5000 + " > 2",
    "deep calls": "ABS(" * 60 + "a" + ")" * 60 + " > 1",
    "400 comparisons": " < ".join(["a"] * 400),
}


@pytest.fixture
def lake(s3: S3Env) -> Iterator[str]:
    s3.empty_bucket(DATA)
    buf = io.BytesIO()
    pq.write_table(TABLE, buf)
    s3.client.put_object(Bucket=DATA, Key=KEY, Body=buf.getvalue())
    _entry.reset()
    FOOTER_CACHE.clear()
    yield f"s3://{DATA}/{KEY}"
    _entry.reset()


def select_event(expression: str) -> dict[str, Any]:
    return {"Bucket": DATA, "Key": KEY, "ExpressionType": "SQL", "Expression": expression,
            "InputSerialization": {"Parquet": {}}, "OutputSerialization": {"CSV": {}}}


@pytest.mark.parametrize("name", sorted(DEEP))
def test_deep_text_is_a_typed_refusal_naming_the_limit(lake: str, name: str) -> None:
    condition = DEEP[name]
    assert depth_of(condition) > MAX_DEPTH
    for event in ({"source": lake, "filter": condition},
                  {"source": lake, "sql": SELECT + condition, "return_rows": True},
                  {"source": lake, "sql": f"SELECT COUNT(*) AS n FROM s3object WHERE "
                                          f"{condition}", "return_rows": True},
                  select_event("SELECT s.a FROM s3object s WHERE " + condition)):
        with pytest.raises(FilterSyntaxError, match=f"limit of {MAX_DEPTH}"):
            invoke(event)


def test_200_nested_subqueries_are_refused_typed(lake: str) -> None:
    for event in ({"source": lake, "sql": nested_subqueries(200), "return_rows": True},
                  select_event(nested_subqueries(200))):
        with pytest.raises(FilterSyntaxError, match=f"limit of {MAX_DEPTH}"):
            invoke(event)


def duck(sql: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect()
    con.register("s3object", TABLE)
    return sorted(con.execute(sql).fetchall())


#: Texts inside the limit, answered: the deepest of each kind the limit allows.
SHALLOW = {
    "38 parentheses": "(" * 38 + "a > 1" + ")" * 38,
    "38 NOT": "NOT " * 38 + "a > 1",
    "200 OR": " OR ".join(f"a = {i}" for i in range(200)),
    "100 + in 1 parenthesis": "(a" + " + 1" * 100 + ") > 110",
    "20 parentheses holding 150 AND": "(" * 20 + " AND ".join(
        f"a <> {i}" for i in range(150)) + ")" * 20,
}


@pytest.mark.parametrize("name", sorted(SHALLOW))
def test_texts_inside_the_limit_are_answered(lake: str, name: str) -> None:
    condition = SHALLOW[name]
    assert depth_of(f"SELECT b, COUNT(*) AS n FROM s3object WHERE {condition}") <= MAX_DEPTH
    want = duck(f"SELECT a FROM s3object WHERE {condition}")
    got = invoke({"source": lake, "filter": condition, "columns": ["a"],
                  "return_rows": True})
    assert sorted((r["a"],) for r in got["rows"]) == want
    got = invoke({"source": lake, "sql": SELECT + condition, "return_rows": True})
    assert sorted((r["a"],) for r in got["rows"]) == want
    got = invoke({"source": lake, "sql": f"SELECT b, COUNT(*) AS n FROM s3object WHERE "
                                         f"{condition} GROUP BY b", "return_rows": True})
    assert sorted((r["b"], r["n"]) for r in got["rows"]) == duck(
        f"SELECT b, COUNT(*) AS n FROM s3object WHERE {condition} GROUP BY b")


def test_quoted_text_and_comments_hold_no_levels() -> None:
    text = "b = '" + "(" * 500 + "' OR \"((((\" = 'x' -- " + "(" * 500 + "\n AND a > 1"
    assert depth_of(text) <= 4
    assert depth_of("a IN (" + ", ".join(map(str, range(10_000))) + ")") == GROUP_LEVELS + 1


def test_random_mixes_are_answered_or_refused_typed(lake: str) -> None:
    """Random nestings of every kind around the limit: never a RecursionError, and the
    refusal is exactly the texts over the bound (or a parser's own typed refusal)."""
    rng = random.Random(36)

    def grow(depth: int) -> str:
        if depth <= 0 or rng.random() < 0.1:
            return rng.choice(["a > 3", "b = 'v1'", "a + 1 < 9"])
        kind = rng.choice(["paren", "not", "and", "or", "arith", "call"])
        inner = grow(depth - 1)
        if kind == "paren":
            return f"({inner})"
        if kind == "not":
            return f"NOT {inner}"
        if kind == "call":
            return f"(ABS(a){' + 1' * rng.randint(1, 40)} > 4) AND ({inner})"
        if kind == "arith":
            return f"({inner}) OR a{' + 1 * 2' * rng.randint(1, 60)} = {rng.randint(0, 200)}"
        joiner = " AND " if kind == "and" else " OR "
        return joiner.join([inner, *(f"a <> {rng.randint(0, 60)}" if kind == "and" else
                                     f"a = {rng.randint(0, 60)}"
                                     for _ in range(rng.randint(1, 60)))])
    seen = {"answered": 0, "refused": 0}
    for _ in range(12):
        condition = grow(rng.randint(10, 60))
        over = depth_of(SELECT + condition) > MAX_DEPTH
        try:
            got = invoke({"source": lake, "sql": SELECT + condition, "return_rows": True})
        except FilterSyntaxError as e:
            refusal = str(e)
        else:
            refusal = None
        if refusal is not None:
            assert over or "recursion" in refusal.lower(), (condition, refusal)
            seen["refused"] += 1
            continue
        assert not over, condition
        assert sorted((r["a"],) for r in got["rows"]) == duck(SELECT + condition)
        seen["answered"] += 1
    assert min(seen.values()) >= 3, seen


def test_a_parsers_recursion_error_is_the_typed_refusal(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """The backstop: a RecursionError from sqlglot on a text the bound lets through."""
    def deep(*_: Any, **__: Any) -> Any:
        raise RecursionError("maximum recursion depth exceeded")
    monkeypatch.setattr(sqlglot, "parse", deep)
    for query in (Query(sql="SELECT a FROM s3object WHERE a > 1 AND b LIKE 'x%'"),
                  Query(filter="a > 1 AND b LIKE 'x%' AND UPPER(b) = 'V'")):
        with pytest.raises(FilterSyntaxError, match="nests too deeply"):
            analyzer._analyze(query)
