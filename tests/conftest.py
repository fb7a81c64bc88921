"""Shared fixtures: an embedded S3 on loopback that counts what it serves."""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterator

import boto3
import pytest
from hypothesis import HealthCheck, settings

from s3slice.cli.invoke import LambdaContext
from s3slice.cli.local_s3 import LOCAL_CREDENTIALS, LocalS3
from tests.support import Faults, S3Env, ServerLog, chain, counting, injecting

# Tests assert behaviour, never time: hypothesis' per-example deadline is off.
settings.register_profile("default", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("default")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Env]:
    for name, value in LOCAL_CREDENTIALS.items():
        os.environ[name] = value
    log, faults = ServerLog(), Faults()
    # Faults are outermost, so that a reset cuts the body on the wire; the log counts the
    # requests that reached the S3 server (an injected error never does).
    with LocalS3(middleware=chain(injecting(faults), counting(log))) as server:
        client = boto3.client("s3", endpoint_url=server.endpoint_url,
                              region_name=LOCAL_CREDENTIALS["AWS_REGION"])
        env = S3Env(endpoint_url=server.endpoint_url, log=log, client=client, faults=faults)

        def delete(path: str) -> None:
            bucket, _, key = path.lstrip("/").partition("/")
            client.delete_object(Bucket=bucket, Key=urllib.parse.unquote(key))
        faults.on_delete = delete
        yield env


@pytest.fixture
def s3(s3_server: S3Env, monkeypatch: pytest.MonkeyPatch) -> S3Env:
    """The embedded S3, with the SDK variables pointing at it and the log emptied.

    The handler runs as Lambda runs it: ``AWS_LAMBDA_FUNCTION_MEMORY_SIZE`` is the memory of
    the context :func:`tests.support.invoke` passes (3,008 MB), never this machine's RAM, so
    what the engine plans (its budget, whether an answer is streamed through /tmp) does not
    depend on the machine the tests run on."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint_url)
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", str(LambdaContext().memory_limit_in_mb))
    for name, value in LOCAL_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    s3_server.log.clear()
    s3_server.faults.clear()
    return s3_server
