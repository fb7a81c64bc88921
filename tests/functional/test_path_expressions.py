"""S3 Select's path expressions over nested records: dotted attributes (``s.b.c``), 0-based
array indexes (``s.tags[0]``) and both combined, in the SELECT list and in WHERE, over
JSON lines and nested Parquet. Each query runs through the engine against an oracle of
polars expressions on the same rows (``struct.field``, ``list.get``)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from s3slice import (
    Engine,
    FilterSyntaxError,
    FooterCache,
    LocalFetcher,
    QueryError,
    RecordingFetcher,
    Settings,
    UnknownColumnError,
)
from tests.support import read_request

BUCKET = "nested"
N = 600
c = pl.col
Oracle = Callable[[pl.DataFrame], pl.DataFrame]
S3 = "FROM S3Object s"


def records() -> list[dict[str, object]]:
    rng = random.Random(7)
    return [{
        "a": i,
        "c": -i,
        "b": {"c": f"x{i % 4}", "d": {"e": i % 50}},
        "tags": [f"t{i}-{j}" for j in range(i % 4)],
        "projects": [{"n": f"p{i}-{j}", "done": j % 2 == 0} for j in range(1 + i % 3)],
        "blob": "".join(rng.choice("abcdefghij") for _ in range(300)),
    } for i in range(N)]


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return pl.DataFrame(records())


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, table: pl.DataFrame) -> Path:
    root = tmp_path_factory.mktemp("paths")
    (root / BUCKET).mkdir()
    (root / BUCKET / "r.jsonl").write_text("\n".join(json.dumps(r) for r in records()) + "\n")
    table.write_parquet(root / BUCKET / "r.parquet", row_group_size=100, compression="zstd")
    return root


def run(root: Path, source: str, **query: object) -> tuple[pl.DataFrame, RecordingFetcher]:
    fetcher = RecordingFetcher(LocalFetcher(root))
    engine = Engine(Settings(memory_mb=1024), fetcher=fetcher,
                    footer_cache=FooterCache(1 << 20))
    return read_request(engine, {"source": f"s3://{BUCKET}/{source}", **query}).frame, fetcher


def field(path: str) -> pl.Expr:
    root, *steps = path.split(".")
    expr = c(root)
    for step in steps:
        expr = expr.struct.field(step)
    return expr


CASES: list[tuple[str, str, Oracle]] = [
    ("attribute and filter", f"SELECT s.a, s.b.c {S3} WHERE s.a > 290",
     lambda t: t.filter(c("a") > 290).select("a", field("b.c").alias("c"))),
    ("filter on an attribute", f"SELECT s.a {S3} WHERE s.b.c = 'x1'",
     lambda t: t.filter(field("b.c") == "x1").select("a")),
    ("0-based index, named by position", f"SELECT s.a, s.tags[0] {S3}",
     lambda t: t.select("a", c("tags").list.get(0, null_on_oob=True).alias("_2"))),
    ("second element, aliased", f"SELECT s.tags[1] AS second {S3} WHERE s.a < 40",
     lambda t: t.filter(c("a") < 40).select(
         c("tags").list.get(1, null_on_oob=True).alias("second"))),
    ("index past the end and negative are null", f"SELECT s.a, s.tags[7] AS x, "
     f"s.tags[-1] AS y {S3}",
     lambda t: t.select("a", pl.lit(None, pl.String).alias("x"),
                        pl.lit(None, pl.String).alias("y"))),
    ("index then attribute", f"SELECT s.projects[1].n {S3}",
     lambda t: t.select(c("projects").list.get(1, null_on_oob=True).struct.field("n"))),
    ("three levels in WHERE", f"SELECT s.a, s.b.d.e {S3} WHERE s.b.d.e BETWEEN 10 AND 12",
     lambda t: t.filter(field("b.d.e").is_between(10, 12)).select("a", field("b.d.e"))),
    ("quoted attribute in brackets", f"SELECT s.b['c'] AS bc {S3} WHERE s.a = 5",
     lambda t: t.filter(c("a") == 5).select(field("b.c").alias("bc"))),
    ("unqualified path", "SELECT b.c FROM s3object WHERE a = 7",
     lambda t: t.filter(c("a") == 7).select(field("b.c"))),
    ("table-qualified path", "SELECT s3object.b.d.e FROM s3object WHERE s3object.a = 7",
     lambda t: t.filter(c("a") == 7).select(field("b.d.e"))),
    ("a taken name falls back to the position", f"SELECT s.c, s.b.c {S3} WHERE s.a < 3",
     lambda t: t.filter(c("a") < 3).select("c", field("b.c").alias("_2"))),
    ("star keeps the records whole", f"SELECT * {S3} WHERE s.b.d.e = 3",
     lambda t: t.filter(field("b.d.e") == 3)),
    ("aggregate over a path", f"SELECT MAX(s.b.d.e) AS top, COUNT(s.tags[2]) AS n {S3}",
     lambda t: t.select(field("b.d.e").max().alias("top"),
                        c("tags").list.get(2, null_on_oob=True).count().cast(pl.UInt32)
                        .alias("n"))),
    ("group by a path", f"SELECT s.b.c, COUNT(*) AS n {S3} GROUP BY s.b.c ORDER BY s.b.c",
     lambda t: t.group_by(field("b.c").alias("c")).agg(pl.len().cast(pl.UInt32).alias("n"))
     .sort("c")),
    ("nulls last after DESC over a path",
     f"SELECT s.a, s.tags[2] AS t {S3} WHERE s.a < 12 ORDER BY s.tags[2] DESC NULLS LAST, s.a",
     lambda t: t.filter(c("a") < 12).select("a", c("tags").list.get(2, null_on_oob=True)
                                            .alias("t"))
     .sort(["t", "a"], descending=[True, False], nulls_last=True)),
    ("boolean inside a list of records", f"SELECT s.a {S3} WHERE s.projects[2].done",
     lambda t: t.filter(c("projects").list.get(2, null_on_oob=True).struct.field("done"))
     .select("a")),
]


@pytest.mark.parametrize("source", ["r.jsonl", "r.parquet"])
@pytest.mark.parametrize(("name", "sql", "expected"), CASES, ids=[x[0] for x in CASES])
def test_path_matches_the_oracle(root: Path, table: pl.DataFrame, source: str, name: str,
                                 sql: str, expected: Oracle) -> None:
    got, _ = run(root, source, sql=sql)
    want = expected(table)
    assert got.columns == want.columns, name
    if "ORDER BY" not in sql:
        got, want = got.sort(got.columns), want.sort(want.columns)
    assert got.to_dicts() == want.to_dicts(), name


def test_a_filter_request_takes_paths_too(root: Path, table: pl.DataFrame) -> None:
    got, _ = run(root, "r.jsonl", filter="b.c = 'x2' AND s3object.tags[0] IS NOT NULL",
                 columns=["a"])
    want = table.filter((field("b.c") == "x2") & c("tags").list.get(0, null_on_oob=True)
                        .is_not_null()).select("a")
    assert got.to_dicts() == want.to_dicts()


def test_only_the_root_column_is_fetched(root: Path, table: pl.DataFrame) -> None:
    """``s.b.c`` plans the chunks of column b, not the wide ``blob`` nor any other."""
    fetcher = RecordingFetcher(LocalFetcher(root))
    engine = Engine(Settings(memory_mb=1024), fetcher=fetcher,
                    footer_cache=FooterCache(1 << 20))
    result = read_request(engine, {"source": f"s3://{BUCKET}/r.parquet",
                          "sql": f"SELECT s.b.c {S3} WHERE s.b.d.e = 1"})
    assert result.frame["c"].to_list() == table.filter(field("b.d.e") == 1)[
        "b"].struct.field("c").to_list()
    md = pq.ParquetFile(root / BUCKET / "r.parquet").metadata
    sizes: dict[str, int] = {}
    for g in range(md.num_row_groups):
        for i in range(md.num_columns):
            col = md.row_group(g).column(i)
            root_name = col.path_in_schema.split(".")[0]
            sizes[root_name] = sizes.get(root_name, 0) + col.total_compressed_size
    assert result.stats.needed_bytes == sizes["b"]
    assert sizes["blob"] > 20 * sizes["b"]


@pytest.mark.parametrize(("sql", "error", "needle"), [
    (f"SELECT s.b.zz {S3}", UnknownColumnError, "'b.zz'"),
    (f"SELECT s.a.x {S3}", QueryError, "not a record"),
    (f"SELECT s.b[0] {S3}", QueryError, "not a list"),
    (f"SELECT s.tags[s.a] {S3}", FilterSyntaxError, "whole-number literal"),
    (f"SELECT s.nope.c {S3}", UnknownColumnError, "'nope'"),
])
def test_bad_paths_name_the_problem(root: Path, sql: str, error: type[Exception],
                                    needle: str) -> None:
    with pytest.raises(error, match=needle):
        run(root, "r.jsonl", sql=sql)


@pytest.mark.parametrize(("sql", "leaves"), [
    (f"SELECT s.b.c {S3} WHERE s.a >= 0", {"a", "b.c"}),
    (f"SELECT s.b.d.e, s.a {S3}", {"a", "b.d.e"}),
    (f"SELECT s.b.c, s.b {S3} WHERE s.a >= 0", {"a", "b.c", "b.d.e"}),  # b named whole
    (f"SELECT s.projects[1].n {S3} WHERE s.a >= 0",
     {"a", "projects.list.element.n", "projects.list.element.done"}),  # indexed at its root
])
def test_a_path_reads_only_the_leaves_it_names(root: Path, table: pl.DataFrame, sql: str,
                                               leaves: set[str]) -> None:
    """Projection pushdown to the nested field: of a struct column read only through
    attribute paths, only those fields' column chunks are fetched (every row group is kept
    here); the answer is the oracle's all the same."""
    fetcher = RecordingFetcher(LocalFetcher(root))
    engine = Engine(Settings(memory_mb=1024, strategy="ranges"), fetcher=fetcher,
                    footer_cache=FooterCache(1 << 20))
    result = read_request(engine, {"source": f"s3://{BUCKET}/r.parquet", "sql": sql})
    md = pq.ParquetFile(root / BUCKET / "r.parquet").metadata
    sizes: dict[str, int] = {}
    for g in range(md.num_row_groups):
        for i in range(md.num_columns):
            col = md.row_group(g).column(i)
            sizes[col.path_in_schema] = sizes.get(col.path_in_schema, 0) + col.total_compressed_size
    assert result.stats.needed_bytes == sum(sizes[leaf] for leaf in leaves)
    want, _ = run(root, "r.jsonl", sql=sql)
    assert result.frame.to_dicts() == want.to_dicts()
