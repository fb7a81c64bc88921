"""Fetchers without S3: a local directory served as buckets (the engine with no network),
and a recorder of every call another fetcher answers (how tests prove pushdown)."""

from __future__ import annotations

import bisect
import dataclasses
import os
import shutil
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from s3slice.core.errors import ObjectNotFoundError, PreconditionFailed, S3SliceTransientError
from s3slice.core.model import ObjectRef
from s3slice.core.ranges import Range
from s3slice.fetch.base import Counters, Fetcher, PartSink, Tail


class LocalFetcher:
    """Serves ``s3://bucket/key`` from ``root/bucket/key``: the engine with no network."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.counters = Counters()

    def _path(self, obj: ObjectRef) -> Path:
        path = (self.root / obj.bucket / obj.key).resolve()
        if not path.is_relative_to(self.root.resolve()):
            raise ObjectNotFoundError("outside the local root", uri=obj.uri)
        if not path.is_file():
            raise ObjectNotFoundError("no such object", uri=obj.uri)
        return path

    @staticmethod
    def _etag(path: Path) -> str:
        st = path.stat()
        return f'"{st.st_mtime_ns:x}-{st.st_size:x}"'

    def get_tail(self, obj: ObjectRef, nbytes: int, *,
                 if_none_match: str | None = None) -> Tail | None:
        path = self._path(obj)
        if if_none_match is not None and self._etag(path) == if_none_match:
            self.counters.add(0)
            return None
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - nbytes))
            data = f.read()
        self.counters.add(len(data))
        return Tail(data=data, size=size, etag=self._etag(path))

    def get_ranges(self, obj: ObjectRef, ranges: Sequence[Range], *, etag: str | None,
                   sink: PartSink, concurrency: int) -> None:
        path = self._path(obj)
        if ((etag is not None and self._etag(path) != etag)
                or (obj.size is not None and path.stat().st_size != obj.size)):
            raise PreconditionFailed(obj.uri)
        with path.open("rb") as f:
            for start, end in ranges:
                data = os.pread(f.fileno(), end - start, start)
                if len(data) != end - start:
                    raise S3SliceTransientError(f"{obj.uri}: short read at {start}")
                self.counters.add(len(data))
                sink(start, memoryview(data))

    def polars_location(self, obj: ObjectRef) -> tuple[str, dict[str, str]] | None:
        return None  # its bytes are read through the image, like any ranged read

    def list_objects(self, bucket: str, prefix: str) -> list[ObjectRef]:
        base = self.root / bucket
        refs = [ObjectRef(bucket=bucket, key=p.relative_to(base).as_posix(),
                          size=p.stat().st_size, etag=self._etag(p))
                for p in base.rglob("*") if p.is_file()]
        self.counters.add(0, "list")
        return sorted((r for r in refs if r.key.startswith(prefix)), key=lambda r: r.key)

    def put(self, bucket: str, key: str, data: bytes | Path) -> None:
        path = self.root / bucket / key
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".partial")
        if isinstance(data, Path):
            shutil.copyfile(data, tmp)
        else:
            tmp.write_bytes(data)
        tmp.replace(path)  # appears whole or not at all, as an S3 PUT does
        self.counters.add(0, "put")

    def delete(self, bucket: str, key: str) -> None:
        (self.root / bucket / key).unlink(missing_ok=True)
        self.counters.add(0, "delete")


@dataclasses.dataclass(frozen=True)
class Call:
    kind: str  # "tail" | "range" | "list" | "put"
    uri: str
    start: int = 0
    end: int = 0


class RecordingFetcher:
    """Wraps a fetcher and records every request, so tests can assert exact ranges."""

    def __init__(self, inner: Fetcher) -> None:
        self.inner = inner
        self.calls: list[Call] = []
        self.batches: list[int] = []  # bytes asked for by each get_ranges call
        self._lock = threading.Lock()

    @property
    def counters(self) -> Counters:
        return self.inner.counters

    def _record(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def get_tail(self, obj: ObjectRef, nbytes: int, *,
                 if_none_match: str | None = None) -> Tail | None:
        tail = self.inner.get_tail(obj, nbytes, if_none_match=if_none_match)
        if tail is None:
            self._record(Call("tail-not-modified", obj.uri))
        else:
            self._record(Call("tail", obj.uri, tail.size - len(tail.data), tail.size))
        return tail

    def get_ranges(self, obj: ObjectRef, ranges: Sequence[Range], *, etag: str | None,
                   sink: PartSink, concurrency: int) -> None:
        # A range is recorded once all of it has arrived (a fetcher may deliver it in
        # chunks).
        ends = dict(ranges)
        starts = sorted(ends)
        arrived = dict.fromkeys(starts, 0)

        def recording_sink(at: int, data: memoryview) -> None:
            start = starts[bisect.bisect_right(starts, at) - 1]
            with self._lock:
                arrived[start] += len(data)
                whole = arrived[start] == ends[start] - start
            if whole:
                self._record(Call("range", obj.uri, start, ends[start]))
            sink(at, data)
        with self._lock:
            self.batches.append(sum(end - start for start, end in ranges))
        self.inner.get_ranges(obj, ranges, etag=etag, sink=recording_sink,
                              concurrency=concurrency)

    def polars_location(self, obj: ObjectRef) -> tuple[str, dict[str, str]] | None:
        return None  # every request goes through it, to be recorded

    def list_objects(self, bucket: str, prefix: str) -> list[ObjectRef]:
        self._record(Call("list", f"s3://{bucket}/{prefix}"))
        return self.inner.list_objects(bucket, prefix)

    def put(self, bucket: str, key: str, data: bytes | Path) -> None:
        size = data.stat().st_size if isinstance(data, Path) else len(data)
        self._record(Call("put", f"s3://{bucket}/{key}", 0, size))
        self.inner.put(bucket, key, data)

    def delete(self, bucket: str, key: str) -> None:
        self._record(Call("delete", f"s3://{bucket}/{key}"))
        self.inner.delete(bucket, key)

    def ranges(self) -> list[Range]:
        return sorted((c.start, c.end) for c in self.calls if c.kind == "range")

    def __iter__(self) -> Iterator[Call]:
        return iter(list(self.calls))
