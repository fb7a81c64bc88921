"""S3 through obstore, with no network: a failure classified by its HTTP status and S3 error
code (never by text in a key that happens to read ``503``), and no credentials at all as a
ConfigurationError naming what is missing, not boto3's bare ValueError."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import obstore.exceptions as oe
import pytest

from s3slice import (
    AccessDeniedError,
    ConfigurationError,
    ObjectError,
    ObjectNotFoundError,
    S3Fetcher,
    S3SliceThrottledError,
    S3SliceTransientError,
    Settings,
)
from s3slice.core.errors import PreconditionFailed
from s3slice.fetch.s3 import _map_error, _status_and_code

URI = "s3://b/data/part-503.parquet"


def failure(status: str, *, key: str = "data/part-503.parquet", body: str = "") -> str:
    """object_store's message for a failed GET (as obstore 0.12 words it), with its debug
    tail: the status is in the text once, a key's characters percent-encoded in the URL."""
    url = f"http://127.0.0.1:9000/b/{quote(key, safe='/')}"
    return (f"Generic S3 error: Error performing GET {url} in 3.6ms - Server returned non-2xx "
            f"status code: {status}: {body}\n\nDebug source:\nGeneric {{\n    store: \"S3\",\n"
            f"    source: RetryError(\n        RetryErrorImpl {{\n            method: GET,\n"
            f"            uri: Some(\n                {url},\n            ),\n"
            f"            inner: Status {{\n                status: {status[:3]},\n"
            f"            }},\n        }},\n    ),\n}}")


def s3_error(code: str, message: str = "") -> str:
    return f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>" \
           f"<Message>{message}</Message></Error>"


SLOW_DOWN = failure("503 Service Unavailable",
                    body=s3_error("SlowDown", "Please reduce your request rate."))
INTERNAL = failure("500 Internal Server Error", body=s3_error("InternalError"))
# A key whose own text reads like a throttling answer; the server said 500.
LOOKALIKE = failure("500 Internal Server Error",
                    key="x/status code: 503/<Code>SlowDown</Code>/part-503")


@pytest.mark.parametrize(("text", "expected"), [
    (SLOW_DOWN, (503, "SlowDown")),
    (INTERNAL, (500, "InternalError")),
    (failure("503 Service Unavailable"), (503, None)),
    (failure("400 Bad Request", body=s3_error("ThrottlingException")),
     (400, "ThrottlingException")),
    (LOOKALIKE, (500, None)),
    ("Generic S3 error: connection reset while reading s3://b/part-503", (None, None)),
    ("", (None, None)),
])
def test_status_and_code_are_read_from_their_own_fields(
        text: str, expected: tuple[int | None, str | None]) -> None:
    assert _status_and_code(text) == expected


@pytest.mark.parametrize(("error", "typed"), [
    (oe.GenericError(SLOW_DOWN), S3SliceThrottledError),
    (oe.GenericError(failure("503 Service Unavailable")), S3SliceThrottledError),
    (oe.GenericError(failure("503 Slow Down", body=s3_error("SlowDown"))),
     S3SliceThrottledError),
    (oe.GenericError(failure("400 Bad Request", body=s3_error("ThrottlingException"))),
     S3SliceThrottledError),
    (oe.GenericError(failure("400 Bad Request", body=s3_error("RequestLimitExceeded"))),
     S3SliceThrottledError),
    (oe.GenericError(INTERNAL), S3SliceTransientError),
    (oe.GenericError(LOOKALIKE), S3SliceTransientError),
    (oe.GenericError("Generic S3 error: connection reset for part-503"), S3SliceTransientError),
    (TimeoutError("operation timed out: part-503"), S3SliceTransientError),
    (ConnectionResetError("connection reset by peer"), S3SliceTransientError),
    (RuntimeError("unexpected answer for part-503"), ObjectError),
])
def test_throttling_is_told_by_status_or_code_never_by_a_503_in_the_key(
        error: Exception, typed: type[Exception]) -> None:
    mapped = _map_error(error, URI)
    assert type(mapped) is typed
    assert "Debug source" not in str(mapped)  # the first line only
    assert "part-503" in str(mapped)


DENIED = ("The operation lacked the necessary privileges to complete for path part-503: "
          + failure("403 Forbidden", body=s3_error("AccessDenied", "Access Denied")))


@pytest.mark.parametrize(("error", "typed", "message"), [
    # obstore raises the built-in FileNotFoundError for a 404, its own class otherwise
    (FileNotFoundError("Object at location data/part-503.parquet not found: "
                       + failure("404 Not Found", body=s3_error("NoSuchKey"))),
     ObjectNotFoundError, "no such object (or bucket)"),
    (oe.NotFoundError("not found: data/part-503.parquet"), ObjectNotFoundError,
     "no such object (or bucket)"),
    (oe.PermissionDeniedError(DENIED), AccessDeniedError,
     "access denied: " + DENIED.splitlines()[0]),
    (PermissionError("forbidden: part-503"), AccessDeniedError,
     "access denied: forbidden: part-503"),
    (oe.UnauthenticatedError("the credentials were rejected\nDebug source: 401"),
     AccessDeniedError, "access denied: the credentials were rejected"),
])
def test_missing_and_forbidden_objects_name_the_object(
        error: Exception, typed: type[ObjectError], message: str) -> None:
    mapped = _map_error(error, URI)
    assert type(mapped) is typed
    assert isinstance(mapped, ObjectError)
    assert mapped.uri == URI
    assert str(mapped) == f"{URI}: {message}"


def test_a_failed_precondition_means_the_object_changed() -> None:
    mapped = _map_error(oe.PreconditionError("If-Match: etag mismatch, status code: 412"), URI)
    assert isinstance(mapped, PreconditionFailed)
    assert str(mapped) == URI


def test_no_credentials_is_a_configuration_error(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_PROFILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    fetcher = S3Fetcher(Settings(endpoint_url="http://127.0.0.1:9"))
    with pytest.raises(ConfigurationError, match="AWS_ACCESS_KEY_ID: no AWS credentials"):
        fetcher._store("bucket")
