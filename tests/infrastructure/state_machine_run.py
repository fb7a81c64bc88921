"""The synthesized state machine run by moto's States Language interpreter, for the
workflow execution tests (``test_workflow_execution.py`` describes the interpreter and its
seams): the definition and its one rewrite, the deployment, its executions, and reading
what they wrote."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime
import io
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import polars as pl
import pytest

from tests.infrastructure.support import bare_stack
from tests.support import S3Env

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
    their items into batches (see ``test_workflow_execution.py``)."""
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
