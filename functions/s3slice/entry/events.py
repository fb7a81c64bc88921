"""Event shapes: which entry point an event came from, and the objects it names.

Parsed with Powertools' event source data classes. The shapes, exactly as AWS sends them
(samples in ``events/``):

- S3 event notification: ``{"Records": [{"eventSource": "aws:s3", "s3": {...}}]}``;
  keys are URL-encoded, the object's size and ETag come with it.
- EventBridge "Object Created" from S3: ``{"source": "aws.s3", "detail-type": ..., "detail":
  {"bucket": {"name"}, "object": {"key", "size", "etag"}}}``; keys are not URL-encoded.
- SQS: ``{"Records": [{"eventSource": "aws:sqs", "messageId", "body"}]}`` whose bodies are
  S3 notifications (or EventBridge events, or either wrapped by SNS); S3's
  ``s3:TestEvent`` is ignored. An EventBridge event body may carry its pipeline's query,
  output and watched source in an ``s3slice`` field (``{"pipeline", "query", "output",
  "source"}``), which then apply to its object instead of the function's configured ones.
- Step Functions: a Distributed Map batch ``{"Items": [...], "BatchInput": {...}}`` or one
  item ``{"Item": {...}, "BatchInput": {...}}``, items as listObjectsV2 gives them
  (``Key``, ``Size``, ``Etag``), ``BatchInput`` holding ``bucket``, ``query`` and ``output``.
- S3 Select: ``{"Bucket", "Key", "Expression", "InputSerialization", ...}`` (``_select``).
- The workflow's own steps: ``{"Check": {...}}`` before the map and ``{"Reduce": {...}}``
  after it (``_reduce``).
- Anything else is a direct-invoke request.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from s3slice.core.contract import BATCH_INPUT_FIELDS
from s3slice.core.errors import ConfigurationError, RequestError
from s3slice.core.model import ObjectRef, OutputSpec, Query, object_ref, parse_output, parse_s3_uri
from s3slice.entry.config import ONE_PER_OBJECT, parse_query_config

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes import SQSRecord

Kind = Literal["direct", "s3", "eventbridge", "sqs", "sfn-batch", "sfn-item", "s3-test",
               "s3-select", "reduce", "check", "table-plan", "table-batch"]



def classify(event: object) -> Kind:
    """Which entry point ``event`` came through."""
    if not isinstance(event, Mapping):
        raise RequestError(f"an event must be a JSON object, got {type(event).__name__}")
    records = event.get("Records")
    if isinstance(records, list) and records and isinstance(records[0], Mapping):
        source = records[0].get("eventSource") or records[0].get("EventSource")
        if source == "aws:s3":
            return "s3"
        if source == "aws:sqs":
            return "sqs"
        raise RequestError(f"records from {source!r} are not handled; expected aws:s3 or "
                           "aws:sqs", field="Records[0].eventSource")
    if event.get("Event") == "s3:TestEvent":
        return "s3-test"
    if event.get("source") == "aws.s3" and "detail-type" in event:
        return "eventbridge"
    if "Expression" in event and "Bucket" in event:
        return "s3-select"
    if "Reduce" in event:
        return "reduce"
    if "Check" in event:
        return "check"
    if "PlanTable" in event:  # an Iceberg table's files as the map's items
        return "table-plan"
    if "Items" in event:
        items = event["Items"]
        table = isinstance(items, list) and items and isinstance(items[0], Mapping)
        return "table-batch" if table and "iceberg" in items[0] else "sfn-batch"
    if "Item" in event:
        return "sfn-item"
    return "direct"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Skipped:
    uri: str
    reason: str


def s3_notification_objects(event: Mapping[str, Any]) -> list[ObjectRef | Skipped]:
    """The created objects an S3 notification names; other event types are skipped."""
    # Powertools' event classes cost about 0.2 CPU s to import: only these events need them.
    from aws_lambda_powertools.utilities.data_classes import S3Event

    out: list[ObjectRef | Skipped] = []
    for i, record in enumerate(S3Event(dict(event)).records):
        try:
            bucket = record.s3.bucket.name
            obj = record.s3.get_object
            ref = object_ref(bucket, obj.key, size=obj.raw_event.get("size"),
                             etag=obj.raw_event.get("eTag"), url_encoded=True)
            name = record.event_name
        except (KeyError, TypeError, AttributeError) as e:
            raise RequestError(f"not an S3 notification record: missing {e}",
                               field=f"Records[{i}]") from None
        if not name.startswith("ObjectCreated:"):
            out.append(Skipped(uri=ref.uri, reason=f"event {name} is not an object creation"))
        else:
            out.append(ref)
    return out


def eventbridge_object(event: Mapping[str, Any]) -> ObjectRef | Skipped:
    from aws_lambda_powertools.utilities.data_classes import S3EventBridgeNotificationEvent

    ev = S3EventBridgeNotificationEvent(dict(event))
    try:
        # S3 sends EventBridge keys as they are; Powertools' ``detail.object.key`` applies
        # unquote_plus, which turns ``c++ 100%.parquet`` into another key: read the raw one.
        raw = ev.detail.object.raw_event
        ref = object_ref(ev.detail.bucket.name, raw["key"], size=raw.get("size"),
                         etag=raw.get("etag"))
    except (KeyError, TypeError) as e:
        raise RequestError(f"not an S3 EventBridge event: missing {e}", field="detail") from None
    if ev.detail_type != "Object Created":
        return Skipped(uri=ref.uri, reason=f"event {ev.detail_type!r} is not an object creation")
    return ref


def sqs_body_objects(record: SQSRecord) -> list[ObjectRef | Skipped]:
    """The objects one SQS message names (an S3 notification, possibly via SNS)."""
    try:
        body = json.loads(record.body)
    except ValueError as e:
        raise RequestError(f"message {record.message_id}: the body is not JSON: {e}",
                           field="body") from None
    if isinstance(body, Mapping) and body.get("Type") == "Notification" and "Message" in body:
        try:
            body = json.loads(body["Message"])
        except ValueError as e:
            raise RequestError(f"message {record.message_id}: the SNS message is not JSON: "
                               f"{e}", field="body.Message") from None
    kind = classify(body)
    if kind == "s3":
        return s3_notification_objects(body)
    if kind == "eventbridge":
        return [eventbridge_object(body)]
    if kind == "s3-test":
        return []
    raise RequestError(f"message {record.message_id}: expected an S3 notification, got "
                       f"{sorted(body)[:5] if isinstance(body, Mapping) else type(body).__name__}",
                       field="body")


#: The field of an SQS message body that names its pipeline's query and output: the
#: construct library's pipelines (``s3slice_cdk.Pipeline``) send each S3 "Object Created"
#: event through an EventBridge rule whose input transformer adds it, so that every
#: pipeline carries its own query in its rule, never in the function's environment.
PIPELINE_FIELD = "s3slice"
#: The fields of a message's ``s3slice`` object.
PIPELINE_FIELDS = frozenset({"pipeline", "query", "output", "source"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Pipeline:
    """The query and output an SQS message's pipeline gives its object."""

    name: str | None
    query: Query
    output: OutputSpec
    #: What the pipeline watches (``source``: an ``s3://bucket/prefix/`` or a list of
    #: them); empty when the message names none (the configured sources then apply).
    sources: tuple[tuple[str, str], ...] = ()


def _pipeline_sources(raw: object, *, field: str) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    uris = [raw] if isinstance(raw, str) else raw
    if not isinstance(uris, list) or not uris:
        raise RequestError(f"expected an s3:// URI or a non-empty list of them, got {raw!r}",
                           field=field)
    return tuple(parse_s3_uri(u, field=f"{field}[{i}]") for i, u in enumerate(uris))


def pipeline_name(record: SQSRecord) -> str | None:
    """The name a message's ``s3slice`` field gives its pipeline, if it gives one as text
    (for a failure's log line: never raises)."""
    try:
        body = json.loads(record.body)
    except ValueError:
        return None
    raw = body.get(PIPELINE_FIELD) if isinstance(body, Mapping) else None
    name = raw.get("pipeline") if isinstance(raw, Mapping) else None
    return name if isinstance(name, str) else None


def sqs_body_pipeline(record: SQSRecord) -> Pipeline | None:
    """The pipeline a message's body names in its ``s3slice`` field, or None without one
    (the function's configured query and output apply)."""
    try:
        body = json.loads(record.body)
    except ValueError:
        return None  # sqs_body_objects says why
    if not isinstance(body, Mapping) or PIPELINE_FIELD not in body:
        return None
    field = f"body.{PIPELINE_FIELD}"
    raw = body[PIPELINE_FIELD]
    if not isinstance(raw, Mapping):
        raise RequestError(f"expected an object, got {type(raw).__name__}", field=field)
    unknown = set(raw) - PIPELINE_FIELDS
    if unknown:
        raise RequestError(f"unknown field(s) {sorted(unknown)}; expected some of "
                           f"{sorted(PIPELINE_FIELDS)}", field=field)
    name = raw.get("pipeline")
    if name is not None and not isinstance(name, str):
        raise RequestError(f"expected a name, got {name!r}", field=f"{field}.pipeline")
    if not isinstance(raw.get("query"), Mapping | str):
        raise RequestError("expected a query object or SQL text", field=f"{field}.query")
    try:
        query = parse_query_config(raw["query"], variable=f"{field}.query", typed=True)
    except ConfigurationError as e:  # the message is at fault, not the function
        raise RequestError(str(e), field=f"{field}.query") from None
    output = parse_output(raw.get("output"), field=f"{field}.output")
    if output is None:
        raise RequestError("expected an output location", field=f"{field}.output")
    if output.file_key is not None:
        raise RequestError(ONE_PER_OBJECT.format(output.uri), field=f"{field}.output")
    return Pipeline(name=name, query=query, output=output,
                    sources=_pipeline_sources(raw.get("source"), field=f"{field}.source"))


def carries_pipelines(event: Mapping[str, Any]) -> bool:
    """Whether any SQS record's body holds an ``s3slice`` field (a pipeline's message)."""
    for record in event.get("Records") or ():
        body = record.get("body") if isinstance(record, Mapping) else None
        if isinstance(body, str) and f'"{PIPELINE_FIELD}"' in body:
            return True
    return False


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchInput:
    bucket: str | None
    query: Query | None
    output: OutputSpec | None
    #: The workflow execution's name: a batch of a combining query writes its partial
    #: answer under ``<output>_partials/<run>/`` for the reduce step.
    run: str | None = None


def parse_batch_input(raw: object) -> BatchInput:
    if raw is None:
        return BatchInput(bucket=None, query=None, output=None)
    if not isinstance(raw, Mapping):
        raise RequestError(f"expected an object, got {type(raw).__name__}", field="BatchInput")
    run = None if raw.get("run") is None else parse_run(raw.get("run"), field="BatchInput.run")
    unknown = set(raw) - BATCH_INPUT_FIELDS
    if unknown:
        raise RequestError(f"unknown field(s) {sorted(unknown)}; expected some of "
                           f"{sorted(BATCH_INPUT_FIELDS)}", field="BatchInput")
    bucket = raw.get("bucket")
    if bucket is not None:
        if not isinstance(bucket, str) or not bucket:
            raise RequestError(f"expected a bucket name, got {bucket!r}",
                               field="BatchInput.bucket")
        if bucket.startswith("s3://"):  # s3://bucket or s3://bucket/ names the bucket too
            bucket = parse_s3_uri(bucket if "/" in bucket[5:] else f"{bucket}/",
                                  field="BatchInput.bucket")[0]
    query = None
    if raw.get("query") is not None:
        q = raw["query"]
        if not isinstance(q, Mapping | str):
            raise RequestError(f"expected an object or SQL text, got {type(q).__name__}",
                               field="BatchInput.query")
        try:
            query = parse_query_config(q, variable="BatchInput.query")
        except ConfigurationError as e:  # here the input is at fault, not the function
            raise RequestError(str(e)) from None
    output = parse_output(raw.get("output"), field="BatchInput.output")
    if output is not None and output.file_key is not None:
        raise RequestError(ONE_PER_OBJECT.format(output.uri), field="BatchInput.output")
    return BatchInput(bucket=bucket, query=query, output=output, run=run)


def parse_run(raw: object, *, field: str) -> str:
    """A workflow execution's name, as one segment of an S3 key."""
    if (not isinstance(raw, str) or not raw or len(raw) > 256 or "/" in raw
            or raw in (".", "..") or any(ord(c) < 32 for c in raw)):
        raise RequestError(f"expected an execution name (one key segment, no '/'), got "
                           f"{raw!r}", field=field)
    return raw


def item_object(item: object, *, bucket: str | None, field: str) -> ObjectRef:
    """One listObjectsV2 item (``Key``, ``Size``, ``Etag``) as an object."""
    if not isinstance(item, Mapping):
        raise RequestError(f"expected an object with Key, got {type(item).__name__}",
                           field=field)
    key = item.get("Key")
    if not isinstance(key, str) or not key:
        raise RequestError(f"expected a non-empty Key, got {key!r}", field=f"{field}.Key")
    item_bucket = item.get("Bucket", bucket)
    if not isinstance(item_bucket, str) or not item_bucket:
        raise RequestError("no bucket: give BatchInput.bucket (or Bucket in the item)",
                           field=f"{field}.Bucket")
    return object_ref(item_bucket, key, size=item.get("Size"),
                      etag=item.get("Etag", item.get("ETag")))


def step_functions_objects(event: Mapping[str, Any], kind: Kind,
                           bucket: str | None) -> list[ObjectRef]:
    if kind == "sfn-item":
        return [item_object(event["Item"], bucket=bucket, field="Item")]
    items = event["Items"]
    if not isinstance(items, Sequence) or isinstance(items, str | bytes):
        raise RequestError(f"expected a list, got {type(items).__name__}", field="Items")
    return [item_object(it, bucket=bucket, field=f"Items[{i}]") for i, it in enumerate(items)]
