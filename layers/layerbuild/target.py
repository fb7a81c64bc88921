"""What the layer is built for: Lambda's architecture, its Python, and its glibc."""

from __future__ import annotations

import dataclasses
import platform
import sys
from pathlib import Path

from .errors import BuildError
from .layout import BUILD_ROOT

#: The runtime Lambda targets by default.
DEFAULT_PYTHON = "3.13"

#: Lambda's architecture names -> the machine names used in wheel tags and ELF headers.
ARCHES: dict[str, str] = {"arm64": "aarch64", "x86_64": "x86_64"}


def host_machine() -> str:
    """This machine's name as wheel tags and ELF headers spell it."""
    return platform.machine().lower().replace("amd64", "x86_64").replace("arm64", "aarch64")


@dataclasses.dataclass(frozen=True)
class Target:
    """What the layer is built for."""

    arch: str  #: Lambda's name: "arm64" or "x86_64"
    python: str  #: "3.13"
    native: bool = False  #: this machine's own wheels (pip's default tags); for testing

    @property
    def machine(self) -> str:
        return ARCHES[self.arch]

    @property
    def glibc(self) -> tuple[int, int]:
        """The runtime's glibc: Amazon Linux 2 (2.26) up to python3.11, AL2023 (2.34) after."""
        minor = int(self.python.split(".")[1])
        return (2, 34) if minor >= 12 else (2, 26)

    def platforms(self) -> list[str]:
        """pip ``--platform`` tags for this target, most specific first; none when native."""
        if self.native:
            return []
        major, newest = self.glibc
        tags = [f"manylinux_{major}_{m}_{self.machine}" for m in range(newest, 16, -1)]
        tags.append(f"manylinux2014_{self.machine}")
        if self.machine == "x86_64":
            tags += [f"manylinux_2_{m}_x86_64" for m in range(16, 4, -1)]
            tags += ["manylinux2010_x86_64", "manylinux1_x86_64"]
        return tags

    @classmethod
    def host(cls) -> Target:
        machine = platform.machine().lower()
        arch = {"aarch64": "arm64", "arm64": "arm64", "x86_64": "x86_64", "amd64": "x86_64"}
        if machine not in arch or not sys.platform.startswith("linux"):
            raise BuildError(f"--native needs Linux on aarch64 or x86_64, not "
                             f"{sys.platform}/{machine}")
        return cls(arch=arch[machine], python=f"{sys.version_info[0]}.{sys.version_info[1]}",
                   native=True)


def default_out(target: Target) -> Path:
    return BUILD_ROOT / ("native" if target.native else target.arch)
