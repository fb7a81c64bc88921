"""Fetchers with no network: a local directory served as buckets, and the recorder that
wraps a fetcher and keeps every call (what tests of pushdown count)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from s3slice import (
    LocalFetcher,
    ObjectNotFoundError,
    ObjectRef,
    RecordingFetcher,
    S3SliceError,
)
from s3slice.core.errors import PreconditionFailed

DATA = bytes(range(256)) * 4  # 1 KiB, every byte telling its offset apart


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Bucket ``b`` and bucket ``other`` under the root, and a file beside the root."""
    (tmp_path / "outside.bin").write_bytes(b"o")
    root = tmp_path / "root"
    (root / "b" / "dir" / "sub").mkdir(parents=True)
    (root / "b" / "dir" / "obj.bin").write_bytes(DATA)
    (root / "b" / "dir" / "sub" / "two.bin").write_bytes(b"22")
    (root / "b" / "top.bin").write_bytes(b"t")
    (root / "other").mkdir()
    (root / "other" / "x.bin").write_bytes(b"x")
    return root


OBJ = ObjectRef(bucket="b", key="dir/obj.bin")


def read_ranges(fetcher: LocalFetcher | RecordingFetcher, obj: ObjectRef,
                ranges: list[tuple[int, int]], *,
                etag: str | None = None) -> list[tuple[int, bytes]]:
    """What the sink was handed, in order."""
    got: list[tuple[int, bytes]] = []
    fetcher.get_ranges(obj, ranges, etag=etag, sink=lambda at, view: got.append(
        (at, bytes(view))), concurrency=4)
    return got


# --------------------------------------------------------------------------------- local

@pytest.mark.parametrize("nbytes", [1, 100, len(DATA), len(DATA) + 1, 10_000])
def test_a_tail_is_the_last_bytes_with_the_size(root: Path, nbytes: int) -> None:
    fetcher = LocalFetcher(root)
    tail = fetcher.get_tail(OBJ, nbytes)
    assert tail is not None
    assert (tail.data, tail.size) == (DATA[-nbytes:], len(DATA))
    assert fetcher.counters.snapshot() == (1, min(nbytes, len(DATA)),
                                           {"get": 1, "put": 0, "free": 0})


def test_a_tail_of_an_unchanged_object_is_not_modified(root: Path) -> None:
    fetcher = LocalFetcher(root)
    tail = fetcher.get_tail(OBJ, 10)
    assert tail is not None and tail.etag
    assert fetcher.get_tail(OBJ, 10, if_none_match=tail.etag) is None
    assert fetcher.get_tail(OBJ, 10, if_none_match='"other"') == tail
    assert fetcher.counters.snapshot()[:2] == (3, 20)  # the 304 is a request of no bytes


def test_ranges_are_handed_to_the_sink_with_their_offsets(root: Path) -> None:
    fetcher = LocalFetcher(root)
    ranges = [(0, 4), (500, 1024), (10, 11), (7, 7)]
    got = read_ranges(fetcher, OBJ, ranges)
    assert got == [(a, DATA[a:b]) for a, b in ranges]
    assert fetcher.counters.snapshot()[:2] == (4, 4 + 524 + 1)


def test_a_changed_object_fails_the_read_before_any_part(root: Path) -> None:
    fetcher = LocalFetcher(root)
    tail = fetcher.get_tail(OBJ, 1)
    assert tail is not None and tail.etag
    assert read_ranges(fetcher, OBJ, [(0, 2)], etag=tail.etag) == [(0, DATA[:2])]
    with pytest.raises(PreconditionFailed):
        read_ranges(fetcher, OBJ, [(0, 2)], etag='"stale"')
    stale_size = ObjectRef(bucket="b", key=OBJ.key, size=len(DATA) + 1)
    with pytest.raises(PreconditionFailed):
        read_ranges(fetcher, stale_size, [(0, 2)])
    (root / "b" / OBJ.key).write_bytes(DATA + b"more")  # a new size: a new ETag
    with pytest.raises(PreconditionFailed):
        read_ranges(fetcher, OBJ, [(0, 2)], etag=tail.etag)


def test_a_range_past_the_end_hands_no_short_part(root: Path) -> None:
    got: list[tuple[int, bytes]] = []
    with pytest.raises((PreconditionFailed, S3SliceError)):
        LocalFetcher(root).get_ranges(OBJ, [(0, 2), (1000, 1030)], etag=None,
                                      sink=lambda at, v: got.append((at, bytes(v))),
                                      concurrency=1)
    assert got == [(0, DATA[:2])]


@pytest.mark.parametrize(("key", "reason"), [
    ("dir/none.bin", "no such object"),
    ("dir", "no such object"),  # a directory is no object
    ("dir/sub/", "no such object"),
    ("../../outside.bin", "outside the local root"),
    ("dir/../../../outside.bin", "outside the local root"),
])
def test_only_files_under_the_root_are_objects(root: Path, key: str, reason: str) -> None:
    obj = ObjectRef(bucket="b", key=key)
    fetcher = LocalFetcher(root)
    with pytest.raises(ObjectNotFoundError, match=reason) as info:
        fetcher.get_tail(obj, 10)
    assert info.value.uri == obj.uri
    with pytest.raises(ObjectNotFoundError, match=reason):
        read_ranges(fetcher, obj, [(0, 1)])
    assert fetcher.counters.snapshot()[0] == 0


def test_a_listing_is_sorted_filtered_by_prefix_and_sized(root: Path) -> None:
    fetcher = LocalFetcher(root)
    listed = fetcher.list_objects("b", "")
    assert [(r.bucket, r.key, r.size) for r in listed] == [
        ("b", "dir/obj.bin", len(DATA)), ("b", "dir/sub/two.bin", 2), ("b", "top.bin", 1)]
    tail = fetcher.get_tail(OBJ, 1)
    assert tail is not None and listed[0].etag == tail.etag
    assert [r.key for r in fetcher.list_objects("b", "dir/s")] == ["dir/sub/two.bin"]
    assert fetcher.list_objects("b", "nothing/") == []
    assert fetcher.list_objects("missing-bucket", "") == []
    assert fetcher.counters.snapshot() == (5, 1, {"get": 1, "put": 4, "free": 0})


def test_put_then_read_back_then_delete(root: Path) -> None:
    fetcher = LocalFetcher(root)
    fetcher.put("new", "a/b/c.txt", b"hello")
    obj = ObjectRef(bucket="new", key="a/b/c.txt")
    tail = fetcher.get_tail(obj, 100)
    assert tail is not None and (tail.data, tail.size) == (b"hello", 5)
    assert os.listdir(root / "new" / "a" / "b") == ["c.txt"]  # no partial file left
    fetcher.put("new", "a/b/c.txt", b"replaced")
    assert [r.size for r in fetcher.list_objects("new", "a/")] == [8]
    fetcher.delete("new", "a/b/c.txt")
    fetcher.delete("new", "a/b/c.txt")  # deleting what is not there is no error, as in S3
    with pytest.raises(ObjectNotFoundError):
        fetcher.get_tail(obj, 1)
    assert fetcher.counters.snapshot() == (6, 5, {"get": 1, "put": 3, "free": 2})


# ----------------------------------------------------------------------------- recording

def test_the_recorder_keeps_every_call_and_passes_the_answers_through(root: Path) -> None:
    inner = LocalFetcher(root)
    fetcher = RecordingFetcher(inner)
    uri = OBJ.uri
    tail = fetcher.get_tail(OBJ, 24)
    assert tail is not None and tail.data == DATA[-24:]
    assert fetcher.get_tail(OBJ, 24, if_none_match=tail.etag) is None
    assert read_ranges(fetcher, OBJ, [(100, 200), (0, 10)]) == [(100, DATA[100:200]),
                                                                  (0, DATA[:10])]
    assert read_ranges(fetcher, OBJ, [(50, 51)]) == [(50, DATA[50:51])]
    assert [r.key for r in fetcher.list_objects("b", "dir/")] == ["dir/obj.bin",
                                                                  "dir/sub/two.bin"]
    fetcher.put("b", "out/r.csv", b"a\n1\n")
    fetcher.delete("b", "out/r.csv")
    assert [(c.kind, c.uri, c.start, c.end) for c in fetcher] == [
        ("tail", uri, len(DATA) - 24, len(DATA)),
        ("tail-not-modified", uri, 0, 0),
        ("range", uri, 100, 200), ("range", uri, 0, 10), ("range", uri, 50, 51),
        ("list", "s3://b/dir/", 0, 0),
        ("put", "s3://b/out/r.csv", 0, 4),
        ("delete", "s3://b/out/r.csv", 0, 0),
    ]
    assert fetcher.ranges() == [(0, 10), (50, 51), (100, 200)]
    assert fetcher.batches == [110, 1]  # bytes asked for by each get_ranges
    assert fetcher.counters is inner.counters
    assert inner.counters.snapshot() == (8, 24 + 111, {"get": 5, "put": 2, "free": 1})


def test_iterating_the_recorder_gives_a_snapshot(root: Path) -> None:
    fetcher = RecordingFetcher(LocalFetcher(root))
    fetcher.get_tail(OBJ, 1)
    calls = iter(fetcher)
    fetcher.get_tail(OBJ, 1)
    assert len(list(calls)) == 1
    assert len(fetcher.calls) == 2


def test_a_failed_read_is_recorded_as_asked_not_as_fetched(root: Path) -> None:
    fetcher = RecordingFetcher(LocalFetcher(root))
    with pytest.raises(PreconditionFailed):
        read_ranges(fetcher, OBJ, [(0, 10)], etag='"stale"')
    assert fetcher.batches == [10]
    assert fetcher.ranges() == []
