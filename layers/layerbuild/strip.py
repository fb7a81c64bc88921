"""``strip --strip-unneeded`` over every ELF file of the layer, with the strip that
understands the target's machine."""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .elf import elf_files
from .errors import BuildError
from .target import Target, host_machine


def find_strip(target: Target) -> str:
    """The strip that understands the target's ELF files; a clear error when missing."""
    candidates = [f"{target.machine}-linux-gnu-strip"]
    if host_machine() == target.machine:
        candidates.insert(0, "strip")
    for name in candidates:
        found = shutil.which(name)
        if found:
            return found
    package = f"binutils-{target.machine.replace('_', '-')}-linux-gnu"
    raise BuildError(
        f"no strip for {target.machine} ELF files (looked for {', '.join(candidates)}). "
        f"On Debian/Ubuntu: apt-get update && apt-get install -y {package}")


def strip_all(site: Path, strip: str) -> int:
    """``strip --strip-unneeded`` every ELF file; returns the bytes saved."""
    files = elf_files(site)
    before = sum(p.stat().st_size for p in files)

    def run(path: Path) -> str | None:
        r = subprocess.run([strip, "--strip-unneeded", str(path)], capture_output=True,
                           text=True, check=False)
        return None if r.returncode == 0 else f"{path}: {r.stderr.strip()}"

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        failures = [e for e in pool.map(run, files) if e]
    if failures:
        raise BuildError("strip failed:\n  " + "\n  ".join(failures))
    return before - sum(p.stat().st_size for p in files)
