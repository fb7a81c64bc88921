"""Bloom filters: row groups that cannot hold an ``=``/IN value are not fetched, and the
answer is always polars' answer."""

from __future__ import annotations

import datetime as dt
import random
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import s3slice.parquet.bloom
from s3slice import Engine, FooterCache, LocalFetcher, QueryError, RecordingFetcher, Settings
from s3slice.parquet.bloom import BloomFilter, parse
from tests.support import read_request
from tests.unit.test_pruning import CONSTANTS, TYPED, polars_answer

BUCKET = "data"
ROWS = 40_000
GROUPS = 8


def table() -> pa.Table:
    rng = random.Random(11)
    ids = rng.sample(range(ROWS * 10), ROWS)  # unsorted: min/max prune nothing
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "id32": pa.array([x % 2_000_000_000 for x in ids], pa.int32()),
        "uid": pa.array(ids, pa.uint64()),
        "key": pa.array([f"k-{x}" for x in ids]),
        "day": pa.array([dt.date(2000, 1, 1) + dt.timedelta(days=int(x % 9000)) for x in ids],
                        pa.date32()),
        "v": pa.array([rng.random() for _ in range(ROWS)]),
    })


BLOOM = {c: {"ndv": ROWS // GROUPS, "fpp": 0.01} for c in ("id", "id32", "uid", "key", "day")}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bloom")
    (root / BUCKET).mkdir()
    pq.write_table(table(), root / BUCKET / "b.parquet", row_group_size=ROWS // GROUPS,
                   bloom_filter_options=BLOOM)
    pq.write_table(table(), root / BUCKET / "plain.parquet", row_group_size=ROWS // GROUPS)
    return root


def read(root: Path, where: str, key: str = "b.parquet", **kw: Any
         ) -> tuple[pl.DataFrame, dict[str, Any], RecordingFetcher]:
    base: dict[str, Any] = {"memory_mb": 2048, "strategy": "ranges"}
    base.update(kw)
    fetcher = RecordingFetcher(LocalFetcher(root))
    engine = Engine(Settings(**base), fetcher=fetcher, footer_cache=FooterCache(1 << 20))
    result = read_request(engine, {"source": f"s3://{BUCKET}/{key}", "columns": ["id", "v"],
                          "filter": where})
    return result.frame, result.stats.to_dict(), fetcher


def oracle(root: Path, where: str) -> pl.DataFrame:
    return pl.read_parquet(root / BUCKET / "b.parquet").filter(pl.sql_expr(where)).select(
        "id", "v")


def groups_holding(root: Path, column: str, values: list[Any]) -> int:
    md = pq.read_metadata(root / BUCKET / "b.parquet")
    t = pq.read_table(root / BUCKET / "b.parquet", columns=[column]).column(0).to_pylist()
    size = md.row_group(0).num_rows
    return len({i // size for i, x in enumerate(t) if x in values})


def test_an_absent_value_fetches_no_row_group(root: Path) -> None:
    present = pq.read_table(root / BUCKET / "b.parquet", columns=["id"]).column(0).to_pylist()
    absent = next(x for x in range(200_000, 300_000) if x not in set(present))
    where = f"id = {absent}"
    frame, stats, _ = read(root, where)
    assert frame.height == 0 and frame.equals(oracle(root, where))
    bloom = stats["strategy_inputs"]["bloom_filters"]
    assert bloom["used"] is True and bloom["row_groups_before"] == GROUPS
    assert stats["row_groups_read"] <= 1  # a false positive at fpp 0.01 is possible
    # without filters, every row group's statistics admit the value
    _, plain, _ = read(root, where, key="plain.parquet")
    assert plain["row_groups_read"] == GROUPS
    assert "bloom_filters" not in plain["strategy_inputs"]


@pytest.mark.parametrize("column", ["id", "id32", "uid", "key", "day"])
def test_each_type_keeps_exactly_the_groups_a_value_is_in(root: Path, column: str) -> None:
    values = pq.read_table(root / BUCKET / "b.parquet", columns=[column]).column(0).to_pylist()
    chosen = [values[5], values[ROWS // 2 + 3]]  # in row groups 0 and 4
    literal = {"key": lambda x: f"'{x}'", "day": lambda x: f"DATE '{x.isoformat()}'"}.get(
        column, str)
    where = f"{column} IN ({', '.join(literal(x) for x in chosen)})"
    frame, stats, _ = read(root, where)
    assert frame.equals(oracle(root, where))
    assert stats["strategy_inputs"]["bloom_filters"]["used"] is True
    holding = groups_holding(root, column, chosen)
    assert holding <= stats["row_groups_read"] <= holding + 1  # at most one false positive


def test_or_with_a_range_keeps_what_the_range_needs(root: Path) -> None:
    where = "id = 200001 OR v < 0.01"
    frame, stats, _ = read(root, where)
    assert frame.equals(oracle(root, where))
    assert stats["row_groups_read"] == GROUPS  # v's statistics admit every group


def test_filters_too_large_for_the_read_are_not_fetched(root: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # The filters come to about a tenth of the bytes of ``id`` and ``v``: allowed a
    # twentieth, they are not read.
    monkeypatch.setattr(s3slice.parquet.bloom, "MAX_SHARE", 0.05)
    where = "id = 200001"
    frame, stats, rec = read(root, where)
    assert frame.equals(oracle(root, where))
    bloom = stats["strategy_inputs"]["bloom_filters"]
    assert bloom["used"] is False and "row_groups_after" not in bloom
    assert bloom["filter_bytes"] > 0.05 * stats["needed_bytes"]
    assert stats["row_groups_read"] == GROUPS
    md = pq.read_metadata(root / BUCKET / "b.parquet")
    filters = [(c.bloom_filter_offset, c.bloom_filter_offset + c.bloom_filter_length)
               for g in range(md.num_row_groups) for c in [md.row_group(g).column(0)]]
    assert not any(a < end and start < b for start, end in rec.ranges() for a, b in filters)


def test_a_column_without_filters_reads_none(root: Path) -> None:
    frame, stats, _ = read(root, "v = 0.5")
    assert frame.equals(oracle(root, "v = 0.5"))
    assert "bloom_filters" not in stats["strategy_inputs"]


@pytest.mark.parametrize("where", ["f = 5.5", "ts = TIMESTAMP '2024-01-01 00:05:00.5'"])
def test_filters_whose_literals_cannot_be_hashed_are_not_fetched(tmp_path: Path,
                                                                where: str) -> None:
    # Floats and timestamps are left to statistics: their filters would be read for nothing.
    (tmp_path / BUCKET).mkdir()
    path = tmp_path / BUCKET / "t.parquet"
    n = 40_000
    start = dt.datetime(2024, 1, 1)
    pq.write_table(pa.table({
        "f": pa.array([float(i % 977) for i in range(n)]),
        "ts": pa.array([start + dt.timedelta(seconds=i % 977) for i in range(n)],
                       pa.timestamp("us")),
        "v": pa.array(range(n)),
    }), path, row_group_size=5_000, bloom_filter_options={c: {"ndv": 1000, "fpp": 0.01}
                                                          for c in ("f", "ts")})
    fetcher = RecordingFetcher(LocalFetcher(tmp_path))
    # a suffix read that holds the footer alone: the filters would cost a GET of their own
    engine = Engine(Settings(memory_mb=2048, strategy="ranges", footer_size=4096),
                    fetcher=fetcher, footer_cache=FooterCache(1 << 20))
    result = read_request(engine, {"source": f"s3://{BUCKET}/t.parquet", "columns": ["v"],
                          "filter": where})
    assert result.frame.equals(pl.read_parquet(path).filter(pl.sql_expr(where)).select("v"))
    assert "bloom_filters" not in result.stats.strategy_inputs
    md = pq.read_metadata(path)
    filters = [(c.bloom_filter_offset, c.bloom_filter_offset + c.bloom_filter_length)
               for g in range(md.num_row_groups) for i in range(md.num_columns)
               for c in [md.row_group(g).column(i)] if c.bloom_filter_offset]
    assert filters  # the file has them
    assert not any(a < end and start < b for start, end in fetcher.ranges()
                   for a, b in filters)


def test_the_bitset_check_matches_pyarrows_own_filter() -> None:
    # pyarrow's filter for a single value: that value is found, and about 99 % of others
    # are not (fpp 0.01).
    import io
    import struct

    buf = io.BytesIO()
    pq.write_table(pa.table({"x": pa.array([42], pa.int64())}), buf,
                   bloom_filter_options={"x": {"ndv": 1, "fpp": 0.01}})
    data = buf.getvalue()
    md = pq.read_metadata(pa.BufferReader(data))
    col = md.row_group(0).column(0)
    start = col.bloom_filter_offset
    bloom = parse(data[start:start + col.bloom_filter_length], uri="u")
    assert isinstance(bloom, BloomFilter)
    assert bloom.might_contain(struct.pack("<q", 42))
    misses = sum(not bloom.might_contain(struct.pack("<q", x)) for x in range(1000, 3000))
    assert misses > 1900


@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.integers(0, ROWS * 10), min_size=1, max_size=4),
       negate=st.booleans(), extra=st.sampled_from(["", " AND v < 0.5", " OR id < 50"]))
def test_equality_and_in_equal_polars(root: Path, values: list[int], negate: bool,
                                      extra: str) -> None:
    atom = f"id IN ({', '.join(map(str, values))})" if len(values) > 1 else f"id = {values[0]}"
    where = (f"NOT ({atom})" if negate else atom) + extra
    frame, _, _ = read(root, where)
    assert frame.equals(oracle(root, where)), where


_BLOOM_KINDS = sorted(k for k, (t, _) in TYPED.items()
                      if pa.types.is_integer(t) or t in (pa.string(), pa.date32()))


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(_BLOOM_KINDS), data=st.data(),
       constants=st.lists(st.sampled_from(CONSTANTS), min_size=1, max_size=3),
       negated=st.booleans())
def test_a_bloom_filter_prunes_only_what_polars_equality_rules_out(
        kind: str, data: st.DataObject, constants: list[str], negated: bool) -> None:
    """Row groups each holding a few of the values in a shuffled order (their statistics
    span the constants); ``=``/IN against constants of every kind (an integer past the
    type, a float equal to an integer, a date's text, a number's text): the answer is
    polars' own, and a filter hashes only the one value polars finds equal."""
    typ, pool = TYPED[kind]
    pool = [v for v in pool if v is not None]
    groups = [data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4, unique=True))
              for _ in range(4)]
    values = [v for g in groups for v in sorted(g, key=repr) * 50]
    rows = pa.table({"id": pa.array(range(len(values)), pa.int64()),
                     "c": pa.array(values, typ)})
    where = f"c IN ({', '.join(constants)})" if len(constants) > 1 else f"c = {constants[0]}"
    where = f"NOT ({where})" if negated else where
    with tempfile.TemporaryDirectory() as root:
        (Path(root) / BUCKET).mkdir()
        path = Path(root) / BUCKET / "t.parquet"
        pq.write_table(rows, path, row_group_size=len(values) // 4,
                       bloom_filter_options={"c": {"ndv": 8, "fpp": 0.01}})
        want = polars_answer(path.read_bytes(), where)
        engine = Engine(Settings(memory_mb=2048, strategy="ranges", small_object_size=0),
                        fetcher=LocalFetcher(root), footer_cache=FooterCache(0))
        request = {"source": f"s3://{BUCKET}/t.parquet", "filter": where}
        if want is None:
            with pytest.raises(QueryError):
                read_request(engine, request)
            return
        got = read_request(engine, request)
    assert got.frame.sort("id").equals(want.sort("id")), (kind, where, groups)
