"""Runs over several objects: a notification's, an SQS message's or a Step Functions
batch's objects, each queried and written on its own; one failing never stops the others.

- S3 notifications and EventBridge events: the first failure is raised after the others
  were processed (their outputs are complete and idempotent), so an asynchronous invoke
  retries and then reaches its failure destination.
- SQS: each message separately; failed ones are reported in ``batchItemFailures`` so only
  they are retried (and after ``maxReceiveCount``, land in the dead-letter queue).
- Step Functions: one item or a Distributed Map batch; the response is kept small for the
  state payload limit; a failure raises its typed error for ``Retry``/``Catch``. A batch of
  a combining query writes its partial answer instead (:mod:`s3slice.entry.workflow`).

An object under the output location is never processed (the recursion guard), and an
object an S3 notification, EventBridge event or SQS message names outside the watched
sources is refused, alone, with an ``AccessDeniedError`` (:func:`.config.refuse_unwatched`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from s3slice.answer.run import Answer, run
from s3slice.core import cost as _cost
from s3slice.core.errors import (
    ObjectFormatError,
    S3SliceError,
    TimeoutBudgetError,
    first_line,
    is_native_panic,
)
from s3slice.core.model import ObjectRef, OutputSpec, Query, Request
from s3slice.engine.engine import Engine
from s3slice.engine.sources import listable
from s3slice.entry import events as _events
from s3slice.entry import workflow as _reduce
from s3slice.entry.config import Config, refuse_unwatched
from s3slice.entry.observe import logger, record_error, record_failed_message, record_stats

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes import SQSRecord

#: Step Functions' state payload limit is 256 KiB; responses stay well below it.
MAX_STATE_RESPONSE_BYTES = 200 * 1024
#: Why an item is not read.
NOT_LISTABLE = "a folder marker or an empty object (a read of the prefix skips it too)"
UNDER_OUTPUT = "under the output location"


@contextmanager
def _object_keys(obj: ObjectRef) -> Iterator[None]:
    logger.append_keys(object=obj.uri)
    try:
        yield
    finally:
        logger.remove_keys(["object"])


def run_object(obj: ObjectRef, query: Query, output: OutputSpec,
               engine: Engine) -> Answer:
    """One object, one output: what every triggered run does per object."""
    with _object_keys(obj):
        answer = run(Request(sources=(obj,), query=query, output=output), engine=engine)
        record_stats(answer.stats)
        logger.info("object done", extra={"stats": answer.stats.to_dict()})
    return answer


#: Where a triggered object's watched sources come from, for its refusal's message.
CONFIGURED_SOURCES = "S3SLICE_SOURCE_URIS"


def run_objects(objects: list[ObjectRef | _events.Skipped], query: Query, output: OutputSpec,
                 engine: Engine, cfg: Config, *, compact: bool,
                 sources: tuple[tuple[str, str], ...] = (),
                 sources_from: str = CONFIGURED_SOURCES) -> dict[str, Any]:
    """Every object in turn; skipped ones are reported, the first failure is raised last.

    Objects a trigger named are checked against its watched ``sources`` (from
    ``sources_from``): one outside them all fails alone, with nothing read or written."""
    results: list[dict[str, Any]] = []
    failures: list[S3SliceError] = []

    def fail(obj: ObjectRef, e: S3SliceError) -> None:
        record_error(type(e).__name__)
        logger.warning("object failed", extra={"object": obj.uri, "error": e.to_dict()})
        failures.append(e)
        results.append({"source": obj.uri, "status": "failed", **e.to_dict()})

    totals = {"objects": 0, "object_bytes": 0, "bytes_fetched": 0, "requests": 0,
              "rows_in": 0, "rows_out": 0}
    spent: dict[str, float | None] = {"gb_s": 0.0, "usd": 0.0}  # the objects' cost, summed
    for obj in objects:
        if isinstance(obj, _events.Skipped):
            results.append({"source": obj.uri, "status": "skipped", "reason": obj.reason})
            continue
        if cfg.is_output(obj, output):
            logger.warning("object under the output location skipped (recursion guard)",
                           extra={"object": obj.uri})
            results.append({"source": obj.uri, "status": "skipped", "reason": UNDER_OUTPUT})
            continue
        refused = refuse_unwatched(obj, sources, named_by=sources_from)
        if refused is not None:
            fail(obj, refused)
            continue
        try:
            answer = _contained_run(obj, query, output, engine)
        except TimeoutBudgetError as e:
            done = [r["source"] for r in results if r["status"] == "ok"]
            if done:  # no time left for the others either; say what did finish
                e.message = (f"{e.message} ({len(done)} object(s) before it were processed "
                             f"and their outputs are complete: {', '.join(done[:5])}"
                             f"{' …' if len(done) > 5 else ''})")
                e.args = (e.message,)
            raise
        except S3SliceError as e:
            fail(obj, e)
            continue
        stats = answer.stats
        for k in totals:
            totals[k] += getattr(stats, k)
        for k in spent:
            spent[k] = _cost.add(spent[k], stats.cost[k])
        results.append({"source": obj.uri, "status": "ok",
                        "outputs": [o["uri"] for o in answer.outputs],
                        "rows_out": stats.rows_out, "bytes_fetched": stats.bytes_fetched})
    if failures:
        first = failures[0]
        if len(objects) > 1:
            rest = len(objects) - len(failures)
            first.message = (f"{first.message} ({len(failures)} of {len(objects)} objects "
                             f"failed; the other {rest} were processed)" if rest else
                             f"{first.message} (all {len(objects)} objects failed)")
            first.args = (first.message,)
        raise first
    skipped = sum(r["status"] == "skipped" for r in results)
    response = {"status": "ok", "objects": results,
                "stats": {**totals, "objects_skipped": skipped,
                          "cost": {k: None if v is None else round(v, 12)
                                   for k, v in spent.items()}}}
    return _compact(response) if compact else response


def _contained_run(obj: ObjectRef, query: Query, output: OutputSpec,
                   engine: Engine) -> Answer:
    """:func:`run_object`, with a native panic from any phase the engine does not type
    itself an :class:`ObjectFormatError` of this object: one object never takes its batch
    down."""
    try:
        return run_object(obj, query, output, engine)
    except S3SliceError:
        raise
    except BaseException as e:
        if is_native_panic(e):
            raise ObjectFormatError(f"a native library failed on it: {first_line(e)}",
                                    uri=obj.uri) from e
        raise


def _compact(response: dict[str, Any]) -> dict[str, Any]:
    """Keep a Step Functions result under the state payload limit."""
    if len(json.dumps(response, separators=(",", ":"))) <= MAX_STATE_RESPONSE_BYTES:
        return response
    objects = response["objects"]
    kept: list[dict[str, Any]] = []
    size = 1024
    for o in objects:
        size += len(json.dumps(o, separators=(",", ":"))) + 1
        if size > MAX_STATE_RESPONSE_BYTES:
            break
        kept.append(o)
    return {**response, "objects": kept, "objects_omitted": len(objects) - len(kept)}


def sqs(event: Mapping[str, Any], engine: Engine, cfg: Config, context: Any) -> dict[str, Any]:
    # A message may name its pipeline's query and output (events.sqs_body_pipeline); the
    # configured ones are required up front only when none does.
    if not _events.carries_pipelines(event):
        cfg.require(what="an SQS event")

    def record_handler(record: SQSRecord) -> None:
        try:
            run_record(record)
        except Exception as e:
            failed_record(record, e)
            raise  # the batch utility reports it in batchItemFailures

    def run_record(record: SQSRecord) -> None:
        objects = _events.sqs_body_objects(record)
        pipeline = _events.sqs_body_pipeline(record)
        query, output = ((pipeline.query, pipeline.output) if pipeline is not None
                         else cfg.require(what="an SQS event"))
        # A pipeline's message names what its pipeline watches; else the configured sources.
        if pipeline is not None and pipeline.sources:
            sources = pipeline.sources
            named_by = f"the source of pipeline {pipeline.name or '(unnamed)'}"
        else:
            sources, named_by = cfg.sources, CONFIGURED_SOURCES
        run_objects(objects, query, output, engine, cfg, compact=False, sources=sources,
                    sources_from=named_by)

    # Imported here: Powertools' batch utility costs about 0.2 s of a cold start, and only
    # an SQS event needs it.
    from aws_lambda_powertools.utilities.batch import (
        BatchProcessor,
        EventType,
        process_partial_response,
    )

    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    result = process_partial_response(event=dict(event), record_handler=record_handler,
                                      processor=processor, context=context)
    failed = result.get("batchItemFailures", [])
    if failed:
        logger.warning("some messages failed", extra={"failed": [f["itemIdentifier"]
                                                                 for f in failed]})
    return dict(result)


def failed_record(record: SQSRecord, e: Exception) -> None:
    """Why one SQS message failed: one structured log line (its error type and message,
    whether a retry can succeed, its objects and pipeline) and a ``FailedMessages`` metric
    by error type.

    SQS redelivers it all the same, up to the queue's ``maxReceiveCount``, then moves it to
    the dead-letter queue: a permanent error (``retryable: false``: a query the function
    refuses, a missing column, an object outside the pipeline) fails the same way each
    time, but the dead-letter queue is where its message is kept for a redrive once the
    pipeline, grant or object is fixed, and deleting it would lose the object's run."""
    error = e.to_dict() if isinstance(e, S3SliceError) else {
        # Not one of the service's typed errors: not known to be permanent.
        "errorType": type(e).__name__, "errorMessage": str(e), "retryable": True}
    try:
        objects = [o.uri for o in _events.sqs_body_objects(record)]
    except S3SliceError:
        objects = []
    record_failed_message(str(error["errorType"]))
    logger.error("message failed", extra={
        "messageId": record.message_id, **error,
        "object": objects[0] if len(objects) == 1 else None, "objects": objects,
        "pipeline": _events.pipeline_name(record),
        "receiveCount": record.attributes.approximate_receive_count})


def step_functions(event: Mapping[str, Any], engine: Engine, cfg: Config, context: Any
                   ) -> dict[str, Any]:
    """A Distributed Map batch (``Items``) or one item (``Item``)."""
    kind: _events.Kind = "sfn-batch" if "Items" in event else "sfn-item"
    batch = _events.parse_batch_input(event.get("BatchInput"))
    objects = _events.step_functions_objects(event, kind, batch.bucket)
    query, output = cfg.require(what="a Step Functions input", query=batch.query,
                                output=batch.output, given_in="BatchInput")
    # Items come from a listing: what a read of the listed prefix skips is skipped here
    # too, by the same rule (a Spark folder's marker and its empty _SUCCESS).
    items: list[ObjectRef | _events.Skipped] = [
        o if listable(o) else _events.Skipped(uri=o.uri, reason=NOT_LISTABLE)
        for o in objects]
    if kind == "sfn-batch" and batch.run is not None:
        read = [o for o in items if isinstance(o, ObjectRef) and not cfg.is_output(o, output)]
        skipped = [o if isinstance(o, _events.Skipped) else
                   _events.Skipped(uri=o.uri, reason=UNDER_OUTPUT) for o in items
                   if not isinstance(o, ObjectRef) or cfg.is_output(o, output)]
        partial = _reduce.map_batch(read, skipped, query, output, batch.run, engine)
        if partial is not None:
            return partial
    return run_objects(items, query, output, engine, cfg, compact=True)
