"""With no credentials anywhere, the first S3 client is a ConfigurationError naming what
is missing, not boto3's bare ValueError."""

from __future__ import annotations

from pathlib import Path

import pytest

from s3slice import ConfigurationError
from s3slice._settings import Settings
from s3slice.fetch.s3 import S3Fetcher


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
