"""The app's ``snapStart`` setting: parsed, refused where Lambda does not support it,
accepted in every supported combination, with the CDK's runtime versions."""

from __future__ import annotations

from typing import Any

import pytest

from s3slice_cdk.settings import SettingsError
from tests.infrastructure.support import from_context

pytestmark = pytest.mark.infrastructure


# ----------------------------------------------------------------------------- snapStart
def test_snap_start_is_parsed() -> None:
    assert from_context(snapStart="true", ephemeralStorageSize="512").snap_start is True
    assert from_context(snapStart=True, ephemeralStorageSize=512).snap_start is True
    assert from_context(snapStart="false").snap_start is False


@pytest.mark.parametrize(("context", "key", "detail"), [
    # SnapStart supports the Python 3.12+ managed runtimes only
    ({"pythonVersion": "3.11", "ephemeralStorageSize": "512"}, "pythonVersion",
     "3.11 cannot be used with snapStart=true.*3.12, 3.13, 3.14"),
    # ... and at most 512 MB of /tmp: the default 4096 is refused, not silently shrunk
    ({}, "ephemeralStorageSize", "4096 MB cannot be used with snapStart=true.*512"),
    ({"ephemeralStorageSize": "513"}, "ephemeralStorageSize", "513 MB"),
    ({"ephemeralStorageSize": "10240", "pythonVersion": "3.12"}, "ephemeralStorageSize",
     "10240 MB"),
])
def test_snap_start_refuses_what_lambda_does_not_support(context: dict[str, Any], key: str,
                                                         detail: str) -> None:
    with pytest.raises(SettingsError, match=f"^{key}: {detail}"):
        from_context(snapStart="true", **context)
    # the same values are fine without SnapStart
    assert from_context(**context).snap_start is False


@pytest.mark.parametrize("python_version", ["3.12", "3.13", "3.14"])
@pytest.mark.parametrize("architecture", ["arm64", "x86_64"])
def test_snap_start_accepts_every_supported_combination(python_version: str,
                                                        architecture: str) -> None:
    """Python 3.12+ on either architecture, with 512 MB of /tmp (Lambda's minimum)."""
    settings = from_context(snapStart="true", pythonVersion=python_version,
                            ephemeralStorageSize="512", architecture=architecture)
    assert settings.snap_start is True
    assert settings.ephemeral_storage_size == 512


def test_snap_start_versions_are_cdks() -> None:
    """The settings' list of SnapStart runtimes is exactly the ones CDK says support it."""
    from s3slice_cdk import function
    from s3slice_cdk.settings import PYTHON_VERSIONS, SNAPSTART_PYTHON_VERSIONS

    assert SNAPSTART_PYTHON_VERSIONS == ("3.12", "3.13", "3.14")
    assert {v for v in PYTHON_VERSIONS
            if function._RUNTIMES[v].supports_snap_start} == set(SNAPSTART_PYTHON_VERSIONS)
