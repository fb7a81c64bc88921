"""What reading one object gives, whatever its format, and the per-phase timings every
reader records into: the interface between the engine and the format readers."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol

import polars as pl

from s3slice.core.model import ObjectRef
from s3slice.core.ranges import Range
from s3slice.core.settings import Settings
from s3slice.fetch.base import Fetcher
from s3slice.fetch.image import FileImage
from s3slice.query.analysis import Analysis

PHASES = ("plan", "fetch", "execute", "write")


def no_span(name: str) -> AbstractContextManager[None]:
    return nullcontext()


@dataclasses.dataclass
class Timings:
    """Milliseconds per phase, summed over objects; each phase may also open a trace span."""

    ms: dict[str, float] = dataclasses.field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    span: Callable[[str], AbstractContextManager[None]] = no_span
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            with self.span(name):
                yield
        finally:
            with self._lock:
                self.ms[name] += (time.perf_counter() - t0) * 1000


@dataclasses.dataclass(kw_only=True)
class ObjectResult:
    obj: ObjectRef
    frame: pl.DataFrame  # after the per-piece step (row filter, projection)
    size: int
    row_groups: int
    row_groups_read: int
    rows_in: int  # rows in the row groups read (before the row filter)
    needed_bytes: int
    strategy: str
    inputs: dict[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Io:
    """Fetching for a reader: the fetcher, the settings and the invocation's deadline."""

    settings: Settings
    fetcher: Fetcher
    deadline: Callable[[], None]

    def fetch(self, obj: ObjectRef, ranges: Sequence[Range], etag: str | None,
              sink: Callable[[int, memoryview], None]) -> None:
        """``ranges`` of ``obj`` in parallel into ``sink`` (nothing when there are none)."""
        if ranges:
            self.deadline()
            self.fetcher.get_ranges(obj, ranges, etag=etag, sink=sink,
                                    concurrency=self.settings.max_concurrency)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Copied:
    """An object's answer as a Parquet file in /tmp, its column chunks copied undecoded
    (:meth:`s3slice.parquet.reader.ParquetReader.copy`); the caller uploads it and closes
    ``file``."""

    result: ObjectResult  # the answer's schema, no rows
    file: FileImage
    rows: int


class PieceSink(Protocol):
    """Where a streamed read sends the query's rows, a piece at a time."""

    rows: int

    def write(self, piece: pl.DataFrame) -> None: ...

    def reset(self) -> None:
        """Forget every piece: the read restarts (its object changed)."""


class ObjectReader(Protocol):
    """Reads one object of its format for a query (its needed columns, its rows filtered)."""

    def read(self, obj: ObjectRef, analysis: Analysis, timings: Timings) -> ObjectResult: ...
