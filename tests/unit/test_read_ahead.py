"""A streamed read's row groups fetched ahead of their decode (:mod:`s3slice.parquet.read_ahead`):
windows of consecutive groups, the bytes held within the bound, every window decoded by
polars from an image that holds that window alone, with rows equal to a local read's."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from s3slice import LocalFetcher, ObjectRef, Query, Settings
from s3slice.core.ranges import Range
from s3slice.fetch.base import PartSink
from s3slice.fetch.image import Unwritten
from s3slice.parquet.decode import decode
from s3slice.parquet.footer import parse_footer
from s3slice.parquet.plan import Plan, plan_parquet
from s3slice.parquet.read_ahead import ReadAhead, Window, windows
from s3slice.query.analyzer import analyze
from s3slice.readers.base import Io
from tests.unit.parquet_samples import parquet_bytes

ROWS, GROUP = 12_000, 1_000


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 100)), max_size=40),
       st.integers(1, 400))
def test_windows_are_runs_of_consecutive_groups_within_half_the_bound(
        groups: list[tuple[bool, int]], limit: int) -> None:
    sizes = {g: n for g, (kept, n) in enumerate(groups) if kept}
    out = windows(sizes, limit)
    assert [g for w in out for g in w.groups] == list(sizes)  # every kept group, in order
    for w in out:
        assert list(w.groups) == list(range(w.groups[0], w.groups[-1] + 1))
        assert w.nbytes == sum(sizes[g] for g in w.groups)
        assert w.nbytes <= max(1, limit // 2) or len(w.groups) == 1
    for a, b in itertools.pairwise(out):  # a window ends only where it must
        consecutive = b.groups[0] == a.groups[-1] + 1
        assert not consecutive or a.nbytes + sizes[b.groups[0]] > max(1, limit // 2)


class _Watching:
    """A fetcher that notes, as each window's fetch starts, the bytes then held by the
    read: every window started and not yet released."""

    def __init__(self, inner: LocalFetcher, plan: Plan) -> None:
        self.inner = inner
        self.counters = inner.counters
        self.lock = threading.Lock()
        self.started = 0
        self.released = 0
        self.held_at_start: list[tuple[int, int]] = []  # (held, this window's bytes)
        #: Each kept group's first chunk's start, and the group's needed bytes.
        self._groups = [(min(a for a, _ in plan.chunks[g]), plan.group_bytes(g))
                        for g in plan.row_groups]

    def get_ranges(self, obj: ObjectRef, ranges: Sequence[Range], *, etag: str | None,
                   sink: PartSink, concurrency: int) -> None:
        nbytes = sum(n for at, n in self._groups if any(a <= at < b for a, b in ranges))
        with self.lock:
            self.started += nbytes
            self.held_at_start.append((self.started - self.released, nbytes))
        self.inner.get_ranges(obj, ranges, etag=etag, sink=sink, concurrency=concurrency)


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return pl.DataFrame({"a": range(ROWS), "b": [i * 7 % 1000 for i in range(ROWS)],
                         "c": [f"s{i % 13}" for i in range(ROWS)]})


def _setup(tmp_path: Path, table: pl.DataFrame, columns: list[str], where: str | None
           ) -> tuple[ObjectRef, Plan, LocalFetcher]:
    data = parquet_bytes(table, row_group_size=GROUP, compression="zstd")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "t.parquet").write_bytes(data)
    obj = ObjectRef(bucket="b", key="t.parquet", size=len(data))
    footer = parse_footer(data, size=len(data), uri=obj.uri)
    analysis = analyze(Query(columns=tuple(columns), filter=where))
    needed = analysis.needed_columns(footer.schema_names, source=obj.uri)
    plan = plan_parquet(footer, columns=needed, predicate=analysis.predicate, uri=obj.uri)
    return obj, plan, LocalFetcher(tmp_path)


@pytest.mark.parametrize("limit_groups", [1, 2, 3, 5, 100])
@pytest.mark.parametrize(("columns", "where"), [
    (["a", "c"], "b < 300"), (["b"], None), (["a", "b", "c"], "c = 's3' AND a >= 2500"),
])
def test_windows_decode_to_the_oracle_within_the_bound(
        tmp_path: Path, table: pl.DataFrame, limit_groups: int, columns: list[str],
        where: str | None) -> None:
    obj, plan, local = _setup(tmp_path, table, columns, where)
    sizes = {g: plan.group_bytes(g) for g in plan.row_groups}
    limit = limit_groups * max(sizes.values())
    fetcher = _Watching(local, plan)
    io = Io(settings=Settings(memory_mb=1024), fetcher=fetcher,  # type: ignore[arg-type]
            deadline=lambda: None)
    analysis = analyze(Query(columns=tuple(columns), filter=where))
    ahead = ReadAhead(io, obj, None, plan, windows(sizes, limit), limit)
    pieces, decoders = [], set()
    try:
        while (taken := ahead.take()) is not None:
            window, image = taken
            others = [r for g in plan.row_groups if g not in window.groups
                      for r in plan.chunks[g]]
            with image.source() as f:  # the image holds this window's groups alone
                for a, b in others:
                    assert not image.holds(a, b)
                    f.seek(a)
                    with pytest.raises(Unwritten):  # and never reads another's as zeros
                        f.read(b - a)
            frame, decoder = decode(obj, image, plan, window.groups, analysis)
            pieces.append(frame)
            decoders.add(decoder)
            with fetcher.lock:
                fetcher.released += window.nbytes
            ahead.release(window, image)
    finally:
        ahead.close()
    assert decoders == {"polars"}
    got = pl.concat(pieces)
    want = table.filter(pl.sql_expr(where)) if where else table
    assert set(columns) <= set(got.columns)
    assert got.equals(want.select(got.columns))
    assert len(fetcher.held_at_start) == len(windows(sizes, limit))
    for held, nbytes in fetcher.held_at_start:
        assert held <= limit or held == nbytes  # within the bound, or the one window held


def test_a_failed_fetch_raises_and_the_others_are_waited_for(
        tmp_path: Path, table: pl.DataFrame) -> None:
    obj, plan, local = _setup(tmp_path, table, ["a"], None)
    calls: list[int] = []
    gate = threading.Event()

    class Failing:
        counters = local.counters

        def get_ranges(self, obj: ObjectRef, ranges: Sequence[Range], *, etag: str | None,
                       sink: PartSink, concurrency: int) -> None:
            calls.append(ranges[0][0])
            if len(calls) == 1:
                gate.wait(5)
                raise OSError("the first window cannot be had")
            gate.set()
            local.get_ranges(obj, ranges, etag=etag, sink=sink, concurrency=concurrency)

    sizes = {g: plan.group_bytes(g) for g in plan.row_groups}
    io = Io(settings=Settings(memory_mb=1024), fetcher=Failing(),  # type: ignore[arg-type]
            deadline=lambda: None)
    limit = 4 * max(sizes.values())
    wins: list[Window] = windows(sizes, limit)
    # The windows started at once: as many as fit the bound together.
    fit = next(k for k in range(len(wins), 0, -1)
               if sum(w.nbytes for w in wins[:k]) <= limit)
    assert 2 <= fit < len(wins)
    ahead = ReadAhead(io, obj, None, plan, wins, limit)
    with pytest.raises(OSError, match="first window"):
        ahead.take()
    ahead.close()
    assert len(calls) == fit  # the one behind it ran; none beyond the bound started
    # close() waited for them: no fetch thread is left, and none starts later.
    assert not [t for t in threading.enumerate() if t.name.startswith("s3slice-ahead")]
    time.sleep(0.2)
    assert len(calls) == fit
