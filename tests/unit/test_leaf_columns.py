"""Leaf columns belong to their top-level column by the schema's shape, never by splitting
their dotted path (a top-level name may hold a dot), and a plan whose chunks miss one the
decoders read fails before any fetch."""

from __future__ import annotations

import dataclasses
import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3slice.core.errors import ObjectError
from s3slice.core.model import ObjectRef
from s3slice.core.settings import Settings
from s3slice.parquet.footer import Footer, leaf_tops, nested_columns, parse_footer, under_any
from s3slice.parquet.plan import plan_parquet
from s3slice.parquet.read_ahead import check_planned, fetch_groups
from s3slice.query.pruning.predicate import TRUE

URI = "s3://b/k.parquet"

TABLE = pa.table({
    "user.id": [1, 2], "x": [1.0, 2.0], "user": [{"id": 7}, {"id": 8}],
    "s": [{"a": {"b": 1}, "user.id": 3}] * 2, "m": pa.array([[("k", 1)]] * 2,
                                                          pa.map_(pa.string(), pa.int64())),
    "l": [[{"q": 1, "r": [2]}]] * 2, "a.b.c": ["p", "q"],
})


def footer_of(table: pa.Table) -> Footer:
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=1)
    data = buf.getvalue()
    return parse_footer(data, size=len(data), uri=URI)


def test_each_leaf_belongs_to_its_top_level_column() -> None:
    footer = footer_of(TABLE)
    md = footer.metadata
    paths = [md.schema.column(i).path for i in range(md.num_columns)]
    assert paths == ["user.id", "x", "user.id", "s.a.b", "s.user.id", "m.key_value.key",
                     "m.key_value.value", "l.list.element.q", "l.list.element.r.list.element",
                     "a.b.c"]
    assert leaf_tops(md) == ("user.id", "x", "user", "s", "s", "m", "m", "l", "l", "a.b.c")
    assert footer.leaf_tops == leaf_tops(md)
    assert nested_columns(md) == {"user", "s", "m", "l"}
    assert footer.shared_paths == {"user.id"}


@pytest.mark.parametrize("columns", [["user.id"], ["a.b.c"], ["user"], ["x", "a.b.c"]])
def test_a_plan_fetches_every_leaf_the_decoders_read(columns: list[str]) -> None:
    footer = footer_of(TABLE)
    plan = plan_parquet(footer, columns=columns, predicate=TRUE, uri=URI)
    check_planned(plan, plan.row_groups, URI)  # the plan holds what the decoders read
    md = footer.metadata
    got = pq.ParquetFile(io.BytesIO(b"PAR1" + footer.raw), metadata=md).schema_arrow
    assert set(columns) <= set(got.names)
    # The top-level column's own leaves are among the chunks (``a.b.c`` is not split).
    tops = leaf_tops(md)
    for g in plan.row_groups:
        want = {i for i, t in enumerate(tops) if t in columns}
        assert len(plan.chunks[g]) >= len(want)


def test_a_plan_missing_a_chunk_fails_before_any_fetch() -> None:
    footer = footer_of(TABLE)
    plan = plan_parquet(footer, columns=["x", "a.b.c"], predicate=TRUE, uri=URI)
    short = dataclasses.replace(plan, chunks={g: r[:1] for g, r in plan.chunks.items()})
    with pytest.raises(ObjectError, match="column 'a.b.c' of row group 0 would be decoded"):
        check_planned(short, short.row_groups, URI)

    class NoFetch:
        settings = Settings()

        def fetch(self, *args: object) -> None:
            raise AssertionError("fetched")
    with pytest.raises(ObjectError, match="nothing unfetched is decoded"):
        fetch_groups(NoFetch(), ObjectRef(bucket="b", key="k.parquet"), None,  # type: ignore[arg-type]
                     short)


@pytest.mark.parametrize(("path", "names", "under"), [
    ("a.b.c", {"a"}, True), ("a.b.c", {"a.b"}, True), ("a.b.c", {"a.b.c"}, True),
    ("a.bc", {"a.b"}, False), ("ab", {"a"}, False), ("a", {"a.b"}, False),
    ("user.id", {"user.id"}, True), ("user.id.x", {"user.id"}, True), ("user", set(), False),
])
def test_under_any_is_a_dotted_prefix(path: str, names: set[str], under: bool) -> None:
    assert under_any(path, names) is under
