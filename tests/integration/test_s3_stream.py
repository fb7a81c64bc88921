"""A ranged GET's body reaches the sink in chunks as it arrives, so the parts in flight
hold a chunk each, not whole parts: every byte lands at its offset, once, and counts once."""

from __future__ import annotations

import os
import threading

import pytest

from s3slice import S3Fetcher, Settings
from s3slice.core.model import ObjectRef
from s3slice.fetch import s3 as s3_module
from s3slice.fetch.local import RecordingFetcher
from tests.support import S3Env

pytestmark = pytest.mark.integration

BUCKET, KEY = "stream-data", "blob.bin"
SIZE = 3 * 1024 * 1024 + 12345


def test_parts_arrive_in_chunks_each_at_its_offset(s3: S3Env,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    s3.bucket(BUCKET)
    data = os.urandom(SIZE)
    s3.client.put_object(Bucket=BUCKET, Key=KEY, Body=data)
    monkeypatch.setattr(s3_module, "STREAM_CHUNK", 256 * 1024)
    fetcher = S3Fetcher(Settings.from_env())
    recorder = RecordingFetcher(fetcher)
    ranges = [(0, 1_500_000), (1_500_000, 1_500_001), (2_000_000, SIZE)]
    image = bytearray(SIZE)
    calls: list[tuple[int, int]] = []
    lock = threading.Lock()

    def sink(at: int, chunk: memoryview) -> None:
        with lock:
            calls.append((at, len(chunk)))
            assert image[at:at + len(chunk)] == bytes(len(chunk)), "a byte arrived twice"
            image[at:at + len(chunk)] = chunk

    obj = ObjectRef(bucket=BUCKET, key=KEY, size=SIZE)
    recorder.get_ranges(obj, ranges, etag=None, sink=sink, concurrency=3)

    for start, end in ranges:
        assert image[start:end] == data[start:end]
    assert bytes(image[1_500_001:2_000_000]) == bytes(500_000 - 1)  # never asked for
    assert len(calls) > len(ranges)  # the large parts came in several chunks
    assert max(n for _, n in calls) < 1_500_000
    assert sum(n for _, n in calls) == sum(end - start for start, end in ranges)
    assert recorder.ranges() == ranges  # each range recorded once, whole
    requests, fetched, _ = fetcher.counters.snapshot()
    assert (requests, fetched) == (3, sum(end - start for start, end in ranges))
