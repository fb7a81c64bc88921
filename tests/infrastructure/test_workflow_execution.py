"""The synthesized state machine, executed by an Amazon States Language interpreter, with
its Lambda tasks run by the real handler in this process against an S3 server.

The interpreter is moto's port of LocalStack's (``mock_aws`` with
``execute_state_machine``). It lists the objects with the ``ItemReader``, runs the
Distributed Map's child executions, writes the ``ResultWriter`` manifest, calls
``DescribeMapRun`` through its SDK integration and invokes Lambda through moto's Lambda
backend, whose one seam (``LambdaFunction.invoke``) is patched here to call
``s3slice.handler.lambda_handler``. The handler reads and writes S3 over HTTP (obstore)
through the tests' S3 server (moto's server mode in a thread of this process): it serves
the same in-memory backend that ``mock_aws`` gives the interpreter, so the objects the
map lists are the ones the handler reads.

moto 5.2.5's grammar has no ``ItemBatcher`` (creating a state machine with one fails with
``ASLParserException ... mismatched input 'ItemBatcher'``). So the test rewrites exactly
that block into an equivalent form and asserts that it is the only difference from the
synthesized definition: ``ItemSelector`` ``{"Items.$": "$$.Map.Item.Value", "BatchInput":
<the BatchInput, unchanged>}``, with the listing grouped into lists of
``MaxItemsPerBatch`` objects (the batching the removed block asks of Step Functions) in
the interpreter's S3 item reader, which also gives each object the fields and types Step
Functions lists (``Key``, ``Size``, ``Etag``, ``LastModified`` in epoch seconds,
``StorageClass``) instead of boto3's ``datetime``, which moto cannot serialize. Every other
state runs as synthesized. Two more seams of the interpreter are patched, neither touching
the definition: moto's SDK integration passes ``Parameters`` to boto3 as written, so
``CountBatches``' ``MapRunArn`` (Step Functions' SDK integrations name fields in
PascalCase) is given to boto3 as ``mapRunArn`` and the response's fields come back in
PascalCase (``ExecutionCounts.Total``); and moto ignores ``ToleratedFailurePercentagePath``
(it logs so, and tolerates every failed batch), which the failed-batch test relies on.
"""

from __future__ import annotations

import copy
import datetime
import io
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.infrastructure.support import bare_stack
from tests.support import S3Env

pytestmark = pytest.mark.infrastructure

REGION = "us-east-1"
ACCOUNT = "123456789012"
FUNCTION_NAME = "s3slice"
FUNCTION_ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{FUNCTION_NAME}"
DATA, OUT = "workflow-data", "workflow-out"
OUTPUT_URI = f"s3://{OUT}/results/"
RESULTS_PREFIX = "workflow-results/"
OBJECTS = 20
BATCH = 7  # 20 objects: batches of 7, 7 and 6


def synthesized_definition(**overrides: Any) -> dict[str, Any]:
    """The Workflow construct's definition, synthesized, its tokens resolved for ``REGION``."""
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk import aws_s3 as s3

    from s3slice_cdk.workflow import Workflow, WorkflowProps

    stack = bare_stack()
    props: dict[str, Any] = {
        "function": lambda_.Function.from_function_arn(stack, "Fn", FUNCTION_ARN),
        "default_bucket_name": DATA,
        "default_prefix": "in/",
        "default_query": {"columns": ["region", "col_1"]},
        "default_output_uri": OUTPUT_URI,
        "results_bucket": s3.Bucket.from_bucket_name(stack, "Results", OUT),
        "results_prefix": RESULTS_PREFIX,
        "items_per_batch": BATCH,
        "max_concurrency": 1,
        **overrides,
    }
    Workflow(stack, "Workflow", props=WorkflowProps(**props))
    from aws_cdk.assertions import Template

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


def without_item_batcher(definition: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The definition with its ``ItemBatcher`` as an ``ItemSelector`` over pre-grouped
    items, and the batch size the listing must be grouped by."""
    runnable = copy.deepcopy(definition)
    distributed_map = runnable["States"]["ProcessObjects"]
    batcher = distributed_map.pop("ItemBatcher")
    assert set(batcher) == {"MaxItemsPerBatch", "BatchInput"}
    assert "ItemSelector" not in distributed_map
    distributed_map["ItemSelector"] = {"Items.$": "$$.Map.Item.Value",
                                       "BatchInput": batcher["BatchInput"]}
    return runnable, int(batcher["MaxItemsPerBatch"])


def test_the_interpreter_refuses_the_item_batcher() -> None:
    """Why the rewrite: moto's grammar has no ItemBatcher (if this starts failing, moto
    learned it: drop the rewrite)."""
    import boto3
    from moto import mock_aws

    definition = json.dumps(synthesized_definition())
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        sfn = boto3.client("stepfunctions", region_name=REGION)
        with pytest.raises(Exception, match="ItemBatcher"):
            sfn.create_state_machine(
                name="s3slice", definition=definition,
                roleArn=f"arn:aws:iam::{ACCOUNT}:role/s3slice")


def test_the_item_batcher_is_the_only_rewrite() -> None:
    synthesized = synthesized_definition()
    runnable, size = without_item_batcher(synthesized)
    assert size == BATCH
    assert runnable != synthesized
    restored = copy.deepcopy(runnable)
    distributed_map = restored["States"]["ProcessObjects"]
    selector = distributed_map.pop("ItemSelector")
    distributed_map["ItemBatcher"] = {"MaxItemsPerBatch": BATCH,
                                      "BatchInput": selector["BatchInput"]}
    assert restored == synthesized
    assert json.dumps(restored, sort_keys=True) == json.dumps(synthesized, sort_keys=True)


# ------------------------------------------------------------------------ the interpreter
class Invocations:
    """What the state machine asked of the function, and what it answered."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.responses: list[Any] = []
        self.lock = threading.Lock()  # one invocation at a time, as one Lambda container
        #: The removed ItemBatcher's MaxItemsPerBatch, for the item reader's grouping.
        self.batch_size = 0


@pytest.fixture
def interpreter(s3: S3Env, monkeypatch: pytest.MonkeyPatch) -> Iterator[Invocations]:
    """moto's ASL interpreter with Lambda invocations routed to the handler in-process, and
    the S3 item reader grouping its listing into batches."""
    from moto import mock_aws
    from moto.awslambda.models import LambdaFunction
    from moto.stepfunctions.parser.asl.component.state.exec.state_map.item_reader.eval import (
        resource_eval_s3,
    )
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_aws_sdk import (  # noqa: E501
        StateTaskServiceAwsSdk,
    )
    from moto.stepfunctions.parser.asl.utils.boto_client import boto_client_for

    from s3slice import _entry
    from s3slice.__main__ import LambdaContext

    monkeypatch.delenv("S3SLICE_QUERY", raising=False)
    monkeypatch.delenv("S3SLICE_OUTPUT_URI", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    _entry.reset()
    calls = Invocations()

    def invoke(self: Any, body: Any, request_headers: Any, response_headers: Any) -> bytes:
        from s3slice.handler import lambda_handler  # imported lazily, as Lambda would

        event = json.loads(body)
        with calls.lock:
            calls.events.append(event)
            try:
                response: Any = lambda_handler(event, LambdaContext())
            except Exception as e:  # noqa: BLE001 - the Lambda runtime reports every error
                response_headers["x-amz-function-error"] = "Unhandled"
                response = {"errorMessage": str(e), "errorType": type(e).__name__}
            calls.responses.append(response)
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
        size = calls.batch_size
        assert size > 0
        env.stack.append([items[i:i + size] for i in range(0, len(items), size)])

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

    monkeypatch.setattr(LambdaFunction, "invoke", invoke)
    monkeypatch.setattr(StateTaskServiceAwsSdk, "_eval_service_task", sdk_call)
    monkeypatch.setattr(resource_eval_s3.ResourceEvalS3, "_handle_list_objects_v2",
                        staticmethod(list_objects_v2))
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        yield calls


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


def data_frames() -> list[pl.DataFrame]:
    from s3slice._demo import sample_table

    return [sample_table(200, seed=i) for i in range(OBJECTS)]


def put_data(s3: S3Env, frames: list[pl.DataFrame]) -> None:
    import boto3

    client = boto3.client("s3", region_name=REGION)
    for bucket in (DATA, OUT):
        client.create_bucket(Bucket=bucket)
    for i, frame in enumerate(frames):
        buffer = io.BytesIO()
        frame.write_parquet(buffer)
        client.put_object(Bucket=DATA, Key=f"in/part-{i:02}.parquet", Body=buffer.getvalue())


def execute(calls: Invocations, execution_input: dict[str, Any], name: str,
            **overrides: Any) -> dict[str, Any]:
    """Create the state machine from the (rewritten) synthesized definition and run one
    execution to its end."""
    import boto3

    runnable, size = without_item_batcher(synthesized_definition(**overrides))
    calls.batch_size = size
    iam = boto3.client("iam", region_name=REGION)
    role = iam.create_role(RoleName="s3slice-test", AssumeRolePolicyDocument="{}")["Role"]
    awslambda = boto3.client("lambda", region_name=REGION)
    awslambda.create_function(FunctionName=FUNCTION_NAME, Runtime="python3.11",
                              Role=role["Arn"], Handler="s3slice.handler.lambda_handler",
                              Code={"ZipFile": b"PK\x05\x06" + b"\0" * 18})
    sfn = boto3.client("stepfunctions", region_name=REGION)
    machine = sfn.create_state_machine(name="s3slice", definition=json.dumps(runnable),
                                       roleArn=role["Arn"])
    execution = sfn.start_execution(stateMachineArn=machine["stateMachineArn"], name=name,
                                    input=json.dumps(execution_input))
    deadline = time.monotonic() + 300
    while True:
        described = sfn.describe_execution(executionArn=execution["executionArn"])
        if described["status"] != "RUNNING" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    result: dict[str, Any] = dict(described)
    # the events' details, shown when an assertion on the status fails
    history = sfn.get_execution_history(executionArn=execution["executionArn"])["events"]
    result["history"] = [{k: v for k, v in e.items() if k.endswith("Details")}
                         for e in history]
    return result


def read_parquet(uri: str) -> pl.DataFrame:
    import boto3

    bucket, _, key = uri.removeprefix("s3://").partition("/")
    body = boto3.client("s3", region_name=REGION).get_object(Bucket=bucket, Key=key)["Body"]
    return pl.read_parquet(io.BytesIO(body.read()))


def keys(bucket: str, prefix: str = "") -> list[str]:
    import boto3

    listed = boto3.client("s3", region_name=REGION).list_objects_v2(Bucket=bucket,
                                                                      Prefix=prefix)
    return [o["Key"] for o in listed.get("Contents", [])]


# ------------------------------------------------------------------------ executions
@pytest.mark.slow  # an execution: about 20 s on 2 shared cores
def test_a_query_that_does_not_combine_objects_writes_one_output_per_object(
        s3: S3Env, interpreter: Invocations) -> None:
    frames = data_frames()
    put_data(s3, frames)
    described = execute(interpreter, {"query": {"sql": (
        "SELECT region, col_1 FROM s3object WHERE col_1 < 500000")}}, name="per-object")
    assert described["status"] == "SUCCEEDED", described
    output = json.loads(described["output"])

    batches = [e for e in interpreter.events if "Items" in e]
    assert [len(e["Items"]) for e in batches] == [7, 7, 6]
    for event in batches:
        assert event["BatchInput"] == {
            "bucket": DATA, "query": {"sql": "SELECT region, col_1 FROM s3object "
                                             "WHERE col_1 < 500000"},
            "output": {"uri": OUTPUT_URI, "format": "parquet"}, "run": "per-object"}
        assert set(event["Items"][0]) == {"Etag", "Key", "LastModified", "Size",
                                          "StorageClass"}
    (reduce_event,) = [e for e in interpreter.events if "Reduce" in e]
    assert reduce_event == {"Reduce": {
        "run": "per-object", "batches": 3,
        "query": {"sql": "SELECT region, col_1 FROM s3object WHERE col_1 < 500000"},
        "output": {"uri": OUTPUT_URI, "format": "parquet"}}}
    assert interpreter.events[-1] is reduce_event  # after every batch
    assert output["count"] == {"batches": 3}
    assert output["reduce"]["reduced"] is False
    assert output["reduce"]["outputs"] == []

    # today's per-object outputs, each the query over its object
    written = [o for r in interpreter.responses if "objects" in r for o in r["objects"]]
    assert len(written) == OBJECTS
    for i, frame in enumerate(frames):
        (result,) = [o for o in written
                     if o["source"] == f"s3://{DATA}/in/part-{i:02}.parquet"]
        (uri,) = result["outputs"]
        expected = frame.filter(pl.col("col_1") < 500000).select("region", "col_1")
        assert read_parquet(uri).equals(expected)
    assert not keys(OUT, "results/_partials/")
    assert keys(OUT, RESULTS_PREFIX)  # the ResultWriter's manifest


COMBINING = ("SELECT region, COUNT(*) AS n, SUM(col_1) AS s, MAX(col_4) AS hi FROM s3object "
             "GROUP BY region ORDER BY region")


@pytest.mark.slow  # an execution: about 20 s on 2 shared cores
def test_a_combining_query_gives_one_answer_over_every_object(
        s3: S3Env, interpreter: Invocations) -> None:
    frames = data_frames()
    put_data(s3, frames)
    described = execute(interpreter, {"query": {"sql": COMBINING}}, name="combined-run")
    assert described["status"] == "SUCCEEDED", described
    output = json.loads(described["output"])

    batches = [e for e in interpreter.events if "Items" in e]
    assert [len(e["Items"]) for e in batches] == [7, 7, 6]
    partials = [r["partial"] for r in interpreter.responses if "partial" in r]
    assert len(partials) == 3
    assert all(p.startswith(f"{OUTPUT_URI}_partials/combined-run/") for p in partials)
    assert interpreter.events[-1] == {"Reduce": {
        "run": "combined-run", "batches": 3, "query": {"sql": COMBINING},
        "output": {"uri": OUTPUT_URI, "format": "parquet"}}}
    assert output["count"] == {"batches": 3}

    (combined,) = output["reduce"]["outputs"]
    assert combined["uri"].startswith(f"{OUTPUT_URI}combined.")
    want = pl.SQLContext(s3object=pl.concat(frames)).execute(COMBINING, eager=True)
    # sums regrouped batch by batch: equal within rounding
    assert_frame_equal(read_parquet(combined["uri"]), want, check_dtypes=False,
                       check_exact=False, rel_tol=1e-9)
    assert output["reduce"]["stats"]["objects"] == OBJECTS
    assert not keys(OUT, "results/_partials/")  # the reduce deleted them


@pytest.mark.slow  # an execution: about 20 s on 2 shared cores
def test_a_failed_batch_makes_the_reduce_refuse(
        s3: S3Env, interpreter: Invocations) -> None:
    """A batch that fails, tolerated by the map (``toleratedFailurePercentage`` 100 here;
    moto's interpreter ignores ``ToleratedFailurePercentagePath`` and tolerates every
    failure), is still counted by ``DescribeMapRun``: the reduce finds one partial fewer
    than batches and refuses with a typed error, so there is no combined answer."""
    put_data(s3, data_frames())
    import boto3

    boto3.client("s3", region_name=REGION).put_object(
        Bucket=DATA, Key="in/part-03-broken.parquet", Body=b"not a parquet file")
    described = execute(interpreter, {"query": {"sql": COMBINING},
                                      "toleratedFailurePercentage": 100}, name="broken-run")
    assert described["status"] == "FAILED", described
    assert described["error"] == "ObjectNotFoundError"
    assert "2 partial answer(s) of run 'broken-run' where the map ran 3" in described["cause"]

    batches = [e for e in interpreter.events if "Items" in e]
    assert [len(e["Items"]) for e in batches] == [7, 7, 7]
    failed = [r for r in interpreter.responses if "errorType" in r]
    assert [r["errorType"] for r in failed] == ["ObjectFormatError", "ObjectNotFoundError"]
    (reduce_event,) = [e for e in interpreter.events if "Reduce" in e]
    assert reduce_event["Reduce"]["batches"] == 3  # the failed batch counted
    assert not [k for k in keys(OUT) if "combined" in k]
    assert len(keys(OUT, "results/_partials/broken-run/")) == 2  # left, not reduced
