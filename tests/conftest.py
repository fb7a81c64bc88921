"""Shared fixtures: an embedded S3 on loopback that counts what it serves."""

from __future__ import annotations

import os
from collections.abc import Iterator

import boto3
import pytest
from hypothesis import HealthCheck, settings

from s3slice._local_s3 import LOCAL_CREDENTIALS, LocalS3
from tests.support import S3Env, ServerLog, counting

# Tests assert behaviour, never time: hypothesis' per-example deadline is off.
settings.register_profile("default", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("default")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Env]:
    for name, value in LOCAL_CREDENTIALS.items():
        os.environ[name] = value
    log = ServerLog()
    with LocalS3(middleware=counting(log)) as server:
        client = boto3.client("s3", endpoint_url=server.endpoint_url,
                              region_name=LOCAL_CREDENTIALS["AWS_REGION"])
        yield S3Env(endpoint_url=server.endpoint_url, log=log, client=client)


@pytest.fixture
def s3(s3_server: S3Env, monkeypatch: pytest.MonkeyPatch) -> S3Env:
    """The embedded S3, with the SDK variables pointing at it and the log emptied."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint_url)
    for name, value in LOCAL_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    s3_server.log.clear()
    return s3_server
