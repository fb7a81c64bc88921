"""The fetching interface: what the engine asks of S3 (or of a stand-in), and the
counters each fetcher keeps of its requests and bytes.

Ranges are half-open ``(start, end)`` everywhere. Each fetcher counts its own requests and
bytes; the integration tests check those counts against what the server saw.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, Protocol

from s3slice.core.model import ObjectRef
from s3slice.core.ranges import Range

RequestKind = Literal["get", "list", "put", "delete"]


#: S3 prices LIST with PUT, and DELETE not at all.
PRICE_TIERS: dict[str, str] = {"get": "get", "list": "put", "put": "put", "delete": "free"}


# Called with the fetched bytes as they arrive: (start offset, bytes-like). A part may come
# in several calls, chunks of its body in order.
PartSink = Callable[[int, memoryview], None]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Tail:
    """The answer to a suffix GET: the last bytes, the object's size and its ETag."""

    data: bytes
    size: int
    etag: str | None


@dataclasses.dataclass
class Counters:
    """Requests and bytes as they happen; requests also by S3's price tier: ``get`` (GET,
    HEAD), ``put`` (PUT and LIST, priced alike) and ``free`` (DELETE)."""

    requests: int = 0
    bytes: int = 0
    by_tier: dict[str, int] = dataclasses.field(
        default_factory=lambda: dict.fromkeys(PRICE_TIERS.values(), 0))
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def add(self, nbytes: int, kind: RequestKind = "get") -> None:
        with self._lock:
            self.requests += 1
            self.bytes += nbytes
            self.by_tier[PRICE_TIERS[kind]] += 1

    def snapshot(self) -> tuple[int, int, dict[str, int]]:
        with self._lock:
            return self.requests, self.bytes, dict(self.by_tier)


class Fetcher(Protocol):
    """What the engine needs of storage."""

    counters: Counters

    def get_tail(self, obj: ObjectRef, nbytes: int, *,
                 if_none_match: str | None = None) -> Tail | None:
        """The last ``nbytes`` (all of a smaller object) in one request; never a HEAD.

        None when ``if_none_match`` is the object's ETag (it has not changed since).
        """
        ...

    def get_ranges(self, obj: ObjectRef, ranges: Sequence[Range], *, etag: str | None,
                   sink: PartSink, concurrency: int) -> None:
        """Fetch every range, in parallel, handing each to ``sink`` as it arrives.

        Raises :class:`PreconditionFailed` if the object's ETag is no longer ``etag``, or
        its size is not ``obj.size`` (when given).
        """
        ...

    def list_objects(self, bucket: str, prefix: str) -> list[ObjectRef]: ...

    def polars_location(self, obj: ObjectRef) -> tuple[str, dict[str, str]] | None:
        """``obj``'s URI and the storage options with which polars' own reader reads it
        as this fetcher would, or None when it cannot (not S3, a caller's own credential
        provider, a key polars' URI parsing may read otherwise)."""
        ...

    def put(self, bucket: str, key: str, data: bytes | Path) -> None:
        """Write ``data`` (bytes, or a file's content, in parts when it is large) whole."""

    def delete(self, bucket: str, key: str) -> None: ...
