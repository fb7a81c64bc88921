"""Iceberg tables through the whole synthesized state machine: moto's States Language
interpreter runs the definition, its Lambda tasks run by the real handler in this process
against the tests' S3 server (``test_workflow_execution.py`` describes the interpreter and
its seams, :func:`~tests.infrastructure.state_machine_run.interpreter`).

An input whose ``source`` is a table takes the table path: the ``Source`` choice, the
planning step (``PlanTable``, which writes the snapshot's planned data files as a JSON
array in the run's ``_partials/`` folder), the table map, whose ``ItemReader`` reads that
array with ``s3:getObject`` (``InputType`` JSON, its bucket and key from the planning
step's answer), its batches, ``CountBatches`` and the reduce. The tables are written by
pyiceberg (a SQL catalog on SQLite, its warehouse in the S3 server) inside the
interpreter's ``mock_aws``, whose backends start empty (the module's autouse fixture
starts it before the tables' fixtures run); one of them is also registered in moto's Glue
Data Catalog, which the handler reaches through boto3. Each answer is compared with
pyiceberg's scan of the same snapshot: a combining query over a partitioned table, over
position deletes (pyiceberg applies them) and, by its Glue name, over equality deletes
and a later append (pyiceberg's scan of the snapshot before the equality deletes, less the
rows they delete: pyiceberg does not read equality deletes), and over an earlier snapshot
of that table (``snapshot_id``, time travel); a query that combines no rows
(an output per batch, together the table's matching rows); a table that does not exist
(the planning step's typed error fails the execution before any map).

The seams are ``test_workflow_execution.py``'s, plus one: moto 5.2.5 reads a JSON
``ItemReader`` (``s3:getObject``, ``ReaderConfig`` ``InputType`` JSON, ``Parameters``
``Bucket.$``/``Key.$``) as Step Functions does, but its grammar has no ``ItemBatcher``, so
the interpreter's ``get_object`` groups the array it read into lists of
``MaxItemsPerBatch`` items, as its listing does for a prefix; the definition is the
synthesized one with only each map's ``ItemBatcher`` rewritten into the equivalent
``ItemSelector`` (asserted here and in ``test_workflow_execution.py``). moto does not
enforce ``ToleratedFailurePercentage`` (the tests assert what the Map Run was given).
"""

# ruff: noqa: F811 - the other modules' fixtures, imported, are the tests' arguments
from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.infrastructure.state_machine_run import (
    OUT,
    OUTPUT,
    OUTPUT_URI,
    PARTIALS,
    REGION,
    Deployment,
    Execution,
    interpreter,
    keys,
    read_parquet,
    synthesized_definition,
    without_item_batcher,
)
from tests.integration.test_iceberg_deletes import (  # noqa: F401 - the module's fixtures
    Deleted,
    _equality_oracle,
    deleted,
    oracle,
)
from tests.integration.test_iceberg_tables import (  # noqa: F401 - the module's fixtures
    Warehouse,
    partitioned,
    partitioned_rows,
    warehouse,
)
from tests.support import S3Env

pytestmark = pytest.mark.infrastructure

#: Files per batch: the deletes' tables (three and four files) span two batches each.
BATCH = 2
GLUE_TABLE = "db.deletes_eq"

GROUPED_SQL = ("SELECT \"quoted col\", COUNT(*) AS n, SUM(qty) AS s, MIN(ts) AS lo, "
               "MAX(name) AS hi, AVG(amount) AS mean FROM s3object "
               "WHERE ts >= TIMESTAMP '2024-06-01 00:00:00' GROUP BY \"quoted col\"")
ROWS_SQL = "SELECT id, name FROM s3object WHERE id % 10 = 3 AND \"quoted col\" = 2"
POSITIONS_SQL = "SELECT COUNT(*) AS n, SUM(v) AS s, MIN(id) AS lo, MAX(id) AS hi FROM s3object"
EQUALITIES_SQL = "SELECT cat, COUNT(*) AS n, SUM(v) AS s, MAX(id) AS hi FROM s3object GROUP BY cat"
MISSING_SQL = "SELECT COUNT(*) AS n FROM s3object"
NOT_A_TABLE_SQL = "SELECT COUNT(*) AS rows FROM s3object"
TIME_TRAVEL_SQL = "SELECT cat, COUNT(*) AS n, SUM(v) AS s, MIN(v) AS lo FROM s3object GROUP BY cat"


@pytest.fixture(scope="module", autouse=True)
def aws(s3_server: S3Env) -> Iterator[Deployment]:
    """The interpreter, started before the tables are written (autouse: first of the
    module's fixtures), with the output bucket."""
    import boto3

    deployment = Deployment()
    with interpreter(s3_server, deployment):
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=OUT)
        yield deployment


@pytest.fixture(scope="module")
def runs(aws: Deployment, warehouse: Warehouse, partitioned: Any, deleted: Deleted
         ) -> dict[str, Execution]:
    """The state machine (its maps batching ``BATCH`` items), the appended table
    registered in Glue, and every execution of the module, started at once."""
    import boto3

    glue = boto3.client("glue", region_name=os.environ.get("AWS_REGION") or REGION)
    database, _, name = GLUE_TABLE.partition(".")
    glue.create_database(DatabaseInput={"Name": database})
    glue.create_table(DatabaseName=database, TableInput={
        "Name": name, "TableType": "EXTERNAL_TABLE",
        "Parameters": {"table_type": "ICEBERG",
                       "metadata_location": deleted.appended.metadata_location}})
    aws.create(items_per_batch=BATCH)

    def table(source: Any, sql: str, **more: Any) -> dict[str, Any]:
        return {"source": {"iceberg": source}, "query": {"sql": sql}, **more}
    return aws.execute_all({
        "table-grouped": table(partitioned.metadata_location, GROUPED_SQL,
                               toleratedFailurePercentage=100),
        "table-rows": table(partitioned.metadata_location, ROWS_SQL,
                            toleratedFailurePercentage=10),
        "table-positions": table(deleted.positions, POSITIONS_SQL),
        "table-glue": table({"glue": GLUE_TABLE}, EQUALITIES_SQL),
        "table-missing": table("s3://iceberg-warehouse/warehouse/db/nothing/metadata/"
                               "v1.metadata.json", MISSING_SQL),
        # an earlier snapshot of the appended table: the position deletes' one
        "table-time-travel": {"source": time_travel(warehouse, deleted),
                              "query": {"sql": TIME_TRAVEL_SQL}},
        # a source that is not a table takes the table path too, and is refused there
        "not-a-table": {"source": f"s3://{OUT}/in/", "query": {"sql": NOT_A_TABLE_SQL}},
    })


def time_travel(warehouse: Warehouse, deleted: Deleted) -> dict[str, Any]:
    """The appended table at the snapshot that added the position deletes."""
    snapshot = warehouse.static(deleted.positions).metadata.current_snapshot_id
    return {"iceberg": deleted.appended.metadata_location, "snapshot_id": snapshot}


def batch_sizes(items: int) -> list[int]:
    return [min(BATCH, items - start) for start in range(0, items, BATCH)]


def entered(run: Execution) -> set[str]:
    return {e["stateEnteredEventDetails"]["name"] for e in run.history
            if "stateEnteredEventDetails" in e}


def planned(run: Execution, source: Any, sql: str) -> tuple[list[dict[str, Any]], int]:
    """The run's planning step as the function saw it, and the batches' events, checked:
    the table path only, its items read from the array the planning step wrote, each
    batch with ``BATCH`` of them (the last one fewer) and the run's query and output."""
    plan_event, plan = run.calls[0]
    assert plan_event == {"PlanTable": {"source": {"iceberg": source}, "query": {"sql": sql},
                                        "output": OUTPUT, "run": run.name}}
    assert plan["status"] == "ok"
    items = plan["items"]
    assert items == {"bucket": OUT, "key": f"{PARTIALS}{run.name}/items.json",
                     "count": items["count"]}
    assert run.output["plan"] == {"combines": plan["combines"], "items": items,
                                  "stats": plan["stats"]}
    batches = run.batches()
    assert [len(b["Items"]) for b in batches] == batch_sizes(items["count"])
    written = json.loads(aws_object(items["bucket"], items["key"]))
    assert [i for b in batches for i in b["Items"]] == written
    for batch in batches:
        assert batch["BatchInput"] == {"query": {"sql": sql}, "output": OUTPUT,
                                       "run": run.name}
        assert all({"iceberg", "snapshot_id", "file"} <= set(i) for i in batch["Items"])
    assert {"Source", "PlanTable", "TableTolerance", "ProcessTableFiles", "CountBatches",
            "Reduce"} <= entered(run)
    assert not {"Check", "Tolerance", "ProcessObjects"} & entered(run)
    assert run.output["count"] == {"batches": len(batches)}
    assert run.events[-1] == {"Reduce": {"run": run.name, "query": {"sql": sql},
                                         "output": OUTPUT, "batches": len(batches)}}
    return batches, items["count"]


def aws_object(bucket: str, key: str) -> bytes:
    import boto3

    body: bytes = boto3.client("s3", region_name=REGION).get_object(
        Bucket=bucket, Key=key)["Body"].read()
    return body


def reduced(run: Execution, want: pl.DataFrame, *, files: int) -> None:
    """The reduce's one output equals ``want`` (in any row order), over every planned
    file; the partials are gone, the items and the manifest stay."""
    assert run.status == "SUCCEEDED", run
    assert run.output["plan"]["combines"] is True
    assert run.output["toleratedFailurePercentage"] == 0
    assert run.map_run is not None and run.map_run["toleratedFailurePercentage"] == 0
    assert len(run.partials()) == len(run.batches())
    (output,) = run.output["reduce"]["outputs"]
    assert output["uri"].startswith(f"{OUTPUT_URI}combined.")
    got = read_parquet(output["uri"])
    assert want.height > 0 and output["rows"] == want.height
    assert_frame_equal(got, want, check_dtypes=False, check_row_order=False,
                       check_exact=False, rel_tol=1e-9, abs_tol=1e-9)
    assert run.output["reduce"]["stats"]["objects"] == files
    assert sorted(keys(OUT, f"{PARTIALS}{run.name}/")) == [
        f"{PARTIALS}{run.name}/items.json", f"{PARTIALS}{run.name}/reduced.json"]


def test_only_the_item_batchers_are_rewritten() -> None:
    synthesized = synthesized_definition(items_per_batch=BATCH)
    runnable, size = without_item_batcher(synthesized)
    assert size == BATCH
    table = runnable["States"]["ProcessTableFiles"]
    assert table["ItemSelector"]["BatchInput"] == synthesized["States"]["ProcessTableFiles"][
        "ItemBatcher"]["BatchInput"]
    restored = copy.deepcopy(runnable)
    for name in ("ProcessObjects", "ProcessTableFiles"):
        selector = restored["States"][name].pop("ItemSelector")
        restored["States"][name]["ItemBatcher"] = {"MaxItemsPerBatch": BATCH,
                                                   "BatchInput": selector["BatchInput"]}
    assert restored == synthesized
    assert table["ItemReader"] == {
        "Resource": "arn:aws:states:::s3:getObject", "ReaderConfig": {"InputType": "JSON"},
        "Parameters": {"Bucket.$": "$.plan.items.bucket", "Key.$": "$.plan.items.key"}}


@pytest.mark.slow
def test_a_combining_query_over_a_partitioned_table(
        runs: dict[str, Execution], partitioned: Any, partitioned_rows: pl.DataFrame) -> None:
    run = runs["table-grouped"]
    assert run.status == "SUCCEEDED", run
    batches, files = planned(run, partitioned.metadata_location, GROUPED_SQL)
    stats = run.output["plan"]["stats"]
    assert stats["files_pruned_by_partition"] > 0  # the months before June
    assert files == stats["data_files"] - stats["files_pruned_by_partition"] - stats[
        "files_pruned_by_bounds"]
    assert len(batches) > 10
    want = pl.SQLContext(s3object=partitioned_rows).execute(GROUPED_SQL, eager=True)
    reduced(run, want, files=files)


@pytest.mark.slow
def test_position_deletes_as_pyiceberg_reads_them(
        runs: dict[str, Execution], warehouse: Warehouse, deleted: Deleted) -> None:
    run = runs["table-positions"]
    assert run.status == "SUCCEEDED", run
    batches, files = planned(run, deleted.positions, POSITIONS_SQL)
    assert len(batches) == 2
    assert sum(1 for b in batches for i in b["Items"] if i["deletes"]) == 1
    rows = oracle(warehouse.static(deleted.positions))
    assert rows.height == 300 - 4  # pyiceberg applied the position deletes
    reduced(run, pl.SQLContext(s3object=rows).execute(POSITIONS_SQL, eager=True),
            files=files)


@pytest.mark.slow
def test_a_glue_table_with_equality_deletes_and_a_later_append(
        runs: dict[str, Execution], warehouse: Warehouse, deleted: Deleted) -> None:
    run = runs["table-glue"]
    assert run.status == "SUCCEEDED", run
    batches, files = planned(run, {"glue": GLUE_TABLE}, EQUALITIES_SQL)
    assert len(batches) == 2
    # the batches read the metadata file Glue named, so every batch reads one snapshot
    assert {i["iceberg"] for b in batches for i in b["Items"]} == {
        deleted.appended.metadata_location}
    assert sum(1 for b in batches for i in b["Items"] if i["deletes"]) >= 2
    want = _equality_oracle(deleted, warehouse, appended=True)
    reduced(run, pl.SQLContext(s3object=want).execute(EQUALITIES_SQL, eager=True),
            files=files)


@pytest.mark.slow
def test_a_query_that_combines_no_rows_writes_an_output_per_batch(
        runs: dict[str, Execution], partitioned: Any, partitioned_rows: pl.DataFrame) -> None:
    run = runs["table-rows"]
    assert run.status == "SUCCEEDED", run
    batches, _ = planned(run, partitioned.metadata_location, ROWS_SQL)
    assert run.output["plan"]["combines"] is False
    assert run.output["plan"]["stats"]["files_pruned_by_partition"] > 0  # quoted col = 2
    # the map keeps the input's tolerance; the reduce combines nothing
    assert run.output["toleratedFailurePercentage"] == 10
    assert run.map_run is not None and run.map_run["toleratedFailurePercentage"] == 10
    assert run.output["reduce"]["reduced"] is False
    assert not run.partials()
    answers = [r for e, r in run.calls if "Items" in e]
    assert len(answers) == len(batches) > 1
    outputs = [o["uri"] for a in answers for o in a["outputs"]]
    assert len(set(outputs)) == len(batches)
    got = pl.concat([read_parquet(u) for u in outputs])
    want = pl.SQLContext(s3object=partitioned_rows).execute(ROWS_SQL, eager=True)
    assert want.height > 0
    assert_frame_equal(got, want, check_row_order=False, check_dtypes=False)


@pytest.mark.slow
def test_a_table_that_does_not_exist_fails_before_any_map(runs: dict[str, Execution]) -> None:
    run = runs["table-missing"]
    assert run.status == "FAILED", run
    assert run.error == "ObjectNotFoundError"
    assert run.cause is not None and "nothing/metadata/v1.metadata.json" in run.cause
    ((event, response),) = run.calls
    assert "PlanTable" in event and response["errorType"] == "ObjectNotFoundError"
    assert run.map_run is None
    assert "TableRefused" in entered(run)
    assert not {"MapStateEntered", "MapRunStarted"} & set(run.history_types())
    assert not keys(OUT, f"{PARTIALS}{run.name}/")


@pytest.mark.slow
def test_a_source_that_is_not_a_table_is_refused_by_the_planning_step(
        runs: dict[str, Execution]) -> None:
    """``source`` names only a table: anything else is the planning step's
    ``RequestError``, never a silent fall back to the prefix."""
    run = runs["not-a-table"]
    assert run.status == "FAILED", run
    assert run.error == "RequestError"
    ((event, response),) = run.calls
    assert event["PlanTable"]["source"] == f"s3://{OUT}/in/"
    assert response["errorType"] == "RequestError" and "iceberg" in response["errorMessage"]
    assert "Check" not in entered(run) and run.map_run is None


@pytest.mark.slow
def test_time_travel_to_an_earlier_snapshot(runs: dict[str, Execution], warehouse: Warehouse,
                                            deleted: Deleted) -> None:
    """``snapshot_id``: every batch reads that snapshot (its items name it), and the answer
    is pyiceberg's scan of it, not of the current one."""
    run = runs["table-time-travel"]
    assert run.status == "SUCCEEDED", run
    source = time_travel(warehouse, deleted)
    (event, _), *_ = run.calls
    assert event["PlanTable"]["source"] == source
    batches = run.batches()
    assert {i["snapshot_id"] for b in batches for i in b["Items"]} == {source["snapshot_id"]}
    assert source["snapshot_id"] != deleted.appended.metadata.current_snapshot_id
    rows = pl.from_arrow(deleted.appended.scan(snapshot_id=source["snapshot_id"]).to_arrow())
    assert isinstance(rows, pl.DataFrame) and rows.height == 300 - 4
    want = pl.SQLContext(s3object=rows).execute(TIME_TRAVEL_SQL, eager=True)
    reduced(run, want, files=run.output["plan"]["items"]["count"])
