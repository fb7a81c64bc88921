"""An Iceberg table fanned out by the Distributed Map, through the real handler: the
planning step writes the snapshot's planned data files as the map's items (reporting what
metadata pruned), batches of those items write partial answers, and the same reduce as a
prefix's gives the answer pyiceberg's scan gives; a query that does not combine rows
writes one output per batch, together the table's rows."""

# ruff: noqa: F811 - the other modules' fixtures, imported, are the tests' arguments
from __future__ import annotations

import json
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from s3slice.entry import dispatch as _entry
from tests.integration.test_iceberg_deletes import (  # noqa: F401 - the module's fixtures
    Deleted,
    deleted,
)
from tests.integration.test_iceberg_tables import (  # noqa: F401 - the module's fixtures
    Warehouse,
    fails,
    invoke,
    partitioned,
    partitioned_rows,
    warehouse,
)
from tests.support import S3Env

pytestmark = pytest.mark.integration

RESULTS = "iceberg-results"
OUTPUT = f"s3://{RESULTS}/out/"
BATCH = 7


@pytest.fixture
def results(s3: S3Env, monkeypatch: pytest.MonkeyPatch) -> S3Env:
    s3.empty_bucket(RESULTS)
    monkeypatch.delenv("S3SLICE_QUERY", raising=False)
    monkeypatch.delenv("S3SLICE_OUTPUT_URI", raising=False)
    _entry.reset()
    return s3


def fan_out(s3: S3Env, metadata: str, sql: str, run: str) -> tuple[dict[str, Any],
                                                                      list[dict[str, Any]]]:
    """The planning step's answer, and each batch's answer over its items."""
    planned = invoke({"PlanTable": {"source": {"iceberg": metadata}, "query": {"sql": sql},
                                    "output": OUTPUT, "run": run}})
    items = json.loads(s3.get(f"s3://{planned['items']['bucket']}/{planned['items']['key']}"))
    assert len(items) == planned["items"]["count"]
    answers = [invoke({"Items": items[i:i + BATCH],
                       "BatchInput": {"query": {"sql": sql}, "output": OUTPUT, "run": run}})
               for i in range(0, len(items), BATCH)]
    return planned, answers


CASES = [
    "SELECT \"quoted col\", COUNT(*) AS n, SUM(qty) AS s, MIN(ts) AS lo, MAX(name) AS hi "
    "FROM s3object WHERE ts >= TIMESTAMP '2024-06-01 00:00:00' GROUP BY \"quoted col\" "
    "ORDER BY \"quoted col\"",
    "SELECT COUNT(*) AS n, COUNT(DISTINCT qty) AS q FROM s3object",
    "SELECT id, amount FROM s3object WHERE id < 500 ORDER BY amount DESC, id LIMIT 9",
]


@pytest.mark.parametrize("sql", CASES)
def test_map_and_reduce_over_a_tables_planned_files(
        results: S3Env, partitioned: Any, partitioned_rows: pl.DataFrame, sql: str) -> None:
    run = "table-run"
    planned, answers = fan_out(results, partitioned.metadata_location, sql, run)
    assert planned["combines"] is True
    assert len(answers) > 1 and all(a["status"] == "ok" and "partial" in a for a in answers)
    response = invoke({"Reduce": {"run": run, "query": {"sql": sql}, "output": OUTPUT,
                                  "batches": len(answers)}})
    [output] = response["outputs"]
    got = pl.read_parquet(results.get(output["uri"]))
    want = pl.SQLContext(s3object=partitioned_rows).execute(sql, eager=True)
    assert_frame_equal(got, want, check_dtypes=False, check_exact=False, rel_tol=1e-9)
    assert response["stats"]["objects"] == planned["items"]["count"]


def test_the_planning_step_reports_what_metadata_pruned(results: S3Env, partitioned: Any
                                                         ) -> None:
    sql = "SELECT COUNT(*) AS n FROM s3object WHERE \"quoted col\" = 2 AND id < 300"
    planned, _ = fan_out(results, partitioned.metadata_location, sql, "pruned-run")
    stats = planned["stats"]
    files = len(partitioned.inspect.files())
    assert stats["data_files"] == files
    assert planned["items"]["count"] == files - stats["files_pruned_by_partition"] - stats[
        "files_pruned_by_bounds"]
    assert stats["files_pruned_by_partition"] > 0 and stats["files_pruned_by_bounds"] > 0
    assert stats["bytes_pruned"] > 0


def test_batches_apply_their_files_deletes(results: S3Env, warehouse: Warehouse,
                                           deleted: Deleted) -> None:
    sql = "SELECT cat, COUNT(*) AS n, SUM(v) AS s FROM s3object GROUP BY cat ORDER BY cat"
    metadata = deleted.appended.metadata_location
    planned, answers = fan_out(results, metadata, sql, "deletes-run")
    response = invoke({"Reduce": {"run": "deletes-run", "query": {"sql": sql},
                                  "output": OUTPUT, "batches": len(answers)}})
    got = pl.read_parquet(results.get(response["outputs"][0]["uri"]))
    direct = invoke({"source": {"iceberg": metadata}, "sql": sql, "return_rows": True})
    assert_frame_equal(got, pl.DataFrame(direct["rows"]), check_dtypes=False)
    assert sum(1 for i in json.loads(results.get(
        f"s3://{RESULTS}/{planned['items']['key']}")) if i["deletes"]) >= 2


def test_a_query_that_does_not_combine_writes_an_output_per_batch(
        results: S3Env, partitioned: Any, partitioned_rows: pl.DataFrame) -> None:
    sql = "SELECT id, name FROM s3object WHERE id % 10 = 3"
    planned, answers = fan_out(results, partitioned.metadata_location, sql, "rows-run")
    assert planned["combines"] is False
    outputs = [o["uri"] for a in answers for o in a["outputs"]]
    assert len(set(outputs)) == len(answers)
    got = pl.concat([pl.read_parquet(results.get(u)) for u in outputs])
    want = pl.SQLContext(s3object=partitioned_rows).execute(sql, eager=True)
    assert sorted(got.rows()) == sorted(want.rows(), key=lambda r: (r[0], r[1] or ""))


def test_a_batch_of_two_snapshots_is_refused(results: S3Env, partitioned: Any) -> None:
    items = [{"iceberg": partitioned.metadata_location, "snapshot_id": 1, "file": "s3://x/a"},
             {"iceberg": partitioned.metadata_location, "snapshot_id": 2, "file": "s3://x/b"}]
    error = fails({"Items": items, "BatchInput": {"query": {"sql": "SELECT * FROM s3object"},
                                                  "output": OUTPUT, "run": "r"}})
    assert type(error).__name__ == "RequestError" and "one table snapshot" in str(error)


def test_a_plan_that_keeps_no_file_still_reduces_to_the_answer(
        results: S3Env, partitioned: Any) -> None:
    sql = "SELECT COUNT(*) AS n, SUM(qty) AS s FROM s3object WHERE id < 0"
    planned, answers = fan_out(results, partitioned.metadata_location, sql, "empty-run")
    assert planned["items"]["count"] == 1 and len(answers) == 1
    response = invoke({"Reduce": {"run": "empty-run", "query": {"sql": sql},
                                  "output": OUTPUT, "batches": 1}})
    got = pl.read_parquet(results.get(response["outputs"][0]["uri"]))
    direct = invoke({"source": {"iceberg": partitioned.metadata_location}, "sql": sql,
                     "return_rows": True})
    assert got.to_dicts() == direct["rows"] == [{"n": 0, "s": None}]
