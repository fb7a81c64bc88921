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


def test_a_write_after_the_close_fails_and_copies_nothing() -> None:
    """A memory image let go while a fetch thread still writes: the late write is refused
    (it used to read a zero address after the bounds check had passed)."""
    from s3slice.fetch.image import MemoryImage

    image = MemoryImage(1024)
    image.write(0, memoryview(b"PAR1"))
    assert bytes(image.reader_source()[:4]) == b"PAR1"
    image.close()
    with pytest.raises(ValueError, match="outside an image of 0 bytes"):
        image.write(0, memoryview(b"PAR1"))
    image.write(0, memoryview(b""))  # nothing to copy: nothing refused


def test_writes_from_threads_while_the_image_is_closed_never_crash() -> None:
    """Threads write while another closes the image: each write lands or is refused."""
    import threading

    from s3slice.fetch.image import MemoryImage

    for _ in range(50):
        image = MemoryImage(1 << 20)
        outcomes: list[str] = []

        def writer(at: int, image: MemoryImage = image, outcomes: list[str] = outcomes) -> None:
            for k in range(64):
                try:
                    image.write((at * 64 + k) * 64, memoryview(b"x" * 64))
                    outcomes.append("ok")
                except ValueError:
                    outcomes.append("refused")
        threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        image.close()
        for t in threads:
            t.join()
        assert len(outcomes) == 4 * 64
