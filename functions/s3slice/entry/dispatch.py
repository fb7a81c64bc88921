"""From a Lambda event to a response: routing by shape, configuration, deadline, telemetry.

One handler serves every entry point (see ``_events`` for the shapes):

- direct invoke: the JSON query contract; the response of ``_output.run``.
- S3 notifications and EventBridge events: each created object is queried with the
  configured query and written to the configured output. If any object fails, the first
  failure is raised after the others were processed (their outputs are complete and
  idempotent), so an asynchronous invoke retries and then reaches its failure destination.
- SQS: each message separately; failed ones are reported in ``batchItemFailures`` so only
  they are retried (and after ``maxReceiveCount``, land in the dead-letter queue).
- Step Functions: one item or a Distributed Map batch; the response is kept small for the
  state payload limit; a failure raises its typed error for ``Retry``/``Catch``.

An object under the output location is never processed (the recursion guard).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from aws_lambda_powertools.utilities.data_classes import SQSRecord

from s3slice._errors import (
    ObjectFormatError,
    RequestError,
    S3SliceError,
    TimeoutBudgetError,
    first_line,
    is_native_panic,
)
from s3slice._model import ObjectRef, OutputSpec, Query, Request
from s3slice._output import run
from s3slice._settings import Settings
from s3slice.engine.engine import Engine
from s3slice.entry import events as _events
from s3slice.entry import workflow as _reduce
from s3slice.entry.config import Config
from s3slice.entry.observe import logger, record_error, record_stats, tracing
from s3slice.entry.select import run_select

# Stop this long before Lambda's hard timeout, so that nothing is left half-written.
SAFETY_MARGIN_MS = 3000
#: Step Functions' state payload limit is 256 KiB; responses stay well below it.
MAX_STATE_RESPONSE_BYTES = 200 * 1024

_engine: Engine | None = None
_engine_key: tuple[Any, ...] | None = None
_config: Config | None = None


def engine_for(settings: Settings) -> Engine:
    """One engine per warm container: its S3 clients and footer cache are reused."""
    global _engine, _engine_key
    key = (settings,)
    if _engine is None or _engine_key != key:
        _engine = Engine(settings)
        _engine.span = tracing.span
        _engine.bind = tracing.bind
        _engine_key = key
    return _engine


def config() -> Config:
    """The function's configuration, read and validated once (at cold start)."""
    global _config
    if _config is None:
        _config = Config.from_env()
    return _config


def reset() -> None:
    """Forget the cached engine and configuration (a new environment, as in a cold start)."""
    global _engine, _engine_key, _config
    _engine = _engine_key = _config = None


def deadline_from(context: Any) -> Callable[[], None]:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return lambda: None

    def check() -> None:
        left = remaining()
        if left < SAFETY_MARGIN_MS:
            raise TimeoutBudgetError(
                f"stopped with {left} ms left before the function's timeout; no partial "
                "output was written. Raise the timeout or narrow the query")
    return check


def handle(event: Any, context: Any) -> dict[str, Any]:
    logger.append_keys(request_id=getattr(context, "aws_request_id", None))
    cfg = config()
    engine = engine_for(Settings.from_env())
    engine.deadline = deadline_from(context)
    if isinstance(event, str | bytes):
        try:
            event = json.loads(event)
        except ValueError as e:
            raise RequestError(f"the event is not JSON: {e}") from e
    kind = _events.classify(event)
    logger.append_keys(entry=kind)
    try:
        if kind == "direct":
            return _direct(event, engine, cfg)
        if kind == "s3-select":
            response = run_select(event, engine=engine)
            record_stats(response["stats"])
            return response
        if kind == "s3-test":
            logger.info("s3:TestEvent ignored")
            return {"status": "ok", "objects": []}
        if kind == "sqs":
            return _sqs(event, engine, cfg, context)
        if kind in ("sfn-batch", "sfn-item"):
            return _step_functions(event, kind, engine, cfg)
        if kind == "reduce":
            response = _reduce.reduce(event["Reduce"], engine=engine, cfg=cfg)
            record_stats(response["stats"])
            return response
        if kind == "check":
            return _reduce.check(event["Check"], cfg=cfg)
        objects = (_events.s3_notification_objects(event) if kind == "s3"
                   else [_events.eventbridge_object(event)])
        query, output = cfg.require(what=f"an {kind} event")
        return _run_objects(objects, query, output, engine, cfg, compact=False)
    except S3SliceError as e:
        record_error(type(e).__name__)
        logger.warning("request failed", extra={"error": e.to_dict()})
        raise


def _direct(event: Any, engine: Engine, cfg: Config) -> dict[str, Any]:
    response = run(event, engine=engine, default_output=cfg.output)
    record_stats(response["stats"])
    logger.info("request done", extra={"stats": response["stats"],
                                       "outputs": [o["uri"] for o in response["outputs"]]})
    return response


@contextmanager
def _object_keys(obj: ObjectRef) -> Iterator[None]:
    logger.append_keys(object=obj.uri)
    try:
        yield
    finally:
        logger.remove_keys(["object"])


def run_object(obj: ObjectRef, query: Query, output: OutputSpec,
               engine: Engine) -> dict[str, Any]:
    """One object, one output: what every triggered run does per object."""
    with _object_keys(obj):
        response = run(Request(sources=(obj,), query=query, output=output), engine=engine)
        record_stats(response["stats"])
        logger.info("object done", extra={"stats": response["stats"]})
    return response


def _run_objects(objects: list[ObjectRef | _events.Skipped], query: Query, output: OutputSpec,
                 engine: Engine, cfg: Config, *, compact: bool) -> dict[str, Any]:
    """Every object in turn; skipped ones are reported, the first failure is raised last."""
    results: list[dict[str, Any]] = []
    failures: list[S3SliceError] = []
    totals = {"objects": 0, "object_bytes": 0, "bytes_fetched": 0, "requests": 0,
              "rows_in": 0, "rows_out": 0}
    spent = {"gb_s": 0.0, "usd": 0.0}  # the objects' cost, summed
    for obj in objects:
        if isinstance(obj, _events.Skipped):
            results.append({"source": obj.uri, "status": "skipped", "reason": obj.reason})
            continue
        if cfg.is_output(obj, output):
            logger.warning("object under the output location skipped (recursion guard)",
                           extra={"object": obj.uri})
            results.append({"source": obj.uri, "status": "skipped",
                            "reason": "under the output location"})
            continue
        try:
            response = _contained_run(obj, query, output, engine)
        except TimeoutBudgetError as e:
            done = [r["source"] for r in results if r["status"] == "ok"]
            if done:  # no time left for the others either; say what did finish
                e.message = (f"{e.message} ({len(done)} object(s) before it were processed "
                             f"and their outputs are complete: {', '.join(done[:5])}"
                             f"{' …' if len(done) > 5 else ''})")
                e.args = (e.message,)
            raise
        except S3SliceError as e:
            record_error(type(e).__name__)
            logger.warning("object failed", extra={"object": obj.uri, "error": e.to_dict()})
            failures.append(e)
            results.append({"source": obj.uri, "status": "failed", **e.to_dict()})
            continue
        stats = response["stats"]
        for k in totals:
            totals[k] += stats.get(k, 0)
        for k in spent:
            spent[k] += stats["cost"][k]
        results.append({"source": obj.uri, "status": "ok",
                        "outputs": [o["uri"] for o in response["outputs"]],
                        "rows_out": stats["rows_out"], "bytes_fetched": stats["bytes_fetched"]})
    if failures:
        first = failures[0]
        if len(objects) > 1:
            rest = len(objects) - len(failures)
            first.message = (f"{first.message} ({len(failures)} of {len(objects)} objects "
                             f"failed; the other {rest} were processed)" if rest else
                             f"{first.message} (all {len(objects)} objects failed)")
            first.args = (first.message,)
        raise first
    response = {"status": "ok", "objects": results,
                "stats": {**totals, "cost": {k: round(v, 12) for k, v in spent.items()}}}
    return _compact(response) if compact else response


def _contained_run(obj: ObjectRef, query: Query, output: OutputSpec,
                   engine: Engine) -> dict[str, Any]:
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


def _sqs(event: Mapping[str, Any], engine: Engine, cfg: Config, context: Any) -> dict[str, Any]:
    query, output = cfg.require(what="an SQS event")

    def record_handler(record: SQSRecord) -> None:
        objects = _events.sqs_body_objects(record)
        _run_objects(objects, query, output, engine, cfg, compact=False)

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


def _step_functions(event: Mapping[str, Any], kind: _events.Kind, engine: Engine,
                    cfg: Config) -> dict[str, Any]:
    batch = _events.parse_batch_input(event.get("BatchInput"))
    objects = _events.step_functions_objects(event, kind, batch.bucket)
    query, output = cfg.require(what="a Step Functions input", query=batch.query,
                                output=batch.output, given_in="BatchInput")
    if kind == "sfn-batch" and batch.run is not None:
        mapped = [o for o in objects if not cfg.is_output(o, output)]
        partial = _reduce.map_batch(mapped, query, output, batch.run, engine) if mapped else None
        if partial is not None:
            record_stats(partial["stats"])
            return partial
    return _run_objects(list(objects), query, output, engine, cfg, compact=True)
