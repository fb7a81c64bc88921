#!/usr/bin/env python3
"""Build the s3slice Lambda dependency layer without Docker, trim it, strip it, measure it.

    python layers/build.py --arch arm64            # Lambda arm64, Python 3.13
    python layers/build.py --arch x86_64 --zip     # ... and write layer.zip
    python layers/build.py --native --check        # this machine's arch and Python, then
                                                   # import and use every library from it

The entry point only: the build is the ``layerbuild`` package beside this file (one job
per module; see its ``__init__``). Running this file puts ``layers/`` first on
``sys.path``, which is where that package is found; ``cdk/`` is added for the bytecode
compiler the layer shares with the function's code asset (``s3slice_cdk.staging``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "cdk"))

from layerbuild.cli import main

if __name__ == "__main__":
    sys.exit(main())
