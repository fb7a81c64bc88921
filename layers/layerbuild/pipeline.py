"""The build itself: install, check the pins, trim, strip, compile, check, measure,
publish, in that order, or reuse the previous build when its fingerprint is unchanged."""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from .bytecode import Compiler, compile_layer, find_compiler, runtime_site
from .check import check_layer
from .files import tree_size
from .fingerprint import fingerprint
from .install import pip_install
from .layout import REQUIREMENTS, SIZE_REPORT, ZIP_NAME, default_wheel_cache
from .output import publish, reusable, staging_root, write_zip
from .pins import check_closure, check_pins, read_pins
from .report import LAMBDA_UNZIPPED_LIMIT, measure
from .strip import find_strip, strip_all
from .target import Target
from .trim import (
    DUPLICATE_LIBS_REASON,
    DUPLICATE_LIBS_RULE,
    TRIM_RULES,
    UNLINKED_REASON,
    trim,
)


@dataclasses.dataclass
class BuildOptions:
    target: Target
    out: Path
    requirements: Path = REQUIREMENTS
    wheels: Path = dataclasses.field(default_factory=default_wheel_cache)
    strip: bool = True
    zip: bool = False
    force: bool = False


def build(opts: BuildOptions) -> dict[str, Any]:
    """Build (or reuse) the layer; returns the size report also written to the out dir."""
    target, out = opts.target, opts.out.resolve()
    compiler = find_compiler(target.python)
    stamp = fingerprint(target, opts.requirements, opts.strip, compiler.version)
    report = None if opts.force else reusable(out, stamp)
    if report is not None:
        print(f"layer for {target.arch}/python{target.python} in {out} is up to date", flush=True)
    else:
        report = _build(opts, out, stamp, compiler)
    if opts.zip and not (out / ZIP_NAME).is_file():
        report["zip_bytes"] = write_zip(out / "python", out / ZIP_NAME)
    (out / SIZE_REPORT).write_text(json.dumps(report, indent=2) + "\n")
    return report


def _build(opts: BuildOptions, out: Path, stamp: str, compiler: Compiler) -> dict[str, Any]:
    target = opts.target
    pins = read_pins(opts.requirements)
    strip_tool = find_strip(target) if opts.strip else None
    out.mkdir(parents=True, exist_ok=True)
    for stale in (out / SIZE_REPORT, out / ZIP_NAME):
        stale.unlink(missing_ok=True)
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="s3slice-layer-", dir=staging_root(out)) as tmp:
        stage = Path(tmp)
        site = stage / "python"
        wheels_from = pip_install(site, target, opts.requirements, wheels=opts.wheels.resolve(),
                                  tmp=stage)
        timings["install"] = time.monotonic() - t0
        check_pins(site, pins)
        check_closure(site, pins, target)
        untrimmed = tree_size(site)[0]

        t = time.monotonic()
        trimmed = trim(site)
        timings["trim"] = time.monotonic() - t
        t = time.monotonic()
        saved = strip_all(site, strip_tool) if strip_tool else 0
        timings["strip"] = time.monotonic() - t
        t = time.monotonic()
        bytecode = compile_layer(site, compiler, runtime_site(target, out))
        timings["compile"] = time.monotonic() - t
        check_layer(site, target)
        sizes = measure(site)
        t = time.monotonic()
        publish(site, out / "python")
        timings["publish"] = time.monotonic() - t
    timings["total"] = time.monotonic() - t0
    return {
        "arch": target.arch, "machine": target.machine, "python": target.python,
        "native": target.native, "platforms": target.platforms(),
        "lambda_glibc": ".".join(map(str, target.glibc)),
        "requirements": pins, "stripped": bool(strip_tool), "fingerprint": stamp,
        **sizes,
        "untrimmed_bytes": untrimmed,
        "removed_bytes": {**trimmed.removed, "strip": saved},
        "removed_why": {**{r.name: r.reason for r in TRIM_RULES},
                        DUPLICATE_LIBS_RULE: DUPLICATE_LIBS_REASON,
                        "strip": "symbols not needed for dynamic linking"},
        "unlinked": trimmed.unlinked,
        "unlinked_why": UNLINKED_REASON,
        "bytecode": bytecode,
        "limit_bytes": LAMBDA_UNZIPPED_LIMIT,
        "wheels": wheels_from,
        "seconds": {k: round(v, 1) for k, v in timings.items()},
    }
