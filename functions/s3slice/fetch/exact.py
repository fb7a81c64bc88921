"""Reads of the keys obstore cannot name exactly, through boto3.

S3 keys are any UTF-8 text: ``a//b.parquet``, ``/lead.parquet`` and ``x/../y.csv`` are
three valid keys. object_store's path model (behind obstore) drops empty segments (so
``/lead.parquet`` would read ``lead.parquet``, another object) and refuses ``.`` and ``..``
segments, and its listing fails as a whole when one listed key holds them. Such keys are
read, and such listings made, with boto3 (the Lambda runtime ships it), exactly as named.
They are rare: this path favours exactness over speed.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from s3slice.core.errors import (
    AccessDeniedError,
    ObjectNotFoundError,
    PreconditionFailed,
    S3SliceThrottledError,
    S3SliceTransientError,
)
from s3slice.core.model import ObjectRef
from s3slice.core.settings import Settings


class NotModified(Exception):
    """The object's ETag is the one given as ``If-None-Match``."""


def addressable(key: str) -> bool:
    """Whether obstore names exactly ``key``: no empty, ``.`` or ``..`` segment."""
    return all(part not in ("", ".", "..") for part in key.split("/"))


def map_client_error(e: Exception, uri: str) -> Exception:
    """A botocore failure as the service's typed error."""
    from botocore.exceptions import ClientError

    if not isinstance(e, ClientError):
        return S3SliceTransientError(f"{uri}: {e}")
    error = e.response.get("Error", {})
    code = str(error.get("Code", ""))
    status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if code in ("PreconditionFailed", "412") or status == 412:
        return PreconditionFailed(uri)
    if code in ("NoSuchKey", "NoSuchBucket", "404") or status == 404:
        return ObjectNotFoundError("no such object (or bucket)", uri=uri)
    if code in ("AccessDenied", "403") or status == 403:
        return AccessDeniedError(f"access denied: {code}", uri=uri)
    if code in ("SlowDown", "503") or status == 503:
        return S3SliceThrottledError(f"{uri}: throttled past retries: {code}")
    return S3SliceTransientError(f"{uri}: {code or status}: {error.get('Message', '')}")


class ExactKeys:
    """Ranged GETs and listings through boto3, for what obstore cannot address."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                import boto3
                from botocore.config import Config

                s = self.settings
                keys: dict[str, Any] = {}
                if s.credentials is not None:  # a caller's own (taken once: rare keys)
                    given = s.credentials()
                    keys = {"aws_access_key_id": given["access_key_id"],
                            "aws_secret_access_key": given["secret_access_key"],
                            "aws_session_token": given.get("token")}
                self._client = boto3.client(
                    "s3", region_name=s.region, endpoint_url=s.endpoint_url, **keys,
                    config=Config(retries={"max_attempts": 6, "mode": "standard"},
                                  read_timeout=s.request_timeout_s, connect_timeout=5))
            return self._client

    def get(self, obj: ObjectRef, byte_range: str, etag: str | None = None, *,
            if_none_match: str | None = None) -> tuple[bytes, int, str | None]:
        """One ranged GET: the bytes, the object's size and its ETag."""
        args: dict[str, Any] = {"Bucket": obj.bucket, "Key": obj.key, "Range": byte_range}
        if etag:
            args["IfMatch"] = etag
        if if_none_match:
            args["IfNoneMatch"] = if_none_match
        try:
            response = self.client().get_object(**args)
            data = response["Body"].read()
        except Exception as e:
            status = getattr(e, "response", {}).get("ResponseMetadata", {}).get(
                "HTTPStatusCode")
            if if_none_match and status == 304:
                raise NotModified(obj.uri) from e
            raise map_client_error(e, obj.uri) from e
        content_range = str(response.get("ContentRange", ""))
        size = (int(content_range.rpartition("/")[2]) if "/" in content_range
                else int(response["ContentLength"]))
        return bytes(data), size, response.get("ETag")

    def head(self, obj: ObjectRef) -> tuple[int, str | None]:
        try:
            response = self.client().head_object(Bucket=obj.bucket, Key=obj.key)
        except Exception as e:
            raise map_client_error(e, obj.uri) from e
        return int(response["ContentLength"]), response.get("ETag")

    def get_many(self, obj: ObjectRef, ranges: Sequence[tuple[int, int]], etag: str | None,
                 concurrency: int) -> list[tuple[int, bytes, int]]:
        """Each range as (start, bytes, object size), fetched on ``concurrency`` threads."""
        def one(r: tuple[int, int]) -> tuple[int, bytes, int]:
            data, size, _ = self.get(obj, f"bytes={r[0]}-{r[1] - 1}", etag)
            return r[0], data, size
        with ThreadPoolExecutor(max(1, min(concurrency, len(ranges))),
                                thread_name_prefix="s3slice-exact") as pool:
            return list(pool.map(one, ranges))

    def put(self, bucket: str, key: str, data: bytes | Path) -> None:
        if isinstance(data, Path):
            self.client().upload_file(str(data), bucket, key)
        else:
            self.client().put_object(Bucket=bucket, Key=key, Body=data)

    def delete(self, bucket: str, key: str) -> None:
        try:
            self.client().delete_object(Bucket=bucket, Key=key)
        except Exception as e:
            raise map_client_error(e, f"s3://{bucket}/{key}") from e

    def list(self, bucket: str, prefix: str) -> tuple[list[ObjectRef], int]:
        """Every object under ``prefix``, and how many requests the listing took."""
        found: list[ObjectRef] = []
        requests = 0
        try:
            pages = self.client().get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=prefix)
            for page in pages:
                requests += 1
                found.extend(ObjectRef(bucket=bucket, key=o["Key"], size=int(o["Size"]),
                                       etag=o.get("ETag")) for o in page.get("Contents", []))
        except Exception as e:
            raise map_client_error(e, f"s3://{bucket}/{prefix}") from e
        return found, requests
