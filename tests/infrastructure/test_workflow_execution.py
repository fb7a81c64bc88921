"""The synthesized state machine, executed by an Amazon States Language interpreter, with
its Lambda tasks run by the real handler in this process against an S3 server.

The interpreter is moto's port of LocalStack's (``mock_aws`` with
``execute_state_machine``). It runs the check step, lists the objects with the
``ItemReader``, runs the Distributed Map's child executions, writes the ``ResultWriter``
manifest, calls ``DescribeMapRun`` through its SDK integration and invokes Lambda through
moto's Lambda backend, whose one seam (``LambdaFunction.invoke``) is patched here to call
``s3slice.handler.lambda_handler``. The handler reads and writes S3 over HTTP (obstore)
through the tests' S3 server (moto's server mode in a thread of this process): it serves
the same in-memory backend that ``mock_aws`` gives the interpreter, so the objects the
map lists are the ones the handler reads.

moto 5.2.5's grammar has no ``ItemBatcher`` (creating a state machine with one fails with
``ASLParserException ... mismatched input 'ItemBatcher'``). So the test rewrites exactly
that block of each Distributed Map (the prefix's, and the table path's, which these
executions never enter) into an equivalent form and asserts that it is the only
difference from the synthesized definition: ``ItemSelector`` ``{"Items.$":
"$$.Map.Item.Value", "BatchInput": <the BatchInput, unchanged>}``, with the listing
grouped into lists of ``MaxItemsPerBatch`` objects (the batching the removed block asks
of Step Functions) in the interpreter's S3 item reader, which also gives each object the
fields and types Step Functions lists (``Key``, ``Size``, ``Etag``, ``LastModified`` in
epoch seconds, ``StorageClass``) instead of boto3's ``datetime``, which moto cannot
serialize. Every other state runs as synthesized. One more seam of the interpreter is
patched, not touching the definition: moto's SDK integration passes ``Parameters`` to
boto3 as written, so ``CountBatches``' ``MapRunArn`` (Step Functions' SDK integrations
name fields in PascalCase) is given to boto3 as ``mapRunArn`` and the response's fields
come back in PascalCase (``ExecutionCounts.Total``). The seams are one context manager,
:func:`~tests.infrastructure.state_machine_run.interpreter`, which
``test_iceberg_workflow_execution.py`` runs a table's path with; there the JSON
``ItemReader``'s ``s3:getObject`` groups the array it read as the listing groups a
prefix's objects.

moto evaluates ``ToleratedFailurePercentagePath`` (a value outside 0..100 fails the
state) and records it in the Map Run (``DescribeMapRun``), but does not enforce it: every
failed child execution is tolerated. So the tests assert the tolerance the Map Run was
given (0 for a query that combines objects), and the failed-batch test relies on the
reduce's own refusal, which holds whatever the map tolerated.

Every execution runs on one module-scoped deployment, all started at once (the handler
still takes one invocation at a time): each combining query over 200 small objects in
batches of 7 (28 full batches and a short one of 4), its answer compared with the same
SQL run by polars over every object at once (floating-point values within a relative and
absolute tolerance of 1e-9); a query that cannot be split (refused by the check step,
before the map); one that combines nothing (one output per object, over 20 objects); and
one that combines objects over a prefix holding an object that is not Parquet (a failed
batch). Writes and deletes in the output bucket are recorded where S3 stores them.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from s3slice import QueryError
from tests.infrastructure.state_machine_cases import (
    ABS_TOL,
    BROKEN,
    BROKEN_SQL,
    CASES,
    FEW,
    FEW_OBJECTS,
    LIMIT_SQL,
    MEDIAN_SQL,
    OBJECTS,
    PER_OBJECT_SQL,
    REL_TOL,
    SPARK_PARTS,
    SPARK_SQL,
    SQL,
    Case,
    frame,
    oracle,
    put_frames,
)
from tests.infrastructure.state_machine_run import (
    BATCH,
    DATA,
    OUT,
    OUTPUT,
    OUTPUT_PREFIX,
    OUTPUT_URI,
    PARTIALS,
    REGION,
    RESULTS_PREFIX,
    Deployment,
    Execution,
    interpreter,
    keys,
    read_parquet,
)
from tests.support import S3Env

pytestmark = pytest.mark.infrastructure


@pytest.fixture(scope="module")
def deployment(s3_server: S3Env) -> Iterator[Deployment]:
    """The interpreter, the data uploaded and the state machine created."""
    import boto3

    deployment = Deployment()
    with interpreter(s3_server, deployment):
        client = boto3.client("s3", region_name=REGION)
        for bucket in (DATA, OUT):
            client.create_bucket(Bucket=bucket)
        deployment.frames = [frame(i) for i in range(OBJECTS)]
        put_frames(client, "in/", deployment.frames)
        deployment.few = deployment.frames[:FEW]
        put_frames(client, "few/", deployment.few)
        put_frames(client, "broken/", deployment.frames[:BROKEN])
        client.put_object(Bucket=DATA, Key="broken/part-003-broken.parquet",
                          Body=b"not a parquet file")
        client.put_object(Bucket=DATA, Key="spark/", Body=b"")
        client.put_object(Bucket=DATA, Key="spark/_SUCCESS", Body=b"")
        put_frames(client, "spark/", deployment.frames[:SPARK_PARTS])
        deployment.create()
        yield deployment


@pytest.fixture(scope="module")
def runs(deployment: Deployment) -> dict[str, Execution]:
    """Every execution of the module, started at once (the function still runs one
    invocation at a time). Each combining query asks for a 100 % tolerance, which it must
    not get."""
    return deployment.execute_all({
        **{case.name: {"query": {"sql": case.sql}, "toleratedFailurePercentage": 100}
           for case in CASES},
        "limit": {"query": {"sql": LIMIT_SQL}},
        "median": {"query": {"sql": MEDIAN_SQL}},
        "per-object": {"prefix": "few/", "query": {"sql": PER_OBJECT_SQL},
                       "toleratedFailurePercentage": 12.5},
        "broken-run": {"prefix": "broken/", "query": {"sql": BROKEN_SQL},
                       "toleratedFailurePercentage": 100},
        "spark-folder": {"prefix": "spark/", "query": {"sql": SPARK_SQL}},
    })


def batch_sizes(objects: int) -> list[int]:
    return [min(BATCH, objects - start) for start in range(0, objects, BATCH)]


@pytest.mark.slow  # the module's executions: about a minute on 2 shared cores
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_combining_query_gives_the_answer_over_every_object(
        deployment: Deployment, runs: dict[str, Execution], case: Case) -> None:
    run = runs[case.name]
    assert run.status == "SUCCEEDED", run
    check, *batches, reduce = run.events
    assert check == {"Check": {"query": {"sql": case.sql}, "output": OUTPUT}}
    assert run.responses[0] == {"status": "ok", "combines": True}
    assert [len(e["Items"]) for e in batches] == batch_sizes(OBJECTS)
    assert batch_sizes(OBJECTS)[-1] < BATCH  # the last batch is short
    assert all(e["BatchInput"]["run"] == case.name for e in batches)
    partials = run.partials()
    assert len(partials) == len(batches)  # empty batches too
    assert all(p["partial"].startswith(f"{OUTPUT_URI}_partials/{case.name}/")
               for p in partials)
    assert reduce == {"Reduce": {"run": case.name, "query": {"sql": case.sql},
                                 "output": OUTPUT, "batches": len(batches)}}
    assert run.output["count"] == {"batches": len(batches)}
    assert run.output["check"] == {"combines": True}
    # a combining query tolerates no failed batch, whatever the input asked
    assert run.output["toleratedFailurePercentage"] == 0
    assert run.map_run is not None
    assert run.map_run["toleratedFailurePercentage"] == 0

    (output,) = run.output["reduce"]["outputs"]
    assert output["uri"].startswith(f"{OUTPUT_URI}combined.")
    got = read_parquet(output["uri"])
    want = oracle(deployment.frames, case.sql)
    assert want.height > 0
    assert output["rows"] == want.height
    assert_frame_equal(got, want, check_dtypes=False, check_exact=False,
                       check_row_order=not case.unordered, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    assert run.output["reduce"]["stats"]["objects"] == OBJECTS
    # the reduce deleted the partials; the run's manifest stays (a retried reduce reads it)
    assert keys(OUT, f"{PARTIALS}{case.name}/") == [f"{PARTIALS}{case.name}/reduced.json"]


def test_the_cases_cover_what_they_claim() -> None:
    """The data makes each case what its comment says, so none can pass vacuously."""
    frames = [frame(i) for i in range(OBJECTS)]
    every = pl.concat(frames)
    grouped = oracle(frames, SQL["grouped"])
    assert grouped.filter(pl.col("region").is_null()).height  # a null group key
    lonely = grouped.filter(pl.col("tag") != "common")
    assert lonely.height >= 3
    for first, last in lonely.select("first", "last").iter_rows():
        assert first // BATCH == last // BATCH  # one batch sees the whole group
    groups = every.group_by("tag", "region").len()
    assert 0 < grouped.height < groups.height  # HAVING drops some groups, not all
    distinct = oracle(frames, SQL["distinct"])
    assert distinct.filter(pl.col("region").is_null()).height
    assert distinct.filter(pl.col("k").is_null()).height
    # the filtered queries: most batches match nothing, some match rows
    matching = [sum(frames[i].filter(pl.sql_expr(FEW_OBJECTS)).height
                    for i in range(start, min(start + BATCH, OBJECTS)))
                for start in range(0, OBJECTS, BATCH)]
    assert matching.count(0) >= 20 and sum(1 for m in matching if m) >= 5, matching
    top = oracle(frames, SQL["top-groups"])
    assert top.height == 4 < every.filter(pl.sql_expr(FEW_OBJECTS))["k"].n_unique()


@pytest.mark.slow
def test_limit_without_order_gives_that_many_rows_of_the_data(
        deployment: Deployment, runs: dict[str, Execution]) -> None:
    """Any ``LIMIT`` rows are a right answer: as many as asked, each a row of the data,
    none twice."""
    run = runs["limit"]
    assert run.status == "SUCCEEDED", run
    assert run.responses[0] == {"status": "ok", "combines": True}
    assert len(run.partials()) == len(batch_sizes(OBJECTS))
    (output,) = run.output["reduce"]["outputs"]
    got = read_parquet(output["uri"])
    assert got.height == 25 == output["rows"]
    assert got.columns == ["obj", "row", "v", "region"]
    assert got.select("obj", "row").is_unique().all()
    matching = oracle(deployment.frames, LIMIT_SQL.removesuffix(" LIMIT 25"))
    assert matching.height > 25
    found = got.join(matching, on=["obj", "row", "v", "region"], how="semi",
                     nulls_equal=True)
    assert found.height == 25


@pytest.mark.slow
def test_a_query_that_cannot_be_split_is_refused_before_any_batch(
        runs: dict[str, Execution]) -> None:
    run = runs["median"]
    assert run.status == "FAILED", run
    assert run.error == QueryError.__name__
    assert run.cause is not None and "MEDIAN" in run.cause.upper()
    # only the check ran: no batch, no map, no partial, no output
    ((event, response),) = run.calls
    assert event == {"Check": {"query": {"sql": MEDIAN_SQL}, "output": OUTPUT}}
    assert response["errorType"] == "QueryError"
    assert "MEDIAN" in response["errorMessage"].upper()
    assert run.map_run is None
    assert not {"MapStateEntered", "MapRunStarted"} & set(run.history_types())
    assert "reduce" not in run.output
    assert not keys(OUT, f"{PARTIALS}median/")


@pytest.mark.slow
def test_a_query_that_does_not_combine_objects_writes_one_output_per_object(
        deployment: Deployment, runs: dict[str, Execution]) -> None:
    """No partials: today's per-object outputs, the reduce answers ``reduced: false``, and
    the map keeps the input's tolerance."""
    run = runs["per-object"]
    assert run.status == "SUCCEEDED", run
    assert run.events[0] == {"Check": {"query": {"sql": PER_OBJECT_SQL}, "output": OUTPUT}}
    assert run.responses[0] == {"status": "ok", "combines": False}
    assert run.map_run is not None
    assert run.map_run["toleratedFailurePercentage"] == 12.5

    batches = run.batches()
    assert [len(e["Items"]) for e in batches] == batch_sizes(FEW)
    for event in batches:
        assert event["BatchInput"] == {"bucket": DATA, "query": {"sql": PER_OBJECT_SQL},
                                       "output": OUTPUT, "run": "per-object"}
        assert set(event["Items"][0]) == {"Etag", "Key", "LastModified", "Size",
                                          "StorageClass"}
    assert run.events[-1] == {"Reduce": {"run": "per-object", "batches": len(batches),
                                         "query": {"sql": PER_OBJECT_SQL}, "output": OUTPUT}}
    assert run.output["count"] == {"batches": len(batches)}
    assert run.output["reduce"]["reduced"] is False
    assert run.output["reduce"]["outputs"] == []
    assert not run.partials()

    written = [o for r in run.responses if "objects" in r for o in r["objects"]]
    assert len(written) == FEW
    for i, f in enumerate(deployment.few):
        (result,) = [o for o in written
                     if o["source"] == f"s3://{DATA}/few/part-{i:03}.parquet"]
        (uri,) = result["outputs"]
        assert_frame_equal(read_parquet(uri), f.filter(pl.col("v") < 0).select("region", "v"))
    assert not keys(OUT, f"{PARTIALS}per-object/")
    assert keys(OUT, RESULTS_PREFIX)  # the ResultWriter's manifest


@pytest.mark.slow
def test_a_failed_batch_makes_the_reduce_refuse(runs: dict[str, Execution]) -> None:
    """The map is given a tolerance of 0 (Step Functions would fail the Map Run at the
    failed batch; moto tolerates it), and ``DescribeMapRun`` counts the failed batch: the
    reduce finds one partial fewer than batches and refuses with a typed error, so there
    is no combined answer."""
    run = runs["broken-run"]
    assert run.status == "FAILED", run
    assert run.map_run is not None
    assert run.map_run["toleratedFailurePercentage"] == 0
    sizes = batch_sizes(BROKEN + 1)
    assert [len(e["Items"]) for e in run.batches()] == sizes
    failed = [r for r in run.responses if "errorType" in r]
    assert [r["errorType"] for r in failed] == ["ObjectFormatError", "ObjectNotFoundError"]
    (reduce_event,) = [e for e in run.events if "Reduce" in e]
    assert reduce_event["Reduce"]["batches"] == len(sizes)  # the failed batch counted
    assert run.error == "ObjectNotFoundError"
    assert run.cause is not None
    assert (f"{len(sizes) - 1} partial answer(s) of run 'broken-run' where the map ran "
            f"{len(sizes)}") in run.cause
    assert "reduce" not in run.output
    # left for inspection, not reduced
    assert len(keys(OUT, f"{PARTIALS}broken-run/")) == len(sizes) - 1


@pytest.mark.slow
def test_a_spark_output_folder_is_read_as_a_read_of_the_prefix_reads_it(
        deployment: Deployment, runs: dict[str, Execution]) -> None:
    """The ItemReader lists the folder's marker and its empty _SUCCESS with the parts;
    the batch holding them skips both (as a direct read of the prefix does), and the run
    answers over the parts."""
    run = runs["spark-folder"]
    assert run.status == "SUCCEEDED", run
    first, second = run.batches()
    assert [it["Key"] for it in first["Items"][:2]] == ["spark/", "spark/_SUCCESS"]
    assert [it["Size"] for it in first["Items"][:2]] == [0, 0]
    assert len(first["Items"]) + len(second["Items"]) == SPARK_PARTS + 2
    partials = run.partials()
    assert [p["stats"]["objects_skipped"] for p in partials] == [2, 0]
    assert sorted(s["source"] for s in partials[0]["skipped"]) == [
        f"s3://{DATA}/spark/", f"s3://{DATA}/spark/_SUCCESS"]
    reduce = run.output["reduce"]
    assert reduce["stats"]["objects"] == SPARK_PARTS
    assert reduce["stats"]["objects_skipped"] == 2
    (output,) = reduce["outputs"]
    assert_frame_equal(read_parquet(output["uri"]),
                       oracle(deployment.frames[:SPARK_PARTS], SPARK_SQL),
                       check_dtypes=False, check_row_order=False, check_exact=False,
                       rel_tol=REL_TOL, abs_tol=ABS_TOL)


@pytest.mark.slow
def test_the_function_writes_and_deletes_only_under_the_output_prefix(
        deployment: Deployment, runs: dict[str, Execution]) -> None:
    """What was written and deleted in the output bucket during the executions, as S3
    stored it: each batch's partial (written by the batch, deleted by the reduce), the
    run's manifest (written by the reduce after its answer, kept) and the outputs, every
    one under the output prefix, which is what the function's write grant covers (the
    grant itself: ``test_workflow.py``); the state machine's ResultWriter writes under its
    results prefix and deletes nothing."""
    writes = list(deployment.writes)
    for case in CASES:
        partials = [(op, key) for op, key in writes
                    if key.startswith(f"{PARTIALS}{case.name}/") and key.endswith(".parquet")]
        (output,) = runs[case.name].output["reduce"]["outputs"]
        assert ("put", output["uri"].removeprefix(f"s3://{OUT}/")) in writes
        manifest = f"{PARTIALS}{case.name}/reduced.json"
        assert [op for op, key in writes if key == manifest] == ["put"]
        assert (writes.index(("put", manifest))
                > writes.index(("put", output["uri"].removeprefix(f"s3://{OUT}/"))))
        assert {key for _, key in partials} == {
            p["partial"].removeprefix(f"s3://{OUT}/") for p in runs[case.name].partials()}
        batches = len(batch_sizes(OBJECTS))
        assert sorted(op for op, _ in partials) == ["delete"] * batches + ["put"] * batches
    assert len(writes) > len(CASES) * 2 * len(batch_sizes(OBJECTS))
    for operation, key in writes:
        assert key.startswith((OUTPUT_PREFIX, RESULTS_PREFIX)), (operation, key)
        if key.startswith(RESULTS_PREFIX):  # the ResultWriter's (the state machine's)
            assert operation == "put", (operation, key)
