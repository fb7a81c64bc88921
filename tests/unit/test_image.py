"""Images' errors: an OS error is raised as itself (never as its own cause), and a /tmp
image's failure is the retryable error naming the directory, caused by the OS error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from s3slice import S3SliceTransientError
from s3slice.fetch.image import FileImage, _FileBacked


def test_a_file_backed_image_raises_the_os_error_itself(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "x", os.O_RDONLY | os.O_CREAT)  # ftruncate needs write access
    with pytest.raises(OSError, match="Invalid argument|Bad file descriptor") as info:
        _FileBacked(1024, fd, str(tmp_path / "x"))
    assert info.value.__cause__ is not info.value


def test_a_tmp_image_failure_names_the_directory(tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    with pytest.raises(S3SliceTransientError, match="gone") as info:
        FileImage(1024, str(missing))
    assert isinstance(info.value.__cause__, OSError)
    assert info.value.__cause__ is not info.value
