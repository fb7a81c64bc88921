"""The release: one version, the full Apache-2.0 text, a Keep a Changelog changelog,
RELEASING.md, packaging metadata, every package in the wheel, a documented and typed
construct library."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import os
import re
import subprocess
import sys
import tomllib

import pytest

import s3slice
import s3slice_cdk
from tests.infrastructure.support import REPO_DIR

pytestmark = pytest.mark.infrastructure

PYPROJECT = tomllib.loads((REPO_DIR / "pyproject.toml").read_text())
#: sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_the_license_is_the_full_apache_2_text() -> None:
    text = (REPO_DIR / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_SHA256
    assert PYPROJECT["project"]["license"] == {"text": "Apache-2.0"}
    assert "License :: OSI Approved :: Apache Software License" in (
        PYPROJECT["project"]["classifiers"])


def test_the_version_is_defined_once() -> None:
    project = PYPROJECT["project"]
    assert "version" not in project
    assert "version" in project["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "s3slice.__version__"}
    assigned = [path for path in (REPO_DIR / "functions").rglob("*.py")
                if re.search(r"^__version__\s*=", path.read_text(), re.MULTILINE)]
    assert assigned == [REPO_DIR / "functions" / "s3slice" / "__init__.py"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", s3slice.__version__)


def test_every_package_is_in_its_wheel() -> None:
    """The engine's wheel is the function's packages; the construct library is its own
    distribution (cdk/pyproject.toml) whose dependencies are the CDK's and sqlglot's,
    never the engine's (test_wheel.py builds and installs both)."""
    find = PYPROJECT["tool"]["setuptools"]["packages"]["find"]
    assert find["where"] == ["functions"]
    assert set(find["include"]) == {"s3slice", "s3slice.*"}
    assert "cdk" not in PYPROJECT["project"]["optional-dependencies"]
    constructs = tomllib.loads((REPO_DIR / "cdk" / "pyproject.toml").read_text())
    assert constructs["project"]["name"] == "s3slice-cdk"
    assert constructs["project"]["dynamic"] == ["version"]
    requires = {re.split(r"[<>=\[ ]", r)[0] for r in constructs["project"]["dependencies"]}
    assert requires == {"aws-cdk-lib", "constructs", "cdk-nag", "sqlglot"}
    find = constructs["tool"]["setuptools"]["packages"]["find"]
    assert set(find["include"]) == {"s3slice_cdk", "s3slice_cdk.*"}


def test_project_urls_and_classifiers() -> None:
    project = PYPROJECT["project"]
    assert {"Homepage", "Source", "Changelog", "Issues"} <= set(project["urls"])
    python = {c for c in project["classifiers"] if c.startswith("Programming Language")}
    assert "Programming Language :: Python :: 3.11" in python
    assert "Typing :: Typed" in project["classifiers"]


def test_the_changelog_keeps_a_changelog() -> None:
    text = (REPO_DIR / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n")
    assert "https://keepachangelog.com/en/1.1.0/" in text
    assert "## [Unreleased]" in text
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", text, re.MULTILINE)
    assert releases and releases[0][0] == s3slice.__version__
    for version in ("Unreleased", *(v for v, _ in releases)):
        assert re.search(rf"^\[{re.escape(version)}\]: https://", text, re.MULTILINE)
    sections = set(re.findall(r"^### (\w+)$", text, re.MULTILINE))
    assert sections <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def test_releasing_is_a_few_lines_and_make_release_exists() -> None:
    """``make dist`` builds the two distributions without a layer; ``make release`` adds
    the layer zips and the sums."""
    lines = (REPO_DIR / "RELEASING.md").read_text().splitlines()
    assert len(lines) <= 20
    assert any("make release" in line for line in lines)
    makefile = (REPO_DIR / "Makefile").read_text()
    for target in ("dist", "release"):
        assert re.search(rf"^\.PHONY:.* {target}( |$)", makefile, re.MULTILINE)
    dist = re.search(r"^dist:.*?(?=^\S)", makefile, re.MULTILINE | re.DOTALL)
    assert dist and "layers/build.py" not in dist[0]
    assert "build --quiet --out-dir dist cdk" in dist[0]
    release = re.search(r"^release: dist.*?(?=^\S)", makefile, re.MULTILINE | re.DOTALL)
    assert release and "SHA256SUMS" in release[0] and "--arch $$arch" in release[0]


PROPS = [s3slice_cdk.ReadFunctionProps, s3slice_cdk.PipelineProps,
         s3slice_cdk.PipelineWorkflowProps, s3slice_cdk.FunctionSettings,
         s3slice_cdk.WorkflowProps, s3slice_cdk.AlarmsProps, s3slice_cdk.TriggersProps]


def test_every_props_class_of_the_api_is_checked() -> None:
    exported = {name for name in s3slice_cdk.__all__
                if name.endswith(("Props", "Settings")) and name != "StackSettings"}
    assert exported == {props.__name__ for props in PROPS}


def test_every_construct_and_class_of_the_api_has_a_docstring() -> None:
    for name in s3slice_cdk.__all__:
        value = getattr(s3slice_cdk, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert (value.__doc__ or "").strip(), name
    constructs = {name for name in s3slice_cdk.__all__
                  if inspect.isclass(getattr(s3slice_cdk, name))
                  and issubclass(getattr(s3slice_cdk, name), s3slice_cdk.Pipeline.__mro__[1])}
    assert {"ReadFunction", "Pipeline", "Workflow", "Alarms", "Triggers"} <= constructs


@pytest.mark.parametrize("props", PROPS, ids=lambda p: p.__name__)
def test_every_prop_is_keyword_only_and_documented(props: type) -> None:
    """Each field has a ``#:`` comment (Sphinx's attribute docs) right above it."""
    assert dataclasses.is_dataclass(props)
    params = inspect.signature(props).parameters.values()
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params)
    source = inspect.getsource(props)
    lines = source.splitlines()
    [node] = ast.parse(source).body
    assert isinstance(node, ast.ClassDef)
    undocumented = []
    for statement in node.body:
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            above = lines[statement.lineno - 2].strip()
            if not above.startswith("#:") and not (
                    above.startswith("#") and lines[statement.lineno - 3].strip()
                    .startswith("#:")):
                undocumented.append(statement.target.id)
    assert undocumented == []


@pytest.mark.slow
def test_a_users_app_type_checks_strictly_against_the_library() -> None:
    """mypy --strict on the example app: the library's API is typed for its users."""
    env = {**os.environ, "MYPYPATH": os.pathsep.join([str(REPO_DIR / "cdk"),
                                                      str(REPO_DIR / "layers")])}
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         str(REPO_DIR / "examples" / "two_pipelines" / "app.py")],
        cwd=REPO_DIR, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, result.stdout[-4000:]
