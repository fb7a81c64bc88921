"""From a Lambda event to a response: the event's kind (:func:`events.classify`) picks
its route in one table (:data:`ROUTES`); the configuration, the deadline and the engine are
set up once per warm container.

- direct invoke: the JSON query contract, parsed here into a typed request; the response
  of :func:`s3slice.answer.run.run`.
- S3 notifications, EventBridge, SQS and Step Functions: :mod:`.batches`.
- S3 Select requests: :mod:`.select`; the workflow's Check and Reduce steps: :mod:`.workflow`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from s3slice.answer.run import run
from s3slice.core import contract
from s3slice.core.errors import RequestError, S3SliceError, TimeoutBudgetError
from s3slice.core.model import ObjectRef, parse_request
from s3slice.core.settings import Settings
from s3slice.engine.engine import Engine
from s3slice.entry import events as _events
from s3slice.entry import tables, workflow
from s3slice.entry.batches import run_objects, sqs, step_functions
from s3slice.entry.config import Config
from s3slice.entry.observe import logger, record_error, record_stats, tracing
from s3slice.entry.select import run_select

# Stop this long before Lambda's hard timeout, so that nothing is left half-written (the
# deployment reads it from the contract: a timeout of this or less is refused at synth).
SAFETY_MARGIN_MS = contract.SAFETY_MARGIN_MS

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


#: A route answers one kind of event: (event, engine, configuration, Lambda context).
Route = Callable[[Mapping[str, Any], Engine, Config, Any], dict[str, Any]]


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
        return ROUTES[kind](event, engine, cfg, context)
    except S3SliceError as e:
        record_error(type(e).__name__)
        logger.warning("request failed", extra={"error": e.to_dict()})
        raise


def _direct(event: Mapping[str, Any], engine: Engine, cfg: Config, context: Any
            ) -> dict[str, Any]:
    answer = run(parse_request(event, default_output=cfg.output), engine=engine)
    record_stats(answer.stats)
    response = answer.to_dict()
    logger.info("request done", extra={"stats": response["stats"],
                                       "outputs": [o["uri"] for o in answer.outputs]})
    return response


def _select(event: Mapping[str, Any], engine: Engine, cfg: Config, context: Any
            ) -> dict[str, Any]:
    return run_select(event, engine=engine)


def _test_event(event: Mapping[str, Any], engine: Engine, cfg: Config, context: Any
                ) -> dict[str, Any]:
    logger.info("s3:TestEvent ignored")
    return {"status": "ok", "objects": []}


def _s3(event: Mapping[str, Any], engine: Engine, cfg: Config, context: Any
        ) -> dict[str, Any]:
    """An S3 event notification's objects."""
    objects = _events.s3_notification_objects(event)
    query, output = cfg.require(what="an s3 event")
    return run_objects(objects, query, output, engine, cfg, compact=False, sources=cfg.sources)


def _eventbridge(event: Mapping[str, Any], engine: Engine, cfg: Config, context: Any
                 ) -> dict[str, Any]:
    """An EventBridge "Object Created" event's object."""
    objects: list[ObjectRef | _events.Skipped] = [_events.eventbridge_object(event)]
    query, output = cfg.require(what="an eventbridge event")
    return run_objects(objects, query, output, engine, cfg, compact=False, sources=cfg.sources)


def _reduce(event: Mapping[str, Any], engine: Engine, cfg: Config, context: Any
            ) -> dict[str, Any]:
    return workflow.reduce(event["Reduce"], engine=engine, cfg=cfg)


def _check(event: Mapping[str, Any], engine: Engine, cfg: Config, context: Any
           ) -> dict[str, Any]:
    return workflow.check(event["Check"], cfg=cfg)


ROUTES: dict[_events.Kind, Route] = {
    "direct": _direct,
    "s3": _s3,
    "eventbridge": _eventbridge,
    "sqs": sqs,
    "sfn-batch": step_functions,
    "sfn-item": step_functions,
    "s3-test": _test_event,
    "s3-select": _select,
    "reduce": _reduce,
    "check": _check,
    "table-plan": tables.plan_table,
    "table-batch": tables.table_batch,
}
