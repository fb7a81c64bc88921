"""Test support: an S3 server log kept by a WSGI middleware, and a small S3 helper."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import polars as pl

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
class S3Env:
    endpoint_url: str
    log: ServerLog
    client: Any

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

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        resp = self.client.list_objects_v2(Bucket=bucket, Prefix=prefix)
        return sorted(o["Key"] for o in resp.get("Contents", []))


