"""``s3slice.query.paths``: S3 Select path expressions found in a parsed query, rewritten
into columns of their own, named as S3 Select names them, and computed over the data."""

from __future__ import annotations

import polars as pl
import pytest
import sqlglot

from s3slice.core.errors import FilterSyntaxError, QueryError, UnknownColumnError
from s3slice.query.paths import (
    PATH_PREFIX,
    Path,
    with_paths,
)
from s3slice.query.sqlglot.dialect import S3SelectDialect
from s3slice.query.sqlglot.path_rewrite import PathRewriter, column_names, path_of, qualifiers_of
from s3slice.query.sqlglot.sql import parse

ROWS = pl.DataFrame({"s": [{"b": [{"c": 1}, {"c": 2}]}, {"b": []}, None],
                     "l": [[1, 2], [3], []], "n": [1, 2, 3]})


def test_path_text_and_label() -> None:
    assert Path("x", "s", ("b", 0, "c")).text == "s.b[0].c"
    assert Path("x", "s", ("b", 0, "c")).label == "c"
    assert Path("x", "s", ("b", 1)).label is None  # named by position


def test_with_paths_computes_each_path() -> None:
    paths = [Path("x", "s", ("b", 0, "c")), Path("z", "l", (1,)), Path("w", "l", (-1,))]
    out = with_paths(ROWS.lazy(), paths).collect()
    assert out.columns == ["s", "l", "n", "x", "z", "w"]
    # Out of range, a null record or a negative index: null, never an error.
    assert out["x"].to_list() == [1, None, None]
    assert out["z"].to_list() == [2, None, None]
    assert out["w"].to_list() == [None, None, None]
    assert out.schema["x"] == pl.Int64 and out.schema["w"] == pl.Int64


def test_with_paths_over_fixed_size_arrays() -> None:
    rows = pl.DataFrame({"a": [[1, 2], [3, 4]]}, schema={"a": pl.Array(pl.Int64, 2)})
    out = with_paths(rows.lazy(), [Path("p", "a", (1,)), Path("q", "a", (5,))]).collect()
    assert out["p"].to_list() == [2, 4]
    assert out["q"].to_list() == [None, None]


@pytest.mark.parametrize(("path", "error", "message"), [
    (Path("q", "n", ("x",)), QueryError, "n.x: n is Int64, not a record, so it has no "
                                         "attribute 'x'"),
    (Path("q", "n", (0,)), QueryError, "n[0]: n is Int64, not a list, so it cannot be indexed"),
    (Path("q", "s", ("nope",)), UnknownColumnError, "unknown column 's.nope' in the record s; "
                                                    "available: b"),
    (Path("q", "s", ("b", 0, "d")), UnknownColumnError, "unknown column 's.b[0].d'"),
])
def test_a_step_the_data_cannot_take_is_named(path: Path, error: type[Exception],
                                              message: str) -> None:
    with pytest.raises(error) as caught:
        with_paths(ROWS.lazy(), [path])
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(("text", "found"), [
    ("a", ("a", ())),
    ("s.b.c", ("b", ("c",))),  # s is a qualifier
    ("s.b[0].c", ("b", (0, "c"))),
    ("s3object.s.b", ("s", ("b",))),
    ("s.b['c']", ("b", ("c",))),  # a quoted attribute is an attribute
    ("x.y", ("x", ("y",))),  # x is not a qualifier: a column with a field
    ("b[0]", ("b", (0,))),
])
def test_path_of(text: str, found: tuple[str, tuple[str | int, ...]]) -> None:
    assert path_of(sqlglot.parse_one(text, read=S3SelectDialect), {"s", "s3object"}) == found


def test_path_of_a_star_or_a_call_is_none() -> None:
    assert path_of(sqlglot.parse_one("SELECT *").expressions[0], set()) is None
    assert path_of(sqlglot.parse_one("f(a)"), set()) is None


def test_an_index_must_be_a_literal() -> None:
    with pytest.raises(FilterSyntaxError, match="an index must be a whole-number literal"):
        path_of(sqlglot.parse_one("s.b[i]"), {"s"})


def test_qualifiers_are_tables_aliases_and_named_subqueries() -> None:
    tree = parse("WITH w AS (SELECT * FROM s3object) SELECT * FROM w AS v", "sql")
    assert qualifiers_of(tree) == {"s3object", "w", "v"}


def test_rewrite_and_label() -> None:
    tree = parse("SELECT s.b.c, s.b.c + 1, s.t[0], s.t[0] AS z, * FROM s3object s "
                 "WHERE s.b.c > 1", "sql")
    rewriter = PathRewriter(qualifiers_of(tree))
    out, used = rewriter.rewrite(tree)
    assert used == (Path(f"{PATH_PREFIX}0", "b", ("c",)), Path(f"{PATH_PREFIX}1", "t", (0,)))
    rewriter.label(out)
    # The same path is one column; unnamed outputs are named as S3 Select names them; the
    # path columns stay out of ``*``.
    assert out.sql() == (
        'SELECT "__s3slice_path_0" AS "c", "__s3slice_path_0" + 1 AS "_2", '
        '"__s3slice_path_1" AS "_3", "__s3slice_path_1" AS z, '
        '* EXCEPT ("__s3slice_path_0", "__s3slice_path_1") FROM s3object AS s '
        'WHERE "__s3slice_path_0" > 1')
    assert column_names(out) == set()  # only path columns: their roots are in ``used``


def test_rewrite_leaves_plain_columns() -> None:
    tree = sqlglot.parse_one("a > 1 AND s3object.b = 2")
    out, used = PathRewriter({"s3object"}).rewrite(tree)
    assert used == ()
    assert out.sql() == tree.sql()
    assert column_names(out) == {"a", "b"}
