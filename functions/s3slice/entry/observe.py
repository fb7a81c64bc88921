"""Logging, metrics and tracing, with Powertools.

- Logs: structured JSON on stderr, with the request id and, per object, its URI as the
  correlation keys. (Lambda sends both streams to CloudWatch; on the command line stdout
  carries only the JSON response.)
- Metrics: CloudWatch EMF, flushed once per invocation by Powertools' ``log_metrics``
  (with its ``ColdStart`` metric): bytes fetched, requests, rows in and out, objects per
  strategy, per-phase durations and errors by type. Off with
  ``POWERTOOLS_METRICS_DISABLED=true``.
- Tracing: an X-Ray subsegment per phase (plan, fetch, execute, write), only when the
  function runs in Lambda with tracing on and the X-Ray SDK is importable; otherwise
  every span is a no-op context manager and nothing is imported.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

from aws_lambda_powertools import Logger, Metrics, single_metric
from aws_lambda_powertools.metrics import MetricUnit

from s3slice.engine.results import Stats

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME", "s3slice")
NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "s3slice")

logger = Logger(service=SERVICE, stream=sys.stderr)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)

F = TypeVar("F", bound=Callable[..., Any])

PHASE_METRICS = {"plan": "PlanTime", "fetch": "FetchTime", "execute": "ExecuteTime",
                 "write": "WriteTime", "total": "TotalTime"}


def record_stats(stats: Stats) -> None:
    """One invocation's (or one object's) stats as metrics.

    Nothing is added when metrics are off: Powertools would keep the values across warm
    invocations (a disabled flush does not clear them) and print them anyway once a
    metric holds 100 values.
    """
    if not metrics_enabled():
        return
    metrics.add_metric(name="Objects", unit=MetricUnit.Count, value=stats.objects)
    metrics.add_metric(name="ObjectBytes", unit=MetricUnit.Bytes, value=stats.object_bytes)
    metrics.add_metric(name="BytesFetched", unit=MetricUnit.Bytes, value=stats.bytes_fetched)
    metrics.add_metric(name="Requests", unit=MetricUnit.Count, value=stats.requests)
    metrics.add_metric(name="RowsIn", unit=MetricUnit.Count, value=stats.rows_in)
    metrics.add_metric(name="RowsOut", unit=MetricUnit.Count, value=stats.rows_out)
    for phase, ms in stats.timings_ms.items():
        if phase in PHASE_METRICS:
            metrics.add_metric(name=PHASE_METRICS[phase], unit=MetricUnit.Milliseconds,
                               value=ms)
    for strategy in stats.strategy.split("+"):
        if strategy:
            _single("ObjectsByStrategy", "Strategy", strategy)


def lambda_entry(handler: F) -> F:
    """The handler under Powertools' own decorators: ``metrics.log_metrics`` (the
    invocation's metrics flushed once, and a ``ColdStart`` metric) and
    ``logger.inject_lambda_context`` (the request id and function in every log line).

    A failed request has already published its ``Errors`` metric on its own (a single
    metric, for its own dimension), and with metrics off nothing is added: the empty set
    is expected then, and Powertools' warning about it, on every such invocation, says
    nothing. The filter is set in the invocation (it replaces an identical one), so that it
    holds whatever reset the process's filters since the import.
    """

    @metrics.log_metrics(capture_cold_start_metric=True)
    @logger.inject_lambda_context
    @functools.wraps(handler)
    def entry(event: Any, context: Any) -> Any:
        warnings.filterwarnings("ignore", message="No application metrics to publish",
                                category=UserWarning)
        return handler(event, context)

    return cast(F, entry)


def record_error(error_type: str) -> None:
    _single("Errors", "ErrorType", error_type)


def record_failed_message(error_type: str) -> None:
    """One SQS message failed (it is redelivered, then dead-lettered), by error type."""
    _single("FailedMessages", "ErrorType", error_type)


def _single(name: str, dimension: str, value: str) -> None:
    if not metrics_enabled():
        return
    with single_metric(name=name, unit=MetricUnit.Count, value=1, namespace=NAMESPACE,
                       default_dimensions={"service": SERVICE}) as m:
        m.add_dimension(name=dimension, value=value)


def metrics_enabled() -> bool:
    from aws_lambda_powertools.metrics.functions import is_metrics_disabled

    return not is_metrics_disabled()


class Tracing:
    """Subsegments per phase when X-Ray is live; free no-ops otherwise."""

    def __init__(self) -> None:
        self._recorder: Any = None
        self._checked = False

    @property
    def recorder(self) -> Any:
        if not self._checked:
            self._checked = True
            self._recorder = _xray_recorder()
        return self._recorder

    @contextlib.contextmanager
    def span(self, name: str, **annotations: str | int | float | bool) -> Iterator[None]:
        recorder = self.recorder
        if recorder is None:
            yield
            return
        with recorder.in_subsegment(name) as sub:
            for key, value in annotations.items():
                sub.put_annotation(key, value)
            yield

    def bind(self, fn: F) -> F:
        """``fn`` run in another thread under the caller's trace entity (X-Ray's context
        is thread-local, so a pool's subsegments would otherwise be orphans)."""
        recorder = self.recorder
        if recorder is None:
            return fn
        entity = recorder.get_trace_entity()

        def bound(*args: Any, **kwargs: Any) -> Any:
            recorder.set_trace_entity(entity)
            try:
                return fn(*args, **kwargs)
            finally:
                recorder.clear_trace_entities()
        return bound  # type: ignore[return-value]


def _xray_recorder() -> Any:
    disabled = os.environ.get("POWERTOOLS_TRACE_DISABLED", "false").lower() in ("1", "true")
    in_lambda = bool(os.environ.get("LAMBDA_TASK_ROOT")) and not os.environ.get("AWS_SAM_LOCAL")
    if disabled or not in_lambda or os.environ.get("_X_AMZN_TRACE_ID") is None:
        return None
    if importlib.util.find_spec("aws_xray_sdk") is None:
        logger.warning("tracing is on but the X-Ray SDK is not installed; no subsegments")
        return None
    from aws_lambda_powertools import Tracer

    # No auto-patching: the service's phases are its subsegments, and patching every
    # module the X-Ray SDK supports imports each one installed (botocore, requests,
    # sqlite3, httpx, ...) on the first traced invoke: 458 modules and 1.7 CPU s in a
    # venv, botocore's client from Lambda's own runtime on every cold start.
    return Tracer(service=SERVICE, auto_patch=False).provider


tracing = Tracing()
