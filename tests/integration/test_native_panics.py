"""Native panics become typed errors: a real ``PanicException`` from polars, in every
phase the handler calls native code and in every batch shape, answered as that phase's
typed error with nothing written, the other objects of a batch processed, and the warm
process still answering. (The rest of nothing lost: ``test_nothing_lost.py``.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

import s3slice.answer.run as _run
import s3slice.answer.write as _write
from s3slice import ObjectFormatError, OutputError, QueryError
from s3slice.answer.spool import ParquetSpool
from s3slice.parquet import footer as _footer
from s3slice.query.analysis import Analysis
from tests import malformed
from tests.integration.event_lake import (
    DATA,
    GOOD,
    RESULTS,
    map_items,
    open_lake,
    put,
    rows_of,
    s3_records,
    sqs,
)
from tests.support import S3Env, invoke

pytestmark = pytest.mark.integration


@pytest.fixture
def lake(s3: S3Env, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Env]:
    yield from open_lake(s3, monkeypatch)


def native_panic() -> BaseException:
    """A real ``pyo3_runtime.PanicException``, raised by polars on an object whose footer
    claims more rows than its pages hold."""
    data, _ = malformed.inflated_row_count()
    with pytest.raises(BaseException) as info:  # noqa: PT011 - the panic is what it returns
        pl.read_parquet(data)
    assert type(info.value).__name__ == "PanicException"
    return info.value

# ----------------------------------------------------------------- 1. native panics

def test_a_panicking_object_is_a_typed_error_on_direct_invoke(lake: S3Env) -> None:
    with pytest.raises(ObjectFormatError, match="inflated.parquet") as info:
        invoke({"source": f"s3://{DATA}/in/inflated.parquet"})
    assert "holds 10 rows by the footer, but pyarrow decoded 6" in str(info.value)
    assert lake.keys(RESULTS) == []
    # The warm process keeps working.
    ok = invoke({"source": f"s3://{DATA}/in/good.parquet", "return_rows": True})
    assert pl.DataFrame(ok["rows"]).height == GOOD.num_rows


@pytest.mark.parametrize("bad_first", [True, False])
def test_sqs_reports_the_panicking_message_and_processes_the_other(lake: S3Env,
                                                                   bad_first: bool) -> None:
    keys = ["in/inflated.parquet", "in/good.parquet"]
    if not bad_first:
        keys.reverse()
    response = invoke(sqs(lake, *keys))
    bad = f"msg-{keys.index('in/inflated.parquet')}"
    assert response == {"batchItemFailures": [{"itemIdentifier": bad}]}
    [output] = lake.keys(RESULTS)
    assert "good.parquet" in output
    assert rows_of(lake, f"s3://{RESULTS}/{output}").equals(pl.from_arrow(GOOD))


@pytest.mark.parametrize("shape", ["s3", "map"])
def test_a_batch_processes_every_object_around_a_panicking_one(lake: S3Env,
                                                               shape: str) -> None:
    keys = ("in/inflated.parquet", "in/good.parquet")
    event = s3_records(lake, *keys) if shape == "s3" else map_items(lake, *keys)
    with pytest.raises(ObjectFormatError,
                       match=r"inflated.*\(1 of 2 objects failed; the other 1 were processed\)"):
        invoke(event)
    [output] = lake.keys(RESULTS)
    assert rows_of(lake, f"s3://{RESULTS}/{output}").equals(pl.from_arrow(GOOD))


def _raise(e: BaseException) -> Any:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise e
    return fail


class _Spilling(ParquetSpool):
    """A spool that holds nothing: every piece goes to its file."""

    def __init__(self, directory: str, compression: str, *, hold_bytes: int) -> None:
        super().__init__(directory, compression, hold_bytes=0)


@pytest.mark.parametrize(("phase", "target", "error", "output_format"), [
    ("footer", (_footer, "parse_footer"), ObjectFormatError, "parquet"),
    ("execute", (Analysis, "finish"), QueryError, "parquet"),
    ("write", (_write, "serialize"), OutputError, "json"),
    ("write", (_write, "serialize"), OutputError, "parquet"),
    ("write spilled", (ParquetSpool, "_write"), OutputError, "parquet"),
    ("write spilled", (ParquetSpool, "_finish"), OutputError, "parquet"),
])
def test_a_panic_in_any_phase_is_the_typed_error_of_that_phase(
        lake: S3Env, phase: str, target: tuple[Any, str], error: type[Exception],
        output_format: str) -> None:
    """A real panic raised where each phase calls native code: the handler answers with the
    phase's typed error, writes nothing, and the next request succeeds. (A Parquet output
    of one object goes through the spool: a small answer is serialized, a large one
    written to the spool's file as it is computed.)"""
    with pytest.MonkeyPatch.context() as patch:
        if phase == "write spilled":
            patch.setattr(_run, "ParquetSpool", _Spilling)
        patch.setattr(*target, _raise(native_panic()))
        with pytest.raises(error, match="assertion"):
            invoke({"source": f"s3://{DATA}/in/good.parquet",
                    "output": {"uri": f"s3://{RESULTS}/out/", "format": output_format}})
    assert lake.keys(RESULTS) == []
    assert invoke({"source": f"s3://{DATA}/in/good.parquet"})["status"] == "ok"


def test_a_time_zone_polars_cannot_parse_is_read_exactly_in_utc(lake: S3Env) -> None:
    data, table = malformed.fixed_offset_time_zone()
    uri = put(lake, "in/offset.parquet", data)
    for query in ({}, {"filter": "id >= 2"}):
        response = invoke({"source": uri, **query, "output": f"s3://{RESULTS}/out/"})
        got = rows_of(lake, response["outputs"][0]["uri"])
        assert got.schema["at"] == pl.Datetime("us", "UTC")
        instants = table.column("at").cast(pa.timestamp("us", tz="UTC")).to_pylist()
        first = 2 if query else 0
        assert got["at"].to_list() == instants[first:]
        assert got["id"].to_list() == list(range(first, 5))
