"""Random damage to valid Parquet objects, through the handler on the local S3 server.

Each example truncates a good object, flips bytes in it (anywhere, or in its footer),
splices another object's footer onto it, makes its footer claim other row counts, other
sizes, offsets or values counts for a column chunk, or marks a chunk encrypted, and runs a
query on the result. Whatever
happens, the handler either answers with rows equal to a plain local read of the same
bytes, or raises one of the service's typed errors and leaves no output behind: never
another exception type, never a partial or wrong output.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import os
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from s3slice import FOOTER_CACHE, S3SliceError
from s3slice.cli.invoke import LambdaContext
from s3slice.entry import dispatch as _entry
from s3slice.handler import lambda_handler
from tests import malformed
from tests.support import S3Env

pytestmark = pytest.mark.integration

BUCKET = "mutations"
ROWS = 3_000


def _table(seed: int) -> pa.Table:
    return pa.table({
        "id": pa.array(range(ROWS), pa.int64()),
        "x": pa.array([(i * 7919 + seed) % 1_000 for i in range(ROWS)], pa.int32()),
        "f": pa.array([((i * 31 + seed) % 97) / 7 for i in range(ROWS)]),
        "s": pa.array([f"k{(i * 13 + seed) % 50}" for i in range(ROWS)]),
    })


BASES: list[bytes] = [
    malformed.write(_table(0), row_group_size=1_000, compression="snappy"),
    malformed.write(_table(1), row_group_size=700, compression="zstd", write_page_index=True,
                    data_page_size=2_048),
    malformed.write(_table(2), row_group_size=ROWS, compression="none",
                    write_statistics=False),
]
QUERIES: list[dict[str, Any]] = [
    {},
    {"columns": ["id", "s"]},
    {"columns": ["id", "x"], "filter": "x < 100"},
    {"filter": "id >= 1500 AND s = 'k7'"},
]
_names = itertools.count()


@dataclasses.dataclass(frozen=True)
class Damage:
    """How one object is damaged (kept small, so a failing example prints readably)."""

    base: int
    kind: str
    cut: int = 0
    flips: tuple[tuple[int, int], ...] = ()
    other: int = 0
    rows: tuple[int, ...] = ()  # each row group's row count, as the footer will claim it
    chunk: tuple[int, int] = (0, 0)  # (row group, column) of a chunk whose metadata changes
    field: str = ""  # which of its metadata fields, changed by ``by``
    by: int = 0

    def apply(self) -> bytes:
        data = BASES[self.base]
        if self.kind == "truncate":
            return data[:self.cut]
        if self.kind == "recount":
            fmd = malformed.thrift_footer(data)
            for group, rows in zip(fmd.row_groups, self.rows, strict=False):
                group.num_rows = rows
            return malformed.with_thrift_footer(data, fmd)
        if self.kind == "chunk":
            fmd = malformed.thrift_footer(data)
            group, column = self.chunk
            meta = fmd.row_groups[group].columns[column].meta_data
            now = getattr(meta, self.field)
            setattr(meta, self.field, max(0, (now if now is not None else
                                              meta.data_page_offset) + self.by))
            return malformed.with_thrift_footer(data, fmd)
        if self.kind == "encrypt":
            return malformed.column_key_marked(data, self.chunk[1])
        if self.kind == "splice":
            other = BASES[self.other]
            return malformed.body_of(data) + other[
                len(other) - 8 - malformed.footer_length(other):]
        out = bytearray(data)
        for at, mask in self.flips:
            out[at] ^= mask
        return bytes(out)


@st.composite
def damage(draw: st.DrawFn) -> Damage:
    base = draw(st.integers(0, len(BASES) - 1))
    data = BASES[base]
    footer_start = len(data) - 8 - malformed.footer_length(data)
    kind = draw(st.sampled_from(["truncate", "flip", "flip-footer", "splice", "recount",
                                 "chunk", "chunk", "encrypt"]))
    if kind in ("chunk", "encrypt"):
        groups = malformed.thrift_footer(data).row_groups
        chunk = (draw(st.integers(0, len(groups) - 1)),
                 draw(st.integers(0, len(groups[0].columns) - 1)))
        field = draw(st.sampled_from(["total_compressed_size", "num_values",
                                      "dictionary_page_offset", "data_page_offset"]))
        by = draw(st.sampled_from([-4096, -300, -40, -1, 1, 40, 300, 4096]))
        return Damage(base, kind, chunk=chunk, field=field, by=by)
    if kind == "truncate":
        return Damage(base, kind, cut=draw(st.integers(0, len(data) - 1)))
    if kind == "recount":
        groups = malformed.thrift_footer(data).row_groups
        return Damage(base, kind, rows=tuple(draw(st.lists(
            st.integers(0, 2 * ROWS), min_size=1, max_size=len(groups)))))
    if kind == "splice":
        return Damage(base, kind, other=draw(
            st.sampled_from([i for i in range(len(BASES)) if i != base])))
    lo = footer_start if kind == "flip-footer" else 0
    flips = draw(st.lists(st.tuples(st.integers(lo, len(data) - 1), st.integers(1, 255)),
                          min_size=1, max_size=4))
    return Damage(base, kind, flips=tuple(flips))


def _plain_reads(data: bytes, query: dict[str, Any]) -> list[pl.DataFrame]:
    """The same query by plain local reads of the same bytes: pyarrow reading every row,
    and polars' own scan, which skips row groups by their statistics as s3slice does. A
    damaged statistic is undetectable by any reader (Parquet has no checksum over it), so
    either answer is the right one for bytes that contradict their statistics."""
    def finish(lf: pl.LazyFrame) -> pl.DataFrame:
        if "filter" in query:
            lf = lf.filter(pl.sql_expr(query["filter"]))
        return (lf.select(query["columns"]) if "columns" in query else lf).collect()

    reads: list[pl.DataFrame] = []
    for read in (lambda: pl.from_arrow(pq.read_table(pa.BufferReader(data))),
                 lambda: pl.scan_parquet(io.BytesIO(data))):
        try:
            frame = read()
            reads.append(finish(frame.lazy()))
        except BaseException as e:  # polars may panic on damaged bytes
            if not isinstance(e, Exception) and type(e).__name__ != "PanicException":
                raise
    return reads


@pytest.fixture
def store(s3: S3Env, monkeypatch: pytest.MonkeyPatch) -> S3Env:
    s3.bucket(BUCKET)
    monkeypatch.delenv("S3SLICE_OUTPUT_URI", raising=False)
    _entry.reset()
    return s3


#: More examples, drawn at random, by hand: S3SLICE_MUTATIONS=2000 pytest tests/integration/...
EXAMPLES = os.environ.get("S3SLICE_MUTATIONS")


@settings(max_examples=int(EXAMPLES or 150), derandomize=EXAMPLES is None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(hurt=damage(), query=st.sampled_from(QUERIES))
def test_damaged_objects_end_typed_or_equal_to_a_plain_read(store: S3Env, hurt: Damage,
                                                            query: dict[str, Any]) -> None:
    data = hurt.apply()
    n = next(_names)
    key, out = f"in/obj-{n}.parquet", f"out/{n}/"
    store.client.put_object(Bucket=BUCKET, Key=key, Body=data)
    FOOTER_CACHE.clear()
    request = {"source": f"s3://{BUCKET}/{key}", **query,
               "output": {"uri": f"s3://{BUCKET}/{out}"}}
    try:
        response = lambda_handler(request, LambdaContext())
    except S3SliceError as e:
        failed: S3SliceError | None = e
    else:
        failed = None
    if failed is not None:
        assert not failed.retryable, failed  # a damaged object is never worth retrying
        assert store.keys(BUCKET, out) == [], "a failed request left an output"
        return
    json.dumps(response)
    [output] = response["outputs"]
    got = pl.read_parquet(store.get(output["uri"]))
    assert got.height == output["rows"] == response["stats"]["rows_out"]
    reads = _plain_reads(data, query)
    if reads:
        assert any(got.equals(r) for r in reads), (got.height, [r.height for r in reads])


#: Large enough to be copied (its footer is a small share of the needed bytes) rather
#: than fetched whole with its footer.
COPIED = malformed.write(pa.table({
    "id": pa.array(range(200_000), pa.int64()),
    "s": pa.array([f"k{i % 50}" for i in range(200_000)]),
    "pad": pa.array([str(i * 7919 % 1_000_003) * 3 for i in range(200_000)]),
}), row_group_size=50_000, compression="snappy")


@pytest.mark.parametrize(("field", "by"), [("num_values", 0), ("num_values", -1),
                                           ("num_values", 7), ("rows", -1_000),
                                           ("rows", 1_000)])
@pytest.mark.parametrize("columns", [["id"], ["s", "id"]])
def test_values_counts_that_disagree_never_write_an_unreadable_file(
        store: S3Env, field: str, by: int, columns: list[str]) -> None:
    """A chunk whose values count, or a row group whose row count, disagrees with the
    pages: a plain column selection (the ``copy`` strategy's case) either writes a file
    every reader opens, equal to pyarrow's read of the same bytes, or is a typed error
    that writes nothing."""
    fmd = malformed.thrift_footer(COPIED)
    if field == "rows":
        fmd.row_groups[1].num_rows += by
        fmd.num_rows += by
    else:
        fmd.row_groups[1].columns[0].meta_data.num_values += by
    data = malformed.with_thrift_footer(COPIED, fmd)
    n = next(_names)
    key, out = f"in/counts-{n}.parquet", f"out/counts-{n}/"
    store.client.put_object(Bucket=BUCKET, Key=key, Body=data)
    FOOTER_CACHE.clear()
    try:
        response = lambda_handler({"source": f"s3://{BUCKET}/{key}", "columns": columns,
                                   "output": {"uri": f"s3://{BUCKET}/{out}"}}, LambdaContext())
    except S3SliceError as e:
        failed: S3SliceError | None = e
    else:
        failed = None
    if failed is not None:
        assert not failed.retryable, failed
        assert store.keys(BUCKET, out) == [], "a failed request left an output"
        return
    if by == 0:  # the object as written: its chunks are copied
        assert response["stats"]["strategy"] == "copy"
    [output] = response["outputs"]
    written = store.get(output["uri"])
    by_pyarrow = pl.from_arrow(pq.read_table(pa.BufferReader(written)))
    by_polars = pl.read_parquet(written)
    assert by_polars.equals(by_pyarrow)
    assert by_polars.height == output["rows"]
    # (In the file's column order: the copy's order is another item of issue 36.)
    reads = [r.select(by_polars.columns) for r in _plain_reads(data, {"columns": columns})]
    assert any(by_polars.equals(r) for r in reads), (by_polars.height,
                                                     [r.height for r in reads])
