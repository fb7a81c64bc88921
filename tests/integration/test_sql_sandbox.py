"""The SQL sandbox through the real handler on the local S3 server (issue 28 §1): a query
reads only its own sources, however its text is written, by every route that runs SQL:
a direct ``sql`` or ``filter``, S3 Select's ``Expression``, and the workflow's Check step
map batch and Reduce (whose partial and final plans are SQL too).

A private object sits in the same bucket, a local file and an HTTP server on loopback hold
a secret row each: the server log must show no request for the private object, the HTTP
server must get no request, and no answer may hold a secret row. The legitimate query
beside each attack returns what polars says over the object, so the setup can read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import polars as pl
import pytest

from s3slice import FOOTER_CACHE, ForbiddenQueryError, QueryError, RequestError
from s3slice.entry import dispatch as _entry
from tests.sandbox_bait import SECRET, Bait
from tests.support import S3Env, invoke

pytestmark = pytest.mark.integration

BUCKET, RESULTS = "sandbox-data", "sandbox-results"
PUBLIC, PRIVATE = "pub/x.parquet", "private/payroll.parquet"
DATA = pl.DataFrame({"a": ["x", "y", "z"], "n": [1, 2, 3]})
PAYROLL = pl.DataFrame({"a": [SECRET], "n": [99]})
REPORTED = ("SELECT a FROM s3object WHERE a = 'x' --c\r OR a = '\nUNION ALL SELECT a FROM "
            "read_parquet( --z\r' || (\n'{target}')")



@pytest.fixture(scope="module")
def bait(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bait]:
    b = Bait(tmp_path_factory.mktemp("sandbox-bait"))
    yield b
    b.close()


@pytest.fixture
def lake(s3: S3Env, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Env]:
    for bucket in (BUCKET, RESULTS):
        s3.empty_bucket(bucket)
    s3.put_frame(BUCKET, PUBLIC, DATA)
    s3.put_frame(BUCKET, PRIVATE, PAYROLL)
    for name in ("S3SLICE_QUERY", "S3SLICE_OUTPUT_URI", "S3SLICE_SOURCE_URIS"):
        monkeypatch.delenv(name, raising=False)
    _entry.reset()
    FOOTER_CACHE.clear()
    s3.log.clear()
    yield s3
    _entry.reset()


def targets(bait: Bait) -> list[str]:
    return [f"s3://{BUCKET}/{PRIVATE}", str(bait.file), bait.url]


def attacks(bait: Bait) -> list[str]:
    """SQL texts that reach for another object, a local file or a URL, each written so
    that sqlglot and polars would read the request's own text differently."""
    out = []
    for t in targets(bait):
        out += [
            REPORTED.format(target=t),
            f"SELECT a FROM s3object WHERE a = 'x' --c\r OR a = '\nUNION ALL SELECT a FROM "
            f"read_parquet('{t}') --'",
            f"SELECT a FROM s3object WHERE a = $$x' UNION ALL SELECT a FROM read_csv('{t}') --$$",
            f"SELECT a FROM s3object WHERE a = E'x\\' UNION ALL SELECT a FROM read_csv('{t}') --'",
            f"SELECT a FROM s3object /* /* */ UNION ALL SELECT a FROM read_parquet('{t}') -- */",
            f"SELECT a FROM s3object UNION ALL SELECT a FROM \"read_parquet\"('{t}')",
            f"SELECT a, COUNT(*) AS c FROM s3object WHERE a = 'x' --c\r OR a = '\nGROUP BY a "
            f"UNION ALL SELECT a, 1 FROM read_parquet('{t}') --'\nGROUP BY a",
        ]
    return out


def assert_nothing_outside(lake: S3Env, bait: Bait, answers: list[Any]) -> None:
    private = [r for r in lake.log.requests if PRIVATE in r.path]
    assert private == [], f"the private object was requested: {private}"
    assert bait.hits == [], f"the HTTP server was reached: {bait.hits}"
    assert all(SECRET not in json.dumps(a, default=str) for a in answers)
    outputs = [lake.get(f"s3://{RESULTS}/{k}") for k in lake.keys(RESULTS)]
    assert all(SECRET.encode() not in body for body in outputs)


def attempt(event: dict[str, Any]) -> Any:
    """The handler's answer, or the typed error it raised (any other error fails): a query
    error, or the request error the workflow's steps make of one."""
    try:
        return invoke(event)
    except (QueryError, RequestError) as e:
        return e


def refused(answer: Any) -> bool:
    """Refused by the sandbox: its typed error, or the workflow's request error naming it."""
    return isinstance(answer, ForbiddenQueryError) or (
        isinstance(answer, RequestError) and "read the same to every SQL parser" in str(answer))


def test_the_reported_request_is_refused_and_reads_nothing_else(lake: S3Env,
                                                                 bait: Bait) -> None:
    for target in targets(bait):
        with pytest.raises(ForbiddenQueryError):
            invoke({"source": f"s3://{BUCKET}/{PUBLIC}", "sql": REPORTED.format(target=target),
                    "output": f"s3://{RESULTS}/out/", "return_rows": True})
    assert_nothing_outside(lake, bait, [])
    assert lake.keys(RESULTS) == []
    assert lake.log.gets() == []  # refused before any object was read, its own too


def test_direct_sql_attacks_never_read_outside(lake: S3Env, bait: Bait) -> None:
    answers = [attempt({"source": f"s3://{BUCKET}/{PUBLIC}", "sql": sql,
                        "output": f"s3://{RESULTS}/out/", "return_rows": True})
               for sql in attacks(bait)]
    assert_nothing_outside(lake, bait, answers)
    # The legitimate query beside them reads the object: the setup can see a read.
    got = invoke({"source": f"s3://{BUCKET}/{PUBLIC}", "return_rows": True,
                  "sql": "SELECT a FROM s3object WHERE a = 'x' --c\r OR a = 'y'",
                  "output": f"s3://{RESULTS}/ok/"})
    # sqlglot's reading (the comment ends at \r) is the one that ran, not polars' own.
    assert got["rows"] == DATA.filter(pl.col("a").is_in(["x", "y"])).select("a").to_dicts()
    assert any(PUBLIC in r.path for r in lake.log.gets())


def test_filters_never_smuggle_a_subquery_or_a_table_function(lake: S3Env,
                                                              bait: Bait) -> None:
    answers = []
    for t in targets(bait):
        for text in (f"a = 'x' --c\r OR a IN (SELECT a FROM read_parquet('{t}')) --",
                     f"a IN (SELECT a FROM read_csv('{t}'))",
                     f"a = 'x' --\r) UNION ALL SELECT a, n FROM read_parquet('{t}') --",
                     f"a = $$x' OR a IN (SELECT a FROM read_csv('{t}')) --$$",
                     f"a = (SELECT MAX(a) FROM read_parquet('{t}'))"):
            answer = attempt({"source": f"s3://{BUCKET}/{PUBLIC}", "filter": text,
                              "output": f"s3://{RESULTS}/out/", "return_rows": True})
            assert isinstance(answer, QueryError), (text, answer)
            answers.append(answer)
    assert_nothing_outside(lake, bait, answers)
    got = invoke({"source": f"s3://{BUCKET}/{PUBLIC}", "filter": "a = 'x' -- note",
                  "output": f"s3://{RESULTS}/ok/", "return_rows": True})
    assert got["rows"] == DATA.filter(pl.col("a") == "x").to_dicts()


def test_s3_select_expressions_never_read_outside(lake: S3Env, bait: Bait) -> None:
    def select(sql: str) -> Any:
        return attempt({"Bucket": BUCKET, "Key": PUBLIC, "ExpressionType": "SQL",
                        "Expression": sql, "InputSerialization": {"Parquet": {}},
                        "OutputSerialization": {"JSON": {}}})
    answers = [select(sql) for sql in attacks(bait)]
    assert refused(answers[0])
    assert_nothing_outside(lake, bait, answers)
    ok = select("SELECT s.a FROM S3Object s WHERE s.a = 'x' --c\r OR s.a = 'y'")
    rows = [json.loads(line) for line in ok["Payload"].split("\n") if line]
    assert rows == DATA.filter(pl.col("a").is_in(["x", "y"])).select("a").to_dicts()


def test_the_workflow_never_reads_outside(lake: S3Env, bait: Bait) -> None:
    listed = lake.client.list_objects_v2(Bucket=BUCKET, Prefix="pub/")["Contents"]
    items = [{"Key": o["Key"], "Size": o["Size"], "Etag": o["ETag"]} for o in listed]
    output = f"s3://{RESULTS}/wf/"
    answers = []
    for i, sql in enumerate(attacks(bait)):
        answers.append(attempt({"Check": {"query": {"sql": sql}, "output": output}}))
        answers.append(attempt({"Items": items, "BatchInput": {
            "bucket": BUCKET, "query": {"sql": sql}, "output": output, "run": f"r{i}"}}))
        answers.append(attempt({"Reduce": {"run": f"r{i}", "query": {"sql": sql},
                                           "output": output, "batches": 1}}))
    assert refused(answers[0]) and refused(answers[1]) and refused(answers[2])
    assert_nothing_outside(lake, bait, answers)
    # A combining query beside them runs its partial plan over the batch, as SQL.
    sql = "SELECT a, COUNT(*) AS c FROM s3object WHERE n >= 2 --c\r OR n = 1\nGROUP BY a"
    invoke({"Items": items, "BatchInput": {"bucket": BUCKET, "query": {"sql": sql},
                                           "output": output, "run": "ok"}})
    reduced = invoke({"Reduce": {"run": "ok", "query": {"sql": sql}, "output": output,
                                 "batches": 1}})
    key = reduced["outputs"][0]["uri"]
    got = pl.read_parquet(lake.get(key)).sort("a")
    want = DATA.group_by("a").agg(pl.len().cast(got["c"].dtype).alias("c")).sort("a")
    assert got.equals(want)  # sqlglot's reading: every row (n >= 2 OR n = 1)
