"""Metrics and logs: what an invocation publishes as EMF on stdout, with metrics on and
off, through the decorators the handler uses (Powertools' ``log_metrics`` with its cold
start metric, and ``inject_lambda_context``)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from s3slice import Stats
from s3slice.cli.invoke import LambdaContext
from s3slice.entry.observe import lambda_entry, metrics, record_error, record_stats

STATS = Stats(objects=1, object_bytes=100, bytes_fetched=40, requests=2, rows_in=10,
              rows_out=3, timings_ms={"fetch": 5.0, "total": 9.0}, strategy="ranges")


@pytest.fixture(autouse=True)
def empty_metric_set() -> Iterator[None]:
    metrics.clear_metrics()
    yield
    metrics.clear_metrics()


def emf(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if '"_aws"' in line]


def test_an_invocation_publishes_its_stats_once(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")

    @lambda_entry
    def handler(event: Any, context: Any) -> dict[str, Any]:
        record_stats(STATS)
        return {"status": "ok"}

    assert handler({}, LambdaContext()) == {"status": "ok"}
    blobs = emf(capsys.readouterr().out)
    main = [b for b in blobs if "BytesFetched" in b]
    assert len(main) == 1
    assert main[0]["BytesFetched"] == [40.0] and main[0]["FetchTime"] == [5.0]
    assert any(b.get("Strategy") == "ranges" for b in blobs)
    assert metrics.metric_set == {}  # flushed and cleared for the next invocation


def test_a_failed_request_publishes_its_error_and_no_warning(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")

    @lambda_entry
    def handler(event: Any, context: Any) -> dict[str, Any]:
        record_error("ObjectNotFoundError")
        raise LookupError("no such object")

    with warnings.catch_warnings(record=True) as caught, pytest.raises(LookupError):
        handler({}, LambdaContext())
    assert not caught
    blobs = emf(capsys.readouterr().out)
    assert [(b["ErrorType"], b["Errors"]) for b in blobs] == [("ObjectNotFoundError", [1.0])]


def test_nothing_is_kept_or_printed_when_metrics_are_off(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Powertools prints a metric set once a metric holds 100 values, even when disabled.
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")

    @lambda_entry
    def handler(event: Any, context: Any) -> dict[str, Any]:
        for _ in range(150):  # a Distributed Map batch: one record per object
            record_stats(STATS)
        record_error("ObjectNotFoundError")
        return {"status": "ok"}

    with warnings.catch_warnings(record=True) as caught:
        handler({}, LambdaContext())
        handler({}, LambdaContext())
    assert not caught
    assert capsys.readouterr().out == ""
    assert metrics.metric_set == {}


def test_the_first_invocation_publishes_a_cold_start_and_every_log_names_its_request(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from aws_lambda_powertools.metrics.provider import cold_start

    from s3slice.entry.observe import logger

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    monkeypatch.setattr(cold_start, "is_cold_start", True)
    seen: list[Any] = []

    @lambda_entry
    def handler(event: Any, context: Any) -> dict[str, Any]:
        seen.append(logger.get_current_keys().get("function_request_id"))
        record_stats(STATS)
        return {"status": "ok"}

    first, second = LambdaContext(), LambdaContext()
    handler({}, first)
    handler({}, second)
    assert seen == [first.aws_request_id, second.aws_request_id]
    blobs = emf(capsys.readouterr().out)
    cold = [b for b in blobs if "ColdStart" in b]
    assert [(b["ColdStart"], b["function_name"]) for b in cold] == [([1.0], "s3slice-local")]
