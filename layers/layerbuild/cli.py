"""The command line: ``python layers/build.py --arch arm64`` and its options.

Build the s3slice Lambda dependency layer without Docker, trim it, strip it, measure it.

    python layers/build.py --arch arm64            # Lambda arm64, Python 3.13
    python layers/build.py --arch x86_64 --zip     # ... and write layer.zip
    python layers/build.py --native --check        # this machine's arch and Python, then
                                                   # import and use every library from it

The layer content is ``<out>/python``. A build whose inputs (the pins, the target, the
code of this package) are unchanged and whose files still add up to what was recorded is
reused; pass ``--force`` to rebuild. Downloaded wheels are kept (``--wheel-cache``), so a
rebuild installs offline.

For the arm64 layer on an x86_64 machine the aarch64 strip is needed
(Debian: ``apt-get install -y binutils-aarch64-linux-gnu``).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from s3slice_cdk.staging.bytecode import CompilerError

from .errors import BuildError
from .layout import REQUIREMENTS, ZIP_NAME, default_wheel_cache
from .pipeline import BuildOptions, build
from .report import summarize
from .smoke import checker_for, run_smoke_check
from .target import ARCHES, DEFAULT_PYTHON, Target, default_out

#: The first line of ``--help``.
DESCRIPTION = ("Build the s3slice Lambda dependency layer without Docker, trim it, strip it, "
               "measure it.")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=DESCRIPTION)
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--arch", choices=sorted(ARCHES), help="Lambda architecture")
    which.add_argument("--native", action="store_true",
                       help="this machine's architecture and Python (to --check it here)")
    ap.add_argument("--python", default=DEFAULT_PYTHON,
                    help=f"Lambda runtime Python version (default {DEFAULT_PYTHON})")
    ap.add_argument("--out", type=Path,
                    help="output directory (default layers/build/<arch>, or "
                         "layers/build/native with --native)")
    ap.add_argument("--requirements", type=Path, default=REQUIREMENTS, help=argparse.SUPPRESS)
    ap.add_argument("--wheel-cache", type=Path, default=None,
                    help="where downloaded wheels are kept "
                         "(default $XDG_CACHE_HOME/s3slice-layer/wheels)")
    ap.add_argument("--zip", action="store_true", help=f"also write <out>/{ZIP_NAME}")
    ap.add_argument("--no-strip", action="store_true", help="skip strip (not for deploying)")
    ap.add_argument("--force", action="store_true", help="rebuild even if up to date")
    ap.add_argument("--check", action="store_true",
                    help="then import and use every library from the layer alone, in a "
                         "fresh interpreter of the layer's Python (this machine's arch only)")
    args = ap.parse_args(argv)
    if args.native and args.python != DEFAULT_PYTHON:
        ap.error("--native builds for the running interpreter; drop --python")
    if not re.fullmatch(r"3\.\d+", args.python):
        ap.error(f"--python must look like 3.13, not {args.python!r}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        target = Target.host() if args.native else Target(arch=args.arch, python=args.python)
        checker = checker_for(target) if args.check else None  # fail before building
        out = args.out or default_out(target)
        report = build(BuildOptions(
            target=target, out=out, requirements=args.requirements,
            wheels=args.wheel_cache or default_wheel_cache(), strip=not args.no_strip,
            zip=args.zip, force=args.force))
        print(summarize(report, out.resolve()), flush=True)
        if checker:
            result = run_smoke_check(out.resolve() / "python", checker)
            if result.returncode != 0:
                raise BuildError(f"smoke check with {checker} failed:\n"
                                 + result.stdout + result.stderr)
            print(result.stdout.strip().splitlines()[-1])
    except (BuildError, CompilerError) as e:
        print(f"layers/build.py: error: {e}", file=sys.stderr)
        return 1
    return 0

