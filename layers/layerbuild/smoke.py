"""Using the built layer here: the smoke check (``layers/smoke_check.py``) in a fresh
interpreter of the layer's Python, and finding that interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from s3slice_cdk.staging.bytecode import find_python

from .errors import BuildError
from .layout import SMOKE_CHECK
from .target import Target


def run_smoke_check(site: Path, python: str = sys.executable, *,
                    timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Run ``smoke_check.py`` against ``site`` in a fresh ``python -I -S -B``: no
    site-packages, environment or working directory on the path, and no bytecode written
    into the layer.

    Seconds on an idle machine; the generous timeout is for a loaded one, and the script
    dumps its threads' stacks shortly before it."""
    with tempfile.TemporaryDirectory() as cwd:
        return subprocess.run(
            [python, "-I", "-S", "-B", str(SMOKE_CHECK), str(site), str(max(timeout - 30, 1))],
            cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
            env={"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8"})


def checker_for(target: Target) -> str:
    """The interpreter that can load ``target``'s layer here, or a ``BuildError`` saying why
    there is none."""
    host = Target.host()
    if target.machine != host.machine:
        raise BuildError(f"--check loads the layer here, and this machine is {host.machine}:"
                         f" an {target.machine} layer cannot load")
    exe = find_python(target.python)
    if exe is None:
        raise BuildError(f"--check needs a Python {target.python} interpreter to load the "
                         f"python{target.python} layer; none found (use --native to build one "
                         f"for this Python)")
    return exe
