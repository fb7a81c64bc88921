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
:func:`interpreter`, which ``test_iceberg_workflow_execution.py`` runs a table's path
with; there the JSON ``ItemReader``'s ``s3:getObject`` groups the array it read as the
listing groups a prefix's objects.

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

import contextlib
import copy
import dataclasses
import datetime
import io
import json
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from s3slice import QueryError
from tests.infrastructure.support import bare_stack
from tests.support import S3Env

pytestmark = pytest.mark.infrastructure

REGION = "us-east-1"
ACCOUNT = "123456789012"
FUNCTION_NAME = "s3slice"
FUNCTION_ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{FUNCTION_NAME}"
DATA, OUT = "workflow-data", "workflow-out"
OUTPUT_PREFIX = "results/"
OUTPUT_URI = f"s3://{OUT}/{OUTPUT_PREFIX}"
OUTPUT = {"uri": OUTPUT_URI, "format": "parquet"}
PARTIALS = f"{OUTPUT_PREFIX}_partials/"
RESULTS_PREFIX = "workflow-results/"
BATCH = 7
#: The combining queries' data: 200 objects, batches of 7, 7, ..., 7 and 4.
OBJECTS = 200
#: A smaller prefix for the per-object run: batches of 7, 7 and 6.
FEW = 20
#: The failed-batch run's good objects (and one that is not Parquet): batches of 7 and 2.
BROKEN = 8
#: A Spark output folder: its marker (``spark/``, 0 bytes), its empty ``_SUCCESS`` and this
#: many parts, listed in batches of 7 (the marker, _SUCCESS and 5 parts) and 4.
SPARK_PARTS = 9
#: Floating-point answers are combined batch by batch, in another order than polars sums
#: them: equal within this relative (and, near zero, absolute) tolerance.
REL_TOL = 1e-9
ABS_TOL = 1e-9


def synthesized_definition(**overrides: Any) -> dict[str, Any]:
    """The Workflow construct's definition, synthesized, its tokens resolved for ``REGION``."""
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk import aws_s3 as s3
    from aws_cdk.assertions import Template

    from s3slice_cdk.workflow import Workflow, WorkflowProps

    stack = bare_stack()
    props: dict[str, Any] = {
        "function": lambda_.Function.from_function_arn(stack, "Fn", FUNCTION_ARN),
        "default_bucket_name": DATA,
        "default_prefix": "in/",
        "default_query": {"columns": ["region", "v"]},
        "default_output_uri": OUTPUT_URI,
        "results_bucket": s3.Bucket.from_bucket_name(stack, "Results", OUT),
        "results_prefix": RESULTS_PREFIX,
        "items_per_batch": BATCH,
        "max_concurrency": 1,
        **overrides,
    }
    Workflow(stack, "Workflow", props=WorkflowProps(**props))
    (machine,) = [r for r in Template.from_stack(stack).to_json()["Resources"].values()
                  if r["Type"] == "AWS::StepFunctions::StateMachine"]
    definition = machine["Properties"]["DefinitionString"]
    if isinstance(definition, dict):
        pseudo = {"AWS::Partition": "aws", "AWS::Region": REGION, "AWS::AccountId": ACCOUNT}
        _, parts = definition["Fn::Join"]
        definition = "".join(p if isinstance(p, str) else pseudo[p["Ref"]] for p in parts)
    parsed = json.loads(definition)
    assert isinstance(parsed, dict)
    return parsed


#: The definition's Distributed Maps: over a prefix's objects, and over a table's planned
#: data files (``test_iceberg_workflow_execution.py``).
MAPS = ("ProcessObjects", "ProcessTableFiles")


def without_item_batcher(definition: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The definition with each map's ``ItemBatcher`` as an ``ItemSelector`` over
    pre-grouped items, and the batch size the items must be grouped by (the same for
    both maps)."""
    runnable = copy.deepcopy(definition)
    sizes = set()
    for name in MAPS:
        distributed_map = runnable["States"][name]
        batcher = distributed_map.pop("ItemBatcher")
        assert set(batcher) == {"MaxItemsPerBatch", "BatchInput"}
        assert "ItemSelector" not in distributed_map
        distributed_map["ItemSelector"] = {"Items.$": "$$.Map.Item.Value",
                                           "BatchInput": batcher["BatchInput"]}
        sizes.add(int(batcher["MaxItemsPerBatch"]))
    (size,) = sizes
    return runnable, size


def test_the_item_batcher_is_the_only_rewrite() -> None:
    synthesized = synthesized_definition()
    assert sorted(n for n, s in synthesized["States"].items() if s["Type"] == "Map") == sorted(
        MAPS)
    runnable, size = without_item_batcher(synthesized)
    assert size == BATCH
    assert runnable != synthesized
    restored = copy.deepcopy(runnable)
    for name in MAPS:
        distributed_map = restored["States"][name]
        selector = distributed_map.pop("ItemSelector")
        distributed_map["ItemBatcher"] = {"MaxItemsPerBatch": BATCH,
                                          "BatchInput": selector["BatchInput"]}
    assert restored == synthesized
    assert json.dumps(restored, sort_keys=True) == json.dumps(synthesized, sort_keys=True)


# ------------------------------------------------------------------------ the data
def frame(i: int) -> pl.DataFrame:
    """Object ``i``: 12 to 16 rows. ``region`` and ``k`` (group keys) and ``x`` have nulls;
    ``tag`` is ``common`` except in every 37th object, whose own group it is (a group that
    only one batch sees); ``obj`` is ``i``, so a filter on it matches nothing in most
    batches."""
    rng = random.Random(i)
    n = 12 + i % 5

    def sometimes_null(values: list[Any], share: float) -> list[Any]:
        return [None if rng.random() < share else v for v in values]
    regions = sometimes_null([rng.choice(["north", "south", "east", "west"])
                              for _ in range(n)], 0.1)
    k = sometimes_null([rng.randrange(10) for _ in range(n)], 0.1)
    x = sometimes_null([rng.gauss(1000.0, 250.0) for _ in range(n)], 0.05)
    v = [rng.randrange(-1000, 1000) for _ in range(n)]
    return pl.DataFrame({
        "obj": [i] * n,
        "row": list(range(n)),
        "region": regions,
        "k": k,
        "v": v,
        "x": x,
        "tag": [f"only-{i}" if i % 37 == 0 else "common"] * n,
    }, schema={"obj": pl.Int64, "row": pl.Int64, "region": pl.String, "k": pl.Int64,
               "v": pl.Int64, "x": pl.Float64, "tag": pl.String})


def put_frames(client: Any, prefix: str, frames: list[pl.DataFrame]) -> None:
    for i, f in enumerate(frames):
        buffer = io.BytesIO()
        f.write_parquet(buffer)
        client.put_object(Bucket=DATA, Key=f"{prefix}part-{i:03}.parquet",
                          Body=buffer.getvalue())


def oracle(frames: list[pl.DataFrame], sql: str) -> pl.DataFrame:
    """The same SQL, run by polars over every object at once."""
    return pl.SQLContext(s3object=pl.concat(frames)).execute(sql, eager=True)


# ------------------------------------------------------------------------ the interpreter
@dataclasses.dataclass
class Execution:
    """One execution, to its end: what it asked of the function and what it answered."""

    name: str
    status: str
    output: dict[str, Any]
    error: str | None
    cause: str | None
    #: The function's invocations, in order: (event, response or error).
    calls: list[tuple[dict[str, Any], Any]]
    history: list[dict[str, Any]]
    #: ``DescribeMapRun`` of its Map Run, if the map started.
    map_run: dict[str, Any] | None

    @property
    def events(self) -> list[dict[str, Any]]:
        return [event for event, _ in self.calls]

    @property
    def responses(self) -> list[Any]:
        return [response for _, response in self.calls]

    def batches(self) -> list[dict[str, Any]]:
        return [e for e in self.events if "Items" in e]

    def partials(self) -> list[dict[str, Any]]:
        return [r for r in self.responses if isinstance(r, dict) and "partial" in r]

    def history_types(self) -> list[str]:
        return [e["type"] for e in self.history]


def execution_of(event: dict[str, Any], names: dict[str, str]) -> str:
    """Which execution sent ``event``: a batch, the reduce and a table's planning step
    carry its name (``run``); the check only its query (``names``: the name of each
    execution's SQL)."""
    if "Items" in event:
        return str(event["BatchInput"]["run"])
    if "Reduce" in event:
        return str(event["Reduce"]["run"])
    if "PlanTable" in event:  # a table's planning step
        return str(event["PlanTable"]["run"])
    return names[event["Check"]["query"]["sql"]]


class Deployment:
    """The state machine in moto's interpreter, the handler behind its Lambda function."""

    def __init__(self) -> None:
        #: Every invocation of the function: (event, response or error).
        self.calls: list[tuple[dict[str, Any], Any]] = []
        self.lock = threading.Lock()  # one invocation at a time, as one Lambda container
        #: The removed ItemBatcher's MaxItemsPerBatch, for the item reader's grouping.
        self.batch_size = 0
        self.machine_arn = ""
        self.frames: list[pl.DataFrame] = []
        self.few: list[pl.DataFrame] = []
        #: Every object written or deleted in the output bucket, as S3 stored it:
        #: ("put" or "delete", key).
        self.writes: list[tuple[str, str]] = []

    def create(self, **overrides: Any) -> None:
        """The state machine from the (rewritten) synthesized definition (the Workflow's
        props with ``overrides``), and the function its tasks invoke."""
        import boto3

        runnable, self.batch_size = without_item_batcher(synthesized_definition(**overrides))
        iam = boto3.client("iam", region_name=REGION)
        role = iam.create_role(RoleName="s3slice-test", AssumeRolePolicyDocument="{}")["Role"]
        boto3.client("lambda", region_name=REGION).create_function(
            FunctionName=FUNCTION_NAME, Runtime="python3.11", Role=role["Arn"],
            Handler="s3slice.handler.lambda_handler",
            Code={"ZipFile": b"PK\x05\x06" + b"\0" * 18})
        self.machine_arn = boto3.client("stepfunctions", region_name=REGION).create_state_machine(
            name="s3slice", definition=json.dumps(runnable), roleArn=role["Arn"],
        )["stateMachineArn"]

    def execute(self, name: str, execution_input: dict[str, Any]) -> Execution:
        return self.execute_all({name: execution_input})[name]

    def execute_all(self, inputs: dict[str, dict[str, Any]]) -> dict[str, Execution]:
        """Start one execution per input, at once, and wait for their ends. Their
        invocations are told apart by run name (batches, reduce) or query (check), so each
        input must have its own query."""
        import boto3

        sfn = boto3.client("stepfunctions", region_name=REGION)
        names = {i["query"]["sql"]: name for name, i in inputs.items()}
        assert len(names) == len(inputs), "each execution needs its own query"
        with self.lock:
            first = len(self.calls)
        started = {name: sfn.start_execution(stateMachineArn=self.machine_arn, name=name,
                                             input=json.dumps(i))["executionArn"]
                   for name, i in inputs.items()}
        described: dict[str, Any] = {}
        deadline = time.monotonic() + 600
        while len(described) < len(started) and time.monotonic() < deadline:
            time.sleep(0.1)
            for name, arn in started.items():
                if name not in described:
                    response = sfn.describe_execution(executionArn=arn)
                    if response["status"] != "RUNNING":
                        described[name] = response
        with self.lock:
            calls = self.calls[first:]
        executions = {}
        for name, arn in started.items():
            done = described.get(name) or sfn.describe_execution(executionArn=arn)
            history = sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
            map_runs = [e["mapRunStartedEventDetails"]["mapRunArn"] for e in history
                        if e["type"] == "MapRunStarted"]
            executions[name] = Execution(
                name=name, status=done["status"],
                output=json.loads(done.get("output") or "{}"),
                error=done.get("error"), cause=done.get("cause"),
                calls=[c for c in calls if execution_of(c[0], names) == name],
                # the events' types and details, shown when an assertion on the status fails
                history=[{k: v for k, v in e.items() if k == "type" or k.endswith("Details")}
                         for e in history],
                map_run=(dict(sfn.describe_map_run(mapRunArn=map_runs[0]))
                         if map_runs else None))
        return executions


@contextlib.contextmanager
def interpreter(s3_server: S3Env, deployment: Deployment) -> Iterator[None]:
    """moto's ASL interpreter (inside ``mock_aws``, whose backends start empty) with
    Lambda invocations routed to the handler in-process and the S3 item readers grouping
    their items into batches (see the module)."""
    from moto import mock_aws
    from moto.awslambda.models import LambdaFunction
    from moto.s3.models import S3Backend
    from moto.stepfunctions.parser.asl.component.state.exec.state_map.item_reader.eval import (
        resource_eval_s3,
    )
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_aws_sdk import (  # noqa: E501
        StateTaskServiceAwsSdk,
    )
    from moto.stepfunctions.parser.asl.utils.boto_client import boto_client_for

    from s3slice.cli.invoke import LambdaContext

    def invoke(self: Any, body: Any, request_headers: Any, response_headers: Any) -> bytes:
        from s3slice.handler import lambda_handler  # imported lazily, as Lambda would

        event = json.loads(body)
        with deployment.lock:
            try:
                response: Any = lambda_handler(event, LambdaContext())
            except Exception as e:  # noqa: BLE001 - the Lambda runtime reports every error
                response_headers["x-amz-function-error"] = "Unhandled"
                response = {"errorMessage": str(e), "errorType": type(e).__name__}
            deployment.calls.append((event, response))
        return json.dumps(response).encode()

    def list_objects_v2(env: Any, resource_runtime_part: Any, state_credentials: Any) -> None:
        """Step Functions' listing, then the ``ItemBatcher``'s grouping."""
        client = resource_eval_s3.ResourceEvalS3._get_s3_client(
            resource_runtime_part=resource_runtime_part, state_credentials=state_credentials)
        parameters = env.stack.pop()
        listed = client.list_objects_v2(**parameters).get("Contents", [])
        items = [{"Etag": o["ETag"], "Key": o["Key"],
                  "LastModified": int(o["LastModified"].timestamp()),
                  "Size": o["Size"], "StorageClass": o.get("StorageClass", "STANDARD")}
                 for o in listed]
        size = deployment.batch_size
        assert size > 0
        env.stack.append([items[i:i + size] for i in range(0, len(items), size)])

    def get_object(env: Any, resource_runtime_part: Any, state_credentials: Any) -> None:
        """Step Functions' read of a JSON array (a table's planned items), then the
        ``ItemBatcher``'s grouping (still a JSON array, which the JSON reader parses)."""
        client = resource_eval_s3.ResourceEvalS3._get_s3_client(
            resource_runtime_part=resource_runtime_part, state_credentials=state_credentials)
        parameters = env.stack.pop()
        items = json.loads(client.get_object(**parameters)["Body"].read())
        assert isinstance(items, list)
        size = deployment.batch_size
        assert size > 0
        env.stack.append(json.dumps([items[i:i + size] for i in range(0, len(items), size)]))

    def sdk_call(self: Any, env: Any, resource_runtime_part: Any,
                 normalised_parameters: dict[str, Any], state_credentials: Any) -> None:
        """Step Functions' SDK integration names parameters and response fields in
        PascalCase; moto's passes them to boto3 unchanged, which Step Functions' own
        camelCase API (``mapRunArn``) does not accept."""
        service = self._get_boto_service_name()
        assert service == "stepfunctions", service  # the only SDK call in the workflow
        client = boto_client_for(service=service, region=resource_runtime_part.region,
                                 state_credentials=state_credentials)
        response = getattr(client, self._get_boto_service_action())(
            **{k[:1].lower() + k[1:]: v for k, v in normalised_parameters.items()})
        response.pop("ResponseMetadata", None)
        env.stack.append(pascal_case(response))

    def recording(operation: str, method: Any) -> Any:
        """S3's own put or delete of an object (a multi-object delete names its keys only
        in the request's body), recorded for the output bucket."""
        def wrapped(self: Any, bucket_name: str, key_name: str, *args: Any,
                    **kwargs: Any) -> Any:
            if bucket_name == OUT:
                deployment.writes.append((operation, key_name))
            return method(self, bucket_name, key_name, *args, **kwargs)
        return wrapped

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint_url)
        mp.setenv("AWS_DEFAULT_REGION", REGION)
        # every event the workflow sends carries its query and output
        mp.delenv("S3SLICE_QUERY", raising=False)
        mp.delenv("S3SLICE_OUTPUT_URI", raising=False)
        mp.setattr(LambdaFunction, "invoke", invoke)
        mp.setattr(S3Backend, "put_object", recording("put", S3Backend.put_object))
        mp.setattr(S3Backend, "delete_object", recording("delete", S3Backend.delete_object))
        mp.setattr(StateTaskServiceAwsSdk, "_eval_service_task", sdk_call)
        mp.setattr(resource_eval_s3.ResourceEvalS3, "_handle_list_objects_v2",
                   staticmethod(list_objects_v2))
        mp.setattr(resource_eval_s3.ResourceEvalS3, "_handle_get_object",
                   staticmethod(get_object))
        with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
            yield


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


def pascal_case(value: Any) -> Any:
    """A response as Step Functions' SDK integrations give it: PascalCase field names,
    timestamps as text."""
    if isinstance(value, dict):
        return {k[:1].upper() + k[1:]: pascal_case(v) for k, v in value.items()}
    if isinstance(value, list):
        return [pascal_case(v) for v in value]
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    return value


def read_parquet(uri: str) -> pl.DataFrame:
    import boto3

    bucket, _, key = uri.removeprefix("s3://").partition("/")
    body = boto3.client("s3", region_name=REGION).get_object(Bucket=bucket, Key=key)["Body"]
    return pl.read_parquet(io.BytesIO(body.read()))


def keys(bucket: str, prefix: str = "") -> list[str]:
    import boto3

    client = boto3.client("s3", region_name=REGION)
    found: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                   Prefix=prefix):
        found.extend(o["Key"] for o in page.get("Contents", []))
    return found


# ------------------------------------------------------------------------ why the rewrite
def test_the_interpreter_refuses_the_item_batcher() -> None:
    """Why the rewrite: moto's grammar (the parser its ``CreateStateMachine`` and its
    executions use) has no ItemBatcher, and accepts the rewritten definition. If this
    starts failing, moto learned it: drop the rewrite."""
    from moto.stepfunctions.parser.asl.parse.asl_parser import (
        AmazonStateLanguageParser,
        ASLParserException,
    )

    synthesized = synthesized_definition()
    with pytest.raises(ASLParserException, match="ItemBatcher"):
        AmazonStateLanguageParser.parse(json.dumps(synthesized))
    runnable, _ = without_item_batcher(synthesized)
    AmazonStateLanguageParser.parse(json.dumps(runnable))


# ------------------------------------------------------------------------ the executions
@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    sql: str
    #: The query leaves the answer's order open (compared regardless of row order); else
    #: compared row by row.
    unordered: bool = True


#: Matches rows of objects 7, 57, 107, 157 and 190-199 only: 23 of the 29 batches match
#: nothing (their partials are empty).
FEW_OBJECTS = "obj % 50 = 7 OR obj >= 190"

CASES = [  # every construct of the split, each answer over 29 batches
    # every aggregate, and expressions over them, over mostly empty batches
    Case("aggregates",
         "SELECT COUNT(*) AS n, COUNT(x) AS nx, SUM(v) AS s, MIN(x) AS lo, MAX(x) AS hi, "
         "AVG(x) AS mean, COUNT(DISTINCT k) AS kinds, STDDEV(x) AS sd, VARIANCE(x) AS var, "
         "MIN(region) AS first_region, MAX(x) - MIN(x) AS spread, "
         f"SUM(v) * 1.0 / COUNT(*) AS per_row FROM s3object WHERE {FEW_OBJECTS}"),
    # GROUP BY with every aggregate over every batch: null group keys, groups that only
    # one batch sees (tag), HAVING and expressions over aggregates (final plan only)
    Case("grouped",
         "SELECT tag, region, COUNT(*) AS n, SUM(v) AS s, MIN(x) AS lo, MAX(x) AS hi, "
         "AVG(x) AS mean, COUNT(DISTINCT k) AS kinds, STDDEV(x) AS sd, VAR(x) AS var, "
         "MIN(obj) AS first, MAX(obj) AS last, MAX(x) - MIN(x) AS spread, "
         "SUM(v) + 2 * COUNT(DISTINCT k) AS mixed FROM s3object GROUP BY tag, region "
         "HAVING COUNT(*) > 2"),
    # ORDER BY ... LIMIT k: top k per batch, merged; of rows, then of groups (over mostly
    # empty batches)
    Case("top-rows",
         "SELECT obj, row, x, v FROM s3object WHERE x IS NOT NULL "
         "ORDER BY x DESC, obj, row LIMIT 10", unordered=False),
    Case("top-groups",
         "SELECT k, SUM(v) AS s, COUNT(*) AS n, AVG(x) AS mean, STDDEV(x) AS sd "
         f"FROM s3object WHERE {FEW_OBJECTS} GROUP BY k ORDER BY s DESC, k LIMIT 4",
         unordered=False),
    Case("distinct", "SELECT DISTINCT region, k FROM s3object"),
]
SQL = {case.name: case.sql for case in CASES}
#: LIMIT without ORDER BY: any that many rows of the data are a right answer.
LIMIT_SQL = "SELECT obj, row, v, region FROM s3object WHERE v > 0 LIMIT 25"
#: No exact split: refused by the check step.
MEDIAN_SQL = "SELECT region, MEDIAN(x) AS m FROM s3object GROUP BY region"
#: Combines nothing: one output per object.
PER_OBJECT_SQL = "SELECT region, v FROM s3object WHERE v < 0"
#: Combines objects, over a prefix with an object that is not Parquet.
BROKEN_SQL = ("SELECT region, COUNT(*) AS n, SUM(v) AS s, MAX(x) AS hi FROM s3object "
              "GROUP BY region")
#: Combines objects, over a Spark output folder (a folder marker and an empty _SUCCESS).
SPARK_SQL = ("SELECT region, COUNT(*) AS n, SUM(v) AS s, MIN(x) AS lo FROM s3object "
             "GROUP BY region")


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
