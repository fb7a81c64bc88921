"""The service's answer to one case, by one of its paths: the engine over a local file
(each strategy: single, ranges, whole, batches, the page index) or ``lambda_handler`` over
an S3 server (the hand-off to polars' S3 reader, the chunk copy, the ranged read), the
answer written to S3 as Parquet and read back."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

from s3slice import Engine, FooterCache, LocalFetcher, ObjectRef, Settings, parse_request
from tests.support import read_request

BUCKET, RESULTS = "fuzz-data", "fuzz-results"

#: Local engine paths: settings of each.
LOCAL: dict[str, dict[str, Any]] = {
    "auto": {},
    "single": {},  # the object's size given: one GET of a small object
    "auto-ranged": {"small_object_size": 0, "footer_size": 1024},
    "ranges": {"strategy": "ranges", "small_object_size": 0, "footer_size": 256},
    "pages": {"strategy": "ranges", "small_object_size": 0, "page_index_ratio": 1.0},
    "whole": {"strategy": "whole", "small_object_size": 0},
    "batches": {"strategy": "batches", "small_object_size": 0, "memory_budget_mb": 1},
}
#: Paths through the handler on S3: the environment of each.
_RANGED = {"S3SLICE_SMALL_OBJECT_SIZE": "0", "S3SLICE_FOOTER_SIZE": "16384"}
S3: dict[str, dict[str, str]] = {
    "s3-handoff": _RANGED,
    "s3-copy": {"S3SLICE_SMALL_OBJECT_SIZE": "0", "S3SLICE_FOOTER_SIZE": "2048"},
    "s3-ranges": {**_RANGED, "S3SLICE_STRATEGY": "ranges"},
    "s3-auto": {},
}


@dataclasses.dataclass
class Answer:
    frame: pl.DataFrame
    strategy: str  # what the stats say was done (the path reached)


def local_answer(path: Path, request: dict[str, Any], config: str) -> Answer:
    root = path.parent.parent
    engine = Engine(Settings(memory_mb=2048, **LOCAL[config]), fetcher=LocalFetcher(root),
                    footer_cache=FooterCache(0))
    typed = parse_request({"source": f"s3://{path.parent.name}/{path.name}", **request})
    if config == "single":
        typed = dataclasses.replace(typed, sources=tuple(
            ObjectRef(bucket=o.bucket, key=o.key, size=path.stat().st_size)
            for o in typed.sources))
    result = read_request(engine, typed)
    stats = result.stats
    return Answer(result.frame, _reached(stats.strategy, stats.strategy_inputs))


def _reached(strategy: str, inputs: dict[str, Any]) -> str:
    if inputs.get("transport") == "polars":
        return f"{strategy}+handoff"
    return strategy


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` in the environment, the handler's cached engine and footers forgotten
    before and after."""
    from s3slice import FOOTER_CACHE
    from s3slice.entry import dispatch

    names = [*values, "S3SLICE_STRATEGY", "S3SLICE_SMALL_OBJECT_SIZE", "S3SLICE_FOOTER_SIZE"]
    old = {n: os.environ.get(n) for n in names}
    for n in names:
        os.environ.pop(n, None)
    os.environ.update(values)
    dispatch.reset()
    FOOTER_CACHE.clear()
    try:
        yield
    finally:
        for n, v in old.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v
        dispatch.reset()
        FOOTER_CACHE.clear()


def s3_answer(client: Any, data: bytes, request: dict[str, Any], config: str,
              key: str) -> Answer:
    """The handler's answer, written to S3 as Parquet and read back."""
    from tests.support import invoke

    for bucket in (BUCKET, RESULTS):
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=BUCKET, Key=key, Body=data)
    prefix = f"out/{key}/"
    try:
        with environment(S3[config]):
            response = invoke({"source": f"s3://{BUCKET}/{key}", **request,
                               "output": {"uri": f"s3://{RESULTS}/{prefix}",
                                          "format": "parquet"}})
        frames = [pl.read_parquet(client.get_object(Bucket=RESULTS, Key=o["uri"].split(
            "/", 3)[3])["Body"].read()) for o in response["outputs"]]
    finally:
        client.delete_object(Bucket=BUCKET, Key=key)
        listed = client.list_objects_v2(Bucket=RESULTS, Prefix=prefix).get("Contents", [])
        for o in listed:
            client.delete_object(Bucket=RESULTS, Key=o["Key"])
    if not frames:
        raise AssertionError(f"no output object in {response}")
    stats = response["stats"]
    return Answer(pl.concat(frames, how="vertical_relaxed"),
                  _reached(stats["strategy"], stats.get("strategy_inputs", {})))
