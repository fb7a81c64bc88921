"""Objects of a many-object read that lack a column the query names
(:mod:`s3slice.engine.lacking`), with stand-in reads: the column is null there, typed as
where it exists; a column no object has stays the UnknownColumnError of an object lacking
just it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import polars as pl
import pytest

from s3slice import ObjectRef, Query, UnknownColumnError
from s3slice.engine.lacking import Item, read_all
from s3slice.query.analysis import Analysis, collect
from s3slice.query.analyzer import analyze
from s3slice.readers.base import ObjectResult

FRAMES = {
    "a": pl.DataFrame({"x": [1, 2, 3], "y": ["p", None, "q"]}),
    "b": pl.DataFrame({"x": [4, 5]}),
    "c": pl.DataFrame({"x": [6], "z": [1.5]}),
}


def reader(calls: list[str]) -> Callable[[Item], ObjectResult]:
    """A stand-in read: the object's frame through the analysis, as a reader does."""
    def one(item: Item) -> ObjectResult:
        obj, analysis = item
        calls.append(obj.key)
        frame = FRAMES[obj.key]
        columns = analysis.needed_columns(frame.columns, source=obj.uri)
        out = collect(analysis.prefilter(frame.select(columns).lazy()))
        return ObjectResult(obj=obj, frame=out, size=0, row_groups=0, row_groups_read=0,
                            rows_in=frame.height, needed_bytes=0, strategy="test", inputs={})
    return one


def run(fn: Callable[[Item], Any], items: list[Item]) -> list[Any]:
    return [fn(item) for item in items]


def types_of(obj: ObjectRef, names: Sequence[str]) -> dict[str, pl.DataType]:
    schema = FRAMES[obj.key].schema
    return {n: schema[n] for n in names if n in schema}


def work(analysis: Analysis, *keys: str) -> list[Item]:
    return [(ObjectRef(bucket="b", key=k), analysis) for k in keys]


@pytest.mark.parametrize("query", [
    Query(columns=("x", "y"), filter="y IS NULL"),
    Query(columns=("x",), filter="y IS NULL"),  # y in no read frame: typed by its schema
    Query(columns=("x", "y")),
])
def test_a_lacking_column_is_null_typed_as_where_it_exists(query: Query) -> None:
    calls: list[str] = []
    results = read_all(work(analyze(query), "a", "b"), reader(calls), run, types_of)
    assert calls == ["a", "b", "b"]  # b again, with y null
    got = pl.concat([r.frame for r in results])
    both = pl.concat([FRAMES["a"], FRAMES["b"]], how="diagonal")
    want = both.filter(pl.sql_expr(query.filter)) if query.filter else both
    assert got.equals(want.select(list(query.columns or ())))
    if "y" in got.columns:
        assert got.schema["y"] == pl.String


def test_a_column_no_object_has_is_unknown_naming_an_object_lacking_just_it() -> None:
    analysis = analyze(Query(columns=("x", "y", "w")))
    with pytest.raises(UnknownColumnError, match=r"unknown column 'w' in s3://b/a") as info:
        read_all(work(analysis, "b", "a"), reader([]), run, types_of)
    assert info.value.columns == ["w"]


def test_columns_each_some_object_has_are_null_where_lacking() -> None:
    analysis = analyze(Query(columns=("x", "y", "z")))
    results = read_all(work(analysis, "a", "c"), reader([]), run, types_of)
    got = pl.concat([r.frame for r in results])
    assert got.schema == pl.Schema({"x": pl.Int64, "y": pl.String, "z": pl.Float64})
    assert got.to_dicts()[-1] == {"x": 6, "y": None, "z": 1.5}


def test_one_object_lacking_a_column_is_unknown() -> None:
    with pytest.raises(UnknownColumnError, match="'y'"):
        read_all(work(analyze(Query(columns=("y",))), "b"), reader([]), run, types_of)
