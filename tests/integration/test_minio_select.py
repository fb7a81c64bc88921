"""The S3 Select entry point against a real S3 Select: MinIO's ``select_object_content``.

The same CSV and JSON-lines objects are queried through the s3slice handler (on the local
S3 server) and through MinIO. Where the two agree, the records must be equal. Where they
differ, the difference is asserted exactly as it is known (both answers), with its reason,
so this list cannot go stale: a fix on either side fails its entry. AWS's documentation
decides which side is right; MinIO has quirks of its own. README lists the differences.

MinIO is a Go build (``tests/benchmark/substrate.py`` pins it): 7 to 11 minutes on a cold
2-core machine, about 1 s to start once built. ``make test`` (and so CI) builds it first
(``make minio``; a pinned build is kept and reused). In CI (``CI=true``, which
``.ci/run`` sets) or with ``S3SLICE_BUILD_MINIO=1`` the module builds a missing binary
itself, and a build that fails fails the module: CI never skips these comparisons.
Anywhere else a missing binary skips the module, saying so. The harness (objects,
outcomes, MinIO) is ``minio_select.py``; the timestamp cases ``test_minio_select_time.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.benchmark.substrate import SubstrateError
from tests.integration import minio_select
from tests.integration import minio_select as harness
from tests.integration.minio_select import (
    RECORDS,
    SAME,
    Differs,
    Fails,
    Output,
    Raw,
    Rows,
    Source,
    compare,
)
from tests.support import S3Env

pytestmark = pytest.mark.integration

# The fixtures: MinIO, and the local S3 server, each holding the objects.
minio, local = minio_select.minio, minio_select.local


# -------------------------------------------------------------------------------- cases
MISSING = ("S3 Select leaves an attribute a record lacks MISSING and omits it from a JSON "
           "record; s3slice reads JSON into typed columns, where it is null")
EMPTY = ("S3 Select reads an empty CSV field as an empty string; s3slice reads it as null "
         "(so = '', IS NULL, COALESCE, CHAR_LENGTH, COUNT and <> see a null)")
MINIO_PATHS = "MinIO fails on some three-step paths; s3slice answers"
CASES: list[tuple[str, Source, str, Output, Differs | None]] = [
    # --------------------------------------------------------------- CSV: the same
    ("csv star", "csv", "SELECT * FROM S3Object", "CSV", SAME),
    ("csv cast filter", "csv",
     "SELECT s.name, s.city FROM S3Object s WHERE CAST(s.amount AS INT) > 8", "CSV", SAME),
    ("csv like", "csv", "SELECT s.id FROM S3Object s WHERE s.name LIKE '%d%'", "JSON", SAME),
    ("csv like underscore", "csv", "SELECT s.id FROM S3Object s WHERE s.name LIKE '_o_'",
     "JSON", SAME),
    ("csv between", "csv",
     "SELECT s.id FROM S3Object s WHERE CAST(s.amount AS INT) BETWEEN 8 AND 30", "JSON", SAME),
    ("csv in", "csv", "SELECT s.id FROM S3Object s WHERE s.city IN ('Oslo', 'Lima')", "JSON",
     SAME),
    ("csv in numbers", "csv",
     "SELECT s.id FROM S3Object s WHERE CAST(s.amount AS INT) IN (7, 100)", "JSON", SAME),
    ("csv arithmetic", "csv", "SELECT CAST(s.amount AS INT) * 2 AS d FROM S3Object s", "JSON",
     SAME),
    ("csv float division", "csv", "SELECT CAST(s.amount AS FLOAT) / 4 AS q FROM S3Object s",
     "JSON", SAME),
    ("csv float compare", "csv",
     "SELECT s.id FROM S3Object s WHERE CAST(s.amount AS FLOAT) > 9.5", "JSON", SAME),
    ("csv aggregates", "csv",
     "SELECT COUNT(*) AS n, SUM(CAST(s.amount AS INT)) AS total, "
     "MIN(CAST(s.amount AS INT)) AS lo, MAX(CAST(s.amount AS INT)) AS hi FROM S3Object s",
     "JSON", SAME),
    ("csv avg", "csv", "SELECT AVG(CAST(s.amount AS INT)) AS mean FROM S3Object s", "JSON",
     SAME),
    ("csv count where", "csv", "SELECT COUNT(*) AS n FROM S3Object s WHERE s.city = 'Oslo'",
     "JSON", SAME),
    ("csv limit", "csv", "SELECT s.id FROM S3Object s LIMIT 2", "JSON", SAME),
    ("csv limit 0", "csv", "SELECT s.id FROM S3Object s LIMIT 0", "JSON", SAME),
    ("csv alias reuses the aggregated column", "csv",
     "SELECT SUM(CAST(amount AS INT)) AS amount FROM S3Object", "JSON", SAME),
    ("csv alias reuses its expression's column", "csv",
     "SELECT CAST(s.amount AS INT) + 1 AS amount FROM S3Object s", "JSON", SAME),
    ("csv where sees the source column, not the alias", "csv",
     "SELECT s.id AS name FROM S3Object s WHERE s.name = 'bob'", "JSON", SAME),
    ("csv upper under its own name", "csv",
     "SELECT UPPER(s.name) AS name FROM S3Object s WHERE s.name = 'bob'", "JSON", SAME),
    ("csv quoted name", "csv", "SELECT s.\"name\" FROM S3Object s WHERE s.id = '1'", "JSON",
     SAME),
    # --------------------------------------------------------------- JSON: the same
    ("json path", "json", "SELECT s.a, s.b.c FROM S3Object s WHERE s.a BETWEEN 1 AND 3",
     "JSON", SAME),
    ("json path in where", "json", "SELECT s.a FROM S3Object s WHERE s.b.c = 'x1'", "JSON",
     SAME),
    ("json three steps in where", "json", "SELECT s.a FROM S3Object s WHERE s.b.d.e = 20",
     "JSON", SAME),
    ("json 0-based index named by position", "json", "SELECT s.tags[1] FROM S3Object s",
     "JSON", SAME),
    ("json two indexes", "json", "SELECT s.tags[1], s.tags[0] FROM S3Object s", "JSON", SAME),
    ("json paths to csv", "json", "SELECT s.a, s.tags[0], s.b.d.e FROM S3Object s", "CSV",
     SAME),
    ("json record to csv as json text", "json", "SELECT s.a, s.b FROM S3Object s", "CSV",
     SAME),
    ("json record", "json", "SELECT s.b FROM S3Object s WHERE s.a = 1", "JSON", SAME),
    ("json list", "json", "SELECT s.tags FROM S3Object s WHERE s.a = 1", "JSON", SAME),
    ("json inner record", "json", "SELECT s.b.d FROM S3Object s WHERE s.a < 3", "JSON", SAME),
    ("json path is null", "json", "SELECT s.a FROM S3Object s WHERE s.b.c IS NULL", "JSON",
     SAME),
    ("json index past the end", "json", "SELECT s.a FROM S3Object s WHERE s.tags[5] IS NULL",
     "JSON", SAME),
    ("json alias named like a path root", "json",
     "SELECT s.a AS tags FROM S3Object s WHERE s.tags[0] = 't3'", "JSON", SAME),
    ("json function of a path", "json",
     "SELECT LOWER(s.b.c) AS l FROM S3Object s WHERE s.a < 3", "JSON", SAME),
    ("json aggregates with a path filter", "json",
     "SELECT COUNT(*) AS n, SUM(s.a) AS total FROM S3Object s WHERE s.b.c IS NOT NULL",
     "JSON", SAME),
    ("json boolean", "json", "SELECT s.a FROM S3Object s WHERE s.ok = true", "JSON", SAME),
    ("json and", "json", "SELECT s.a FROM S3Object s WHERE s.price > 1.0 AND s.ok", "JSON",
     SAME),
    ("json not equal", "json", "SELECT s.a FROM S3Object s WHERE s.a != 2", "JSON", SAME),
    ("json between", "json", "SELECT s.a FROM S3Object s WHERE s.a BETWEEN 2 AND 3", "JSON",
     SAME),
    ("json in", "json", "SELECT s.a FROM S3Object s WHERE s.a IN (1, 4)", "JSON", SAME),
    ("json null", "json", "SELECT s.a FROM S3Object s WHERE s.n IS NULL", "JSON", SAME),
    ("json alias reuse", "json", "SELECT SUM(s.a) AS a FROM S3Object s", "JSON", SAME),
    ("json alias reuse in the select list", "json",
     "SELECT s.a + 1 AS a, s.price FROM S3Object s", "JSON", SAME),
    ("json where sees the source", "json",
     "SELECT s.price AS a FROM S3Object s WHERE s.a > 2", "JSON", SAME),
    ("json casts", "json", "SELECT CAST(s.a AS STRING) AS x, CAST(s.a AS INTEGER) AS y, "
     "CAST(s.price AS INT) AS z FROM S3Object s WHERE s.a < 3", "JSON", SAME),
    ("json arithmetic", "json", "SELECT s.a * 2 + 1 AS x, s.a % 3 AS m FROM S3Object s",
     "JSON", SAME),
    ("json limit", "json", "SELECT s.a FROM S3Object s WHERE s.a > 1 LIMIT 1", "JSON", SAME),
    # An unnamed expression is named by its position, a column or path by its name.
    ("csv unnamed aggregate", "csv", "SELECT COUNT(*) FROM S3Object s", "JSON", SAME),
    ("csv unnamed expressions", "csv", "SELECT s.id, UPPER(s.name), CAST(s.amount AS INT) * 2 "
     "FROM S3Object s WHERE s.id < '3'", "JSON", SAME),
    ("json unnamed expressions", "json", "SELECT s.a + 1, s.b.c, s.tags[0], s.a "
     "FROM S3Object s WHERE s.a < 3", "JSON", SAME),
    # ------------------------------------------- CSV text compared with a number
    # S3 Select converts the text to a number for every operator (docs/sql.md)
    ("csv number compare without cast", "csv",
     "SELECT s.id FROM S3Object s WHERE s.amount > 8", "JSON", SAME),
    ("csv number equal without cast", "csv",
     "SELECT s.id FROM S3Object s WHERE s.amount = 10", "JSON", SAME),
    ("csv number in without cast", "csv",
     "SELECT s.id FROM S3Object s WHERE s.amount IN (7, 100)", "JSON", SAME),
    ("csv number between without cast", "csv",
     "SELECT s.id FROM S3Object s WHERE s.amount BETWEEN 8 AND 30", "JSON", SAME),
    ("csv number on the left", "csv", "SELECT s.id FROM S3Object s WHERE 9 < s.amount",
     "JSON", SAME),
    ("csv float compare without cast", "csv",
     "SELECT s.id FROM S3Object s WHERE s.amount > 9.5", "JSON", SAME),
    # --------------------------------------------------------- the known differences
    ("json missing attribute", "json", "SELECT s.a, s.b.c FROM S3Object s WHERE s.a > 3",
     "JSON", Differs(MISSING, ours=Rows([{"a": 4, "c": None}]), minio=Rows([{"a": 4}]))),
    ("json missing record in star", "json", "SELECT * FROM S3Object s WHERE s.a = 4", "JSON",
     Differs(MISSING, ours=Rows([{**RECORDS[3], "b": None}]), minio=Rows([RECORDS[3]]))),
    ("json unknown attribute", "json", "SELECT s.zz FROM S3Object s", "JSON", Differs(
        "S3 Select answers MISSING for an attribute no record has; s3slice names it",
        ours=Fails("UnknownColumnError: unknown column 'zz'"), minio=Rows([{}] * 4))),
    ("json unknown nested attribute", "json", "SELECT s.a FROM S3Object s WHERE s.b.x = 1",
     "JSON", Differs(
         "S3 Select answers MISSING for an attribute no record has; s3slice names it",
         ours=Fails("UnknownColumnError: unknown column 'b.x'"), minio=Rows([]))),
    ("csv empty field equals ''", "csv", "SELECT s.id FROM S3Object s WHERE s.city = ''",
     "JSON", Differs(EMPTY, ours=Rows([]), minio=Rows([{"id": "2"}]))),
    ("csv empty field is null", "csv", "SELECT s.id FROM S3Object s WHERE s.city IS NULL",
     "JSON", Differs(EMPTY, ours=Rows([{"id": "2"}]), minio=Rows([]))),
    ("csv empty field in json output", "csv", "SELECT s.name FROM S3Object s WHERE s.id = '3'",
     "JSON", Differs(EMPTY, ours=Rows([{"name": None}]), minio=Rows([{"name": ""}]))),
    ("csv empty field and not equal", "csv",
     "SELECT s.id FROM S3Object s WHERE s.name != 'bob'", "JSON",
     Differs(EMPTY, ours=Rows([{"id": "1"}, {"id": "4"}]),
             minio=Rows([{"id": "1"}, {"id": "3"}, {"id": "4"}]))),
    ("csv empty field counted", "csv", "SELECT COUNT(s.city) AS n FROM S3Object s", "JSON",
     Differs(EMPTY, ours=Rows([{"n": 3}]), minio=Rows([{"n": 4}]))),
    ("duplicate output names", "csv",
     "SELECT s.id, s.amount AS id FROM S3Object s WHERE s.id = '2'", "JSON", Differs(
         "S3 Select writes two keys of one name; s3slice renames the second (id:1)",
         ours=Raw('{"id":"2","id:1":"25"}\n'), minio=Raw('{"id":"2","id":"25"}\n'))),
    ("case-insensitive names", "csv", "SELECT s.NAME FROM S3Object s WHERE s.id = '1'",
     "JSON", Differs(
         "AWS matches an unquoted name case-insensitively; neither s3slice nor MinIO does",
         ours=Fails("UnknownColumnError: unknown column 'NAME'"),
         minio=Fails("column NAME not found"))),
    ("positional names with a header", "csv", "SELECT s._1, s._3 FROM S3Object s", "JSON",
     Differs("S3 Select also names CSV columns _1, _2, ... when the header is used; "
             "s3slice only without a header (NONE, IGNORE)",
             ours=Fails("UnknownColumnError: unknown column '_1', '_3'"),
             minio=Rows([{"_1": "1", "_3": "10"}, {"_1": "2", "_3": "25"},
                         {"_1": "3", "_3": "7"}, {"_1": "4", "_3": "100"}]))),
    ("text arithmetic without a cast", "csv", "SELECT s.id + 1 AS x FROM S3Object s", "JSON",
     Differs("MinIO turns text into a number implicitly; s3slice asks for CAST, as AWS's "
             "documentation does", ours=Fails("QueryError"),
             minio=Rows([{"x": 2}, {"x": 3}, {"x": 4}, {"x": 5}]))),
    ("integer division", "json", "SELECT s.a / 2 AS x FROM S3Object s", "JSON", Differs(
        "MinIO divides integers as integers; polars' / always divides exactly",
        ours=Rows([{"x": 0.5}, {"x": 1.0}, {"x": 1.5}, {"x": 2.0}]),
        minio=Rows([{"x": 0}, {"x": 1}, {"x": 1}, {"x": 2}]))),
    ("whole floats in csv", "json", "SELECT s.a, s.price FROM S3Object s WHERE s.a = 3",
     "CSV", Differs("polars writes a whole float as 3.0, MinIO as 3",
                    ours=Rows([["3", "3.0"]]), minio=Rows([["3", "3"]]))),
    ("unqualified path", "json", "SELECT b.c FROM S3Object s WHERE s.a = 1", "JSON", Differs(
        "MinIO requires the table alias before a path; s3slice also takes b.c",
        ours=Rows([{"c": "x1"}]), minio=Fails("InvalidQuery"))),
    ("negative index", "json", "SELECT s.tags[-1] FROM S3Object s WHERE s.a = 4", "JSON",
     Differs("MinIO does not parse a negative index; s3slice answers null",
             ours=Rows([{"_1": None}]), minio=Fails("ParseSelectFailure"))),
    ("quoted attribute in brackets", "json", "SELECT s.b['c'] FROM S3Object s WHERE s.a = 1",
     "JSON", Differs("MinIO names s.b['c'] by its text; s3slice as s.b.c, by the attribute",
                     ours=Rows([{"c": "x1"}]), minio=Rows([{"b['c']": "x1"}]))),
    ("three-step path compared", "json", "SELECT s.a FROM S3Object s WHERE s.b.d.e > 15",
     "JSON", Differs(MINIO_PATHS, ours=Rows([{"a": 2}, {"a": 3}]),
                     minio=Fails("invalid comparison operator"))),
    ("aggregate of a three-step path", "json",
     "SELECT SUM(s.b.d.e) AS t FROM S3Object s", "JSON",
     Differs(MINIO_PATHS, ours=Rows([{"t": 60}]), minio=Fails("SUM() requires a numeric"))),
    ("count over missing", "json", "SELECT COUNT(s.b) AS n FROM S3Object s", "JSON", Differs(
        "AWS: aggregates skip MISSING; MinIO counts it",
        ours=Rows([{"n": 3}]), minio=Rows([{"n": 4}]))),
    ("case", "csv", "SELECT CASE WHEN CAST(s.amount AS INT) > 20 THEN 'hi' ELSE 'lo' END "
     "AS band FROM S3Object s", "JSON", Differs(
         "MinIO lacks CASE, which AWS documents",
         ours=Rows([{"band": "lo"}, {"band": "hi"}, {"band": "lo"}, {"band": "hi"}]),
         minio=Fails("ParseSelectFailure"))),
    ("concatenation", "json", "SELECT s.b.c || '!' AS x FROM S3Object s WHERE s.a < 3",
     "JSON", Differs("MinIO lacks ||, which AWS documents",
                     ours=Rows([{"x": "x1!"}, {"x": "x2!"}]),
                     minio=Fails("ParseSelectFailure"))),
    ("not equal as <>", "csv", "SELECT s.id FROM S3Object s WHERE s.amount <> '25'", "JSON",
     Differs("MinIO fails on <> over text", ours=Rows([{"id": "1"}, {"id": "3"}, {"id": "4"}]),
             minio=Fails("invalid arithmetic operator"))),
    ("min of text", "csv", "SELECT MIN(s.name) AS lo, MAX(s.city) AS hi FROM S3Object s",
     "JSON", Differs("MinIO's MIN and MAX take numbers only",
                     ours=Rows([{"lo": "Ada", "hi": "Oslo"}]),
                     minio=Fails("MIN() requires a numeric argument"))),
    ("like over nulls", "json", "SELECT s.a FROM S3Object s WHERE s.n LIKE 't%'", "JSON",
     Differs("MinIO fails on LIKE over a null", ours=Rows([{"a": 2}]),
             minio=Fails("LIKE clause"))),
    ("timestamp functions over text", "csv",
     "SELECT EXTRACT(YEAR FROM TO_TIMESTAMP(s.ts)) AS y FROM S3Object s", "JSON", Differs(
         "MinIO has not implemented TO_TIMESTAMP over text",
         ours=Rows([{"y": 2024}, {"y": 2024}, {"y": 2023}, {"y": 2024}]),
         minio=Fails("Function is not yet implemented"))),
    ("cast of zoned text to timestamp", "csv",
     "SELECT EXTRACT(YEAR FROM CAST(s.ts AS TIMESTAMP)) AS y FROM S3Object s", "JSON", SAME),
    ("cast of text to bool", "json", "SELECT CAST('true' AS BOOL) AS x FROM S3Object s "
     "WHERE s.a = 1", "JSON", Differs("polars casts no text to a boolean",
                                      ours=Fails("QueryError"), minio=Rows([{"x": True}]))),
    ("cast to decimal", "json", "SELECT CAST(s.a AS DECIMAL) AS x FROM S3Object s "
     "WHERE s.a = 1", "JSON", Differs(
         "MinIO has not implemented DECIMAL; s3slice writes a decimal as a JSON string",
         ours=Rows([{"x": "1.000000000"}]), minio=Fails("not yet implemented"))),
    ("cast to varchar", "json", "SELECT CAST(s.a AS VARCHAR) AS x FROM S3Object s "
     "WHERE s.a = 1", "JSON", Differs("MinIO knows STRING, not VARCHAR (polars both)",
                                      ours=Rows([{"x": "1"}]),
                                      minio=Fails("ParseSelectFailure"))),
    ("text that is no number compared with one", "csv",
     "SELECT s.id FROM S3Object s WHERE s.name = 5", "JSON", Differs(
         "both refuse a text that is no number; MinIO as an InternalError",
         ours=Fails("QueryError: the text column 'name' holds"),
         minio=Fails("to a number"))),
    ("text that is no number, ordered", "csv",
     "SELECT s.id FROM S3Object s WHERE s.name > 5", "JSON", Differs(
         "both refuse a text that is no number, for every operator",
         ours=Fails("which is not a number"), minio=Fails("to a number"))),
    ("number not equal without cast", "csv",
     "SELECT s.id FROM S3Object s WHERE s.amount <> 10", "JSON", Differs(
         "MinIO fails on <> over text", ours=Rows([{"id": "2"}, {"id": "3"}, {"id": "4"}]),
         minio=Fails("invalid arithmetic operator"))),
    # ------------------------------------- time functions over zoned timestamps
    ("time functions over zoned text", "csv",
     "SELECT EXTRACT(HOUR FROM TO_TIMESTAMP(s.ts)) AS h, "
     "DATE_DIFF(hour, TO_TIMESTAMP(s.ts), TO_TIMESTAMP('2024-06-15T00:00:00Z')) AS d, "
     "DATE_ADD(day, 1, TO_TIMESTAMP(s.ts)) > TO_TIMESTAMP('2024-06-15T00:00:00Z') AS later "
     "FROM S3Object s", "JSON", Differs(
         "MinIO has not implemented TO_TIMESTAMP over text; s3slice reads the zone",
         ours=Rows([{"h": 10, "d": 1069, "later": False}, {"h": 0, "d": 0, "later": True},
                    {"h": 23, "d": 3984, "later": False},
                    {"h": 0, "d": 3984, "later": False}]),
         minio=Fails("Function is not yet implemented"))),
    ("cast of zoned text, compared with a UTC literal", "csv",
     "SELECT s.id FROM S3Object s WHERE CAST(s.ts AS TIMESTAMP) >= "
     "CAST('2024-05-01T00:00:00Z' AS TIMESTAMP)", "JSON", SAME),
    ("utcnow against zoned text", "csv",
     "SELECT s.id FROM S3Object s WHERE TO_TIMESTAMP(s.ts) < UTCNOW()", "JSON", Differs(
         "MinIO has not implemented TO_TIMESTAMP over text",
         ours=Rows([{"id": "1"}, {"id": "2"}, {"id": "3"}, {"id": "4"}]),
         minio=Fails("Function is not yet implemented"))),
    ("utcnow against zoned text by cast", "csv",
     "SELECT COUNT(*) AS n FROM S3Object s WHERE CAST(s.ts AS TIMESTAMP) < UTCNOW()", "JSON",
     SAME),
    ("order by", "json", "SELECT s.a FROM S3Object s ORDER BY s.a DESC", "JSON", Differs(
        "S3 Select has no ORDER BY; s3slice runs it (and GROUP BY, HAVING)",
        ours=Rows([{"a": 4}, {"a": 3}, {"a": 2}, {"a": 1}]), minio=Fails("ORDER"))),
]


@pytest.mark.parametrize(("name", "source", "sql", "output", "expect"), CASES,
                         ids=[c[0] for c in CASES])
def test_s3slice_and_minio(minio: Any, local: S3Env, name: str, source: Source, sql: str,
                           output: Output, expect: Differs | None) -> None:
    compare(minio, name, source, sql, output, expect)


@pytest.mark.parametrize("env", [{"CI": "true"}, {"S3SLICE_BUILD_MINIO": "1"}])
def test_in_ci_a_minio_that_cannot_be_built_fails_instead_of_skipping(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("S3SLICE_BUILD_MINIO", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(harness, "BIN", tmp_path)  # no binary there

    def no_go(*args: Any) -> Path:
        raise SubstrateError("`go` is not on PATH")
    monkeypatch.setattr(harness, "go_install", no_go)
    with pytest.raises(pytest.fail.Exception, match="could not be built.*go. is not on PATH"):
        harness._minio_binary()


def test_outside_ci_a_minio_not_built_skips(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("S3SLICE_BUILD_MINIO", raising=False)
    monkeypatch.setattr(harness, "BIN", tmp_path)
    with pytest.raises(pytest.skip.Exception, match="not built"):
        harness._minio_binary()
