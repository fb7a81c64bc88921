"""The s3slice-cdk distribution's build: its version and the function's code it carries.

Everything else is ``pyproject.toml``. The function's code (the ``s3slice`` package) is
copied into the wheel as ``s3slice_cdk/function_code/s3slice`` (the code asset's source,
never imported as part of ``s3slice_cdk``), and into the sdist at the same place, so that a
wheel built from the sdist carries it too. It comes from the repository's
``functions/s3slice`` when building from a clone, else from the sdist's copy.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
CARRIED = Path("s3slice_cdk", "function_code", "s3slice")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", "*.egg-info")


def function_package() -> Path:
    for source in (HERE.parent / "functions" / "s3slice", HERE / CARRIED):
        if (source / "__init__.py").is_file():
            return source
    raise FileNotFoundError("the s3slice package: build s3slice-cdk from the repository's "
                            "cdk/ folder or from its sdist")


def version() -> str:
    text = (function_package() / "__init__.py").read_text()
    found = re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE)
    if found is None:
        raise ValueError("no __version__ in the s3slice package's __init__.py")
    return found[1]


def copy_function(base: Path) -> None:
    source, target = function_package(), base / CARRIED
    if source.resolve() == target.resolve():
        return
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target, ignore=IGNORED)


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        copy_function(Path(self.build_lib))


class Sdist(sdist):
    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        copy_function(Path(base_dir))


setup(version=version(), cmdclass={"build_py": BuildPy, "sdist": Sdist})
