"""Test support: an S3 server log kept by a WSGI middleware, faults injected on demand by
another, and a small S3 helper."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from s3slice import Engine, ReadResult, Request, parse_request

EVENTS = Path(__file__).resolve().parent.parent / "events"


@dataclasses.dataclass(frozen=True)
class Seen:
    method: str
    path: str
    query: str
    range: str | None
    status: int
    body_bytes: int


class ServerLog:
    """What the S3 server received and sent, as the server saw it."""

    def __init__(self) -> None:
        self.requests: list[Seen] = []
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def add(self, seen: Seen) -> None:
        with self._lock:
            self.requests.append(seen)

    def gets(self) -> list[Seen]:
        return [r for r in self.requests if r.method == "GET" and "list-type" not in r.query]

    def count(self, method: str) -> int:
        return sum(1 for r in self.requests if r.method == method)


def counting(log: ServerLog) -> Callable[[Any], Any]:
    def middleware(app: Any) -> Any:
        def wrapped(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            status: list[int] = [0]

            def capture(code: str, headers: Any, exc_info: Any = None) -> Any:
                status[0] = int(code.split()[0])
                return start_response(code, headers, exc_info) if exc_info else \
                    start_response(code, headers)

            chunks = list(app(environ, capture))
            log.add(Seen(method=environ["REQUEST_METHOD"], path=environ.get("PATH_INFO", ""),
                         query=environ.get("QUERY_STRING", ""),
                         range=environ.get("HTTP_RANGE"), status=status[0],
                         body_bytes=sum(len(c) for c in chunks)))
            return chunks
        return wrapped
    return middleware


@dataclasses.dataclass
class Fault:
    """Answer ``times`` requests matching ``method`` and a path containing ``path`` with
    ``kind``: ``"503"`` (SlowDown), ``"500"``, ``"403"`` (AccessDenied), ``"reset"`` (the
    headers and half the body, then the connection drops), ``"stall"`` (``seconds`` of
    silence first) or ``"delete"`` (the object is deleted, then the request is served)."""

    kind: str
    method: str = "GET"
    path: str = ""
    times: int = 1
    seconds: float = 0.0
    ranged_only: bool = False
    hits: int = 0


_ERRORS = {"503": ("503 Slow Down", "SlowDown", "Please reduce your request rate."),
           "500": ("500 Internal Server Error", "InternalError", "We encountered an error."),
           "403": ("403 Forbidden", "AccessDenied", "Access Denied")}


class Faults:
    """Faults the server injects; empty unless a test adds some."""

    def __init__(self) -> None:
        self.rules: list[Fault] = []
        self._lock = threading.Lock()
        self.on_delete: Callable[[str], None] | None = None

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self.rules.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()

    def take(self, environ: dict[str, Any]) -> Fault | None:
        with self._lock:
            for rule in self.rules:
                if (rule.hits < rule.times and environ["REQUEST_METHOD"] == rule.method
                        and rule.path in environ.get("PATH_INFO", "")
                        and "list-type" not in environ.get("QUERY_STRING", "")
                        and (not rule.ranged_only or environ.get("HTTP_RANGE"))):
                    rule.hits += 1
                    return rule
        return None


def injecting(faults: Faults) -> Callable[[Any], Any]:
    def middleware(app: Any) -> Any:
        def wrapped(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            fault = faults.take(environ)
            if fault is None:
                return app(environ, start_response)  # type: ignore[no-any-return]
            if fault.kind in _ERRORS:
                status, code, message = _ERRORS[fault.kind]
                body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                        f"<Message>{message}</Message></Error>").encode()
                start_response(status, [("Content-Type", "application/xml"),
                                        ("Content-Length", str(len(body)))])
                return [body]
            if fault.kind == "stall":
                time.sleep(fault.seconds)
                return app(environ, start_response)  # type: ignore[no-any-return]
            if fault.kind == "delete":
                assert faults.on_delete is not None
                faults.on_delete(environ["PATH_INFO"])
                return app(environ, start_response)  # type: ignore[no-any-return]
            assert fault.kind == "reset", fault.kind
            chunks = b"".join(app(environ, start_response))

            def partial() -> Iterable[bytes]:
                yield chunks[: len(chunks) // 2]
                raise ConnectionAbortedError("injected: connection reset mid-body")
            return partial()
        return wrapped
    return middleware


def chain(*middlewares: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def middleware(app: Any) -> Any:
        for wrap in reversed(middlewares):
            app = wrap(app)
        return app
    return middleware


@dataclasses.dataclass
class S3Env:
    endpoint_url: str
    log: ServerLog
    client: Any
    faults: Faults = dataclasses.field(default_factory=Faults)

    def bucket(self, name: str) -> str:
        with contextlib.suppress(self.client.exceptions.BucketAlreadyOwnedByYou):
            self.client.create_bucket(Bucket=name)
        return name

    def put_frame(self, bucket: str, key: str, frame: pl.DataFrame, **kwargs: Any) -> bytes:
        buf = io.BytesIO()
        frame.write_parquet(buf, **kwargs)
        data = buf.getvalue()
        self.client.put_object(Bucket=bucket, Key=key, Body=data)
        return data

    def get(self, uri: str) -> bytes:
        bucket, _, key = uri[5:].partition("/")
        body: bytes = self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        return body

    def empty_bucket(self, name: str) -> str:
        """The bucket, created if need be, with every object it held deleted."""
        self.bucket(name)
        for key in self.keys(name):
            self.client.delete_object(Bucket=name, Key=key)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        resp = self.client.list_objects_v2(Bucket=bucket, Prefix=prefix)
        return sorted(o["Key"] for o in resp.get("Contents", []))


def read_request(engine: Engine, request: Mapping[str, Any] | Request,
                 **kw: Any) -> ReadResult:
    """The engine's answer to ``request``, given as the JSON contract (parsed as the edges
    parse it) or typed."""
    if not isinstance(request, Request):
        request = parse_request(request)
    return engine.read(request, **kw)


def invoke(event: Any, context: Any = None) -> Any:
    """The Lambda handler on ``event``, as Lambda calls it; its response must be JSON, as
    Lambda makes it."""
    import json

    from s3slice.cli.invoke import LambdaContext
    from s3slice.handler import lambda_handler

    response = lambda_handler(event, context or LambdaContext())
    json.dumps(response)
    return response


def forget_warm_state() -> None:
    """The handler's cached engine and the footer cache forgotten, as in a new process."""
    from s3slice import FOOTER_CACHE
    from s3slice.entry import dispatch

    dispatch.reset()
    FOOTER_CACHE.clear()


def fresh_lake(s3: S3Env, *buckets: str) -> Iterator[S3Env]:
    """A fixture body: ``buckets`` emptied, and no warm state before or after the test."""
    for bucket in buckets:
        s3.empty_bucket(bucket)
    forget_warm_state()
    yield s3
    forget_warm_state()


def configure(monkeypatch: Any, environment: Mapping[str, str]) -> None:
    """The function's ``environment`` set for one test, read afresh by the handler."""
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    forget_warm_state()
