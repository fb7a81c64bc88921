"""pip: the pinned wheels for the target, downloaded once into a kept wheel cache and
installed from it offline."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .errors import BuildError
from .target import Target


def pip_install(site: Path, target: Target, requirements: Path, *, wheels: Path,
                tmp: Path) -> str:
    """Install the pinned wheels for ``target`` into ``site``.

    Wheels are kept in ``wheels`` (``pip download``), because pip's own HTTP cache does
    not keep responses that registries or proxies mark uncacheable: a rebuild with every
    wheel already there installs offline. Returns ``"cache"`` or ``"download"``.
    """
    pip = [sys.executable, "-m", "pip"]
    common = ["--disable-pip-version-check", "--no-input", "--progress-bar", "off",
              "--quiet", "--only-binary=:all:", "--no-deps", "--requirement",
              str(requirements)]
    if not target.native:
        common += ["--implementation", "cp", "--python-version", target.python]
        for tag in target.platforms():
            common += ["--platform", tag]
    install = [*pip, "install", "--no-compile", "--no-index", "--find-links", str(wheels),
               "--target", str(site), *common]
    env = {**os.environ, "TMPDIR": str(tmp)}  # pip unpacks there before moving to site
    wheels.mkdir(parents=True, exist_ok=True)
    if subprocess.run(install, capture_output=True, env=env, check=False).returncode == 0:
        return "cache"
    shutil.rmtree(site, ignore_errors=True)
    print(f"downloading wheels for {target.arch}/python{target.python} into {wheels}", flush=True)
    download = subprocess.run([*pip, "download", "--dest", str(wheels), *common],
                              env=env, check=False)
    if download.returncode != 0:
        raise BuildError(f"pip download failed with exit code {download.returncode}")
    result = subprocess.run(install, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        raise BuildError(f"pip install failed:\n{result.stdout}{result.stderr}")
    return "download"
