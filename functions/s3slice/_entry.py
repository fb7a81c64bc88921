"""From a Lambda event to responses: routing, configuration, deadline, logging."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools import Logger

from ._engine import Engine
from ._errors import RequestError, S3SliceError, TimeoutBudgetError
from ._output import run
from ._request import OutputSpec, parse_output
from ._settings import Settings

# Logs go to stderr: Lambda sends both streams to CloudWatch, and on the command line
# stdout carries only the JSON response.
logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "s3slice"), stream=sys.stderr)

# Stop this long before Lambda's hard timeout, so that nothing is left half-written.
SAFETY_MARGIN_MS = 3000

_engine: Engine | None = None
_engine_key: tuple[Any, ...] | None = None


def engine_for(settings: Settings) -> Engine:
    """One engine per warm container: its S3 clients and footer cache are reused."""
    global _engine, _engine_key
    key = (settings,)
    if _engine is None or _engine_key != key:
        _engine = Engine(settings)
        _engine_key = key
    return _engine


def default_output(env: Mapping[str, str] | None = None) -> OutputSpec | None:
    env = os.environ if env is None else env
    uri = env.get("S3SLICE_OUTPUT_URI")
    if not uri:
        return None
    spec: dict[str, Any] = {"uri": uri}
    if env.get("S3SLICE_OUTPUT_FORMAT"):
        spec["format"] = env["S3SLICE_OUTPUT_FORMAT"]
    return parse_output(spec, field="S3SLICE_OUTPUT_URI")


def deadline_from(context: Any) -> Callable[[], None]:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return lambda: None

    def check() -> None:
        left = remaining()
        if left < SAFETY_MARGIN_MS:
            raise TimeoutBudgetError(
                f"stopped with {left} ms left before the function's timeout; nothing was "
                "written. Raise the timeout or narrow the query")
    return check


def handle(event: Any, context: Any) -> dict[str, Any]:
    request_id = getattr(context, "aws_request_id", None)
    logger.append_keys(request_id=request_id)
    settings = Settings.from_env()
    engine = engine_for(settings)
    engine.deadline = deadline_from(context)
    if isinstance(event, str | bytes):
        try:
            event = json.loads(event)
        except ValueError as e:
            raise RequestError(f"the event is not JSON: {e}") from e
    try:
        response = run(event, engine=engine, default_output=default_output())
    except S3SliceError as e:
        logger.warning("request failed", extra={"error": e.to_dict()})
        raise
    logger.info("request done", extra={"stats": response["stats"],
                                       "outputs": [o["uri"] for o in response["outputs"]]})
    return response
