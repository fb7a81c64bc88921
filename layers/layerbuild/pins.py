"""The pins in ``layers/requirements.txt``: reading them, and checking that what pip
installed is exactly them and that they are the whole closure for the target."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

from .errors import BuildError
from .layout import REQUIREMENTS
from .target import Target

#: Distributions the Lambda Python runtime ships (with their own dependencies), which the
#: layer therefore neither bundles nor pins. aws-xray-sdk's botocore is one of them.
RUNTIME_PROVIDED: frozenset[str] = frozenset({"boto3", "botocore", "s3transfer"})

_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)")


def normalize(name: str) -> str:
    """PEP 503 name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path = REQUIREMENTS) -> dict[str, str]:
    """``{normalized name: version}`` from a requirements file of exact pins."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _PIN.match(line)
        if not m:
            raise BuildError(f"{path}:{number}: not an exact pin (name==version): {raw!r}")
        pins[normalize(m.group(1))] = m.group(2)
    return pins


def installed_distributions(site: Path) -> dict[str, str]:
    """``{normalized name: version}`` of the ``*.dist-info`` directories in ``site``."""
    found: dict[str, str] = {}
    for info in site.glob("*.dist-info"):
        name = version = ""
        for line in (info / "METADATA").read_text(encoding="utf-8").splitlines():
            if line.startswith("Name:"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("Version:"):
                version = line.split(":", 1)[1].strip()
            elif not line:
                break
        found[normalize(name)] = version
    return found


def check_pins(site: Path, pins: dict[str, str]) -> None:
    found = installed_distributions(site)
    extra = sorted(set(found) - set(pins))
    missing = sorted(set(pins) - set(found))
    wrong = sorted(f"{n} {found[n]} (pinned {pins[n]})"
                   for n in set(found) & set(pins) if found[n] != pins[n])
    problems = []
    if extra:
        problems.append(f"installed but not pinned (pin them in {REQUIREMENTS.name}): "
                        + ", ".join(f"{n}=={found[n]}" for n in extra))
    if missing:
        problems.append("pinned but not installed: " + ", ".join(missing))
    if wrong:
        problems.append("version differs from the pin: " + ", ".join(wrong))
    if problems:
        raise BuildError("; ".join(problems))


def _packaging(module: str) -> Any:
    """``packaging.<module>``, installed or the copy pip vendors (the build runs pip)."""
    try:
        return importlib.import_module(f"packaging.{module}")
    except ImportError:  # pragma: no cover - depends on the build interpreter
        return importlib.import_module(f"pip._vendor.packaging.{module}")


def marker_environment(target: Target) -> dict[str, str]:
    """PEP 508 marker values of the Lambda runtime ``target`` describes."""
    if target.native:
        return dict(_packaging("markers").default_environment())
    return {
        "implementation_name": "cpython", "implementation_version": f"{target.python}.0",
        "os_name": "posix", "platform_machine": target.machine,
        "platform_python_implementation": "CPython", "platform_release": "",
        "platform_system": "Linux", "platform_version": "",
        "python_full_version": f"{target.python}.0", "python_version": target.python,
        "sys_platform": "linux",
    }


def check_closure(site: Path, pins: dict[str, str], target: Target) -> None:
    """Every requirement of every installed distribution (for ``target``, no extras) is
    pinned at a version it accepts, or is provided by the Lambda runtime.

    The wheels are installed with ``--no-deps`` (so that what the runtime provides, such
    as aws-xray-sdk's botocore, is not installed), so this is the closure check pip's
    resolver would otherwise make."""
    parse_requirement = _packaging("requirements").Requirement
    parse_version = _packaging("version").Version
    environment = {**marker_environment(target), "extra": ""}
    problems: list[str] = []
    for info in sorted(site.glob("*.dist-info")):
        dist = normalize(info.name.removesuffix(".dist-info").rsplit("-", 1)[0])
        for line in (info / "METADATA").read_text(encoding="utf-8").splitlines():
            if not line:
                break
            if not line.startswith("Requires-Dist:"):
                continue
            requirement = parse_requirement(line.split(":", 1)[1].strip())
            if requirement.marker is not None and not requirement.marker.evaluate(environment):
                continue
            name = normalize(requirement.name)
            if name in RUNTIME_PROVIDED:
                continue
            if name not in pins:
                problems.append(f"{dist} needs {requirement}, which is not pinned")
            elif not requirement.specifier.contains(parse_version(pins[name]),
                                                    prereleases=True):
                problems.append(f"{dist} needs {requirement}, but {name}=={pins[name]} is "
                                "pinned")
    if problems:
        raise BuildError(f"the pins in {REQUIREMENTS.name} are not a closure: "
                         + "; ".join(problems))
