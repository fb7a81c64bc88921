"""The error contract: which error types a caller may retry."""

from __future__ import annotations

from s3slice import error_types


def test_error_types_split_retryable_from_permanent() -> None:
    permanent, retryable = error_types(retryable=False), error_types(retryable=True)
    assert "UnknownColumnError" in permanent
    assert "ConfigurationError" in permanent
    assert set(retryable) == {"S3SliceTransientError", "S3SliceThrottledError"}
    assert not set(permanent) & set(retryable)
