"""The layer build's own code (the layerbuild package): the fingerprint covers every
file of it, and it is small modules without import cycles."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from layers.layerbuild.fingerprint import fingerprint, package_files
from layers.layerbuild.layout import PACKAGE_DIR, REQUIREMENTS
from layers.layerbuild.target import Target
from tests.infrastructure.layer_build import BUILD_PY

pytestmark = [pytest.mark.slow, pytest.mark.infrastructure, pytest.mark.timeout(1800)]


# --------------------------------------------------------------- the build's own code


def _copy_package(dest: Path) -> Path:
    shutil.copytree(PACKAGE_DIR, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


#: A compiler's ``sys.version``, as the fingerprint takes it.
COMPILER = "3.13.0 (main, Oct  8 2024, 00:00:00) [GCC 12.2.0]"


def test_fingerprint_covers_every_file_of_the_build_package(tmp_path: Path) -> None:
    """A change to any file of ``layers/layerbuild`` (or a new one) means a rebuild;
    bytecode caches do not, nor does where the package is."""
    target = Target(arch="arm64", python="3.13")
    package = _copy_package(tmp_path / "layerbuild")
    original = fingerprint(target, REQUIREMENTS, True, COMPILER)
    assert fingerprint(target, REQUIREMENTS, True, COMPILER, package_dir=package) == original

    files = package_files(package)
    names = {p.relative_to(package).as_posix() for p in files}
    assert names == {p.relative_to(PACKAGE_DIR).as_posix() for p in package_files()}
    assert {"__init__.py", "cli.py", "trim.py", "elf.py", "pins.py", "target.py",
            "report.py", "fingerprint.py"} <= names
    for path in files:
        code = path.read_bytes()
        path.write_bytes(code + b"\n")
        assert fingerprint(target, REQUIREMENTS, True, COMPILER,
                           package_dir=package) != original, path
        path.write_bytes(code)
    assert fingerprint(target, REQUIREMENTS, True, COMPILER, package_dir=package) == original

    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "cli.cpython-313.pyc").write_bytes(b"\0" * 16)
    assert fingerprint(target, REQUIREMENTS, True, COMPILER, package_dir=package) == original
    (package / "new_step.py").write_text("")
    assert fingerprint(target, REQUIREMENTS, True, COMPILER, package_dir=package) != original

    # and the other inputs: the pins, the target, stripping
    pins = tmp_path / "requirements.txt"
    pins.write_bytes(REQUIREMENTS.read_bytes() + b"# edited\n")
    assert fingerprint(target, pins, True, COMPILER) != original
    assert fingerprint(Target(arch="x86_64", python="3.13"), REQUIREMENTS, True,
                       COMPILER) != original
    assert fingerprint(Target(arch="arm64", python="3.12"), REQUIREMENTS, True,
                       COMPILER) != original
    assert fingerprint(target, REQUIREMENTS, False, COMPILER) != original
    # ... and the interpreter that compiles the bytecode
    assert fingerprint(target, REQUIREMENTS, True, COMPILER.replace("3.13.0", "3.13.1")) != original


def _package_imports(path: Path) -> set[str]:
    """The modules of the package that ``path`` imports (``from .x import ...``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [
                alias.name for alias in node.names]
            assert not any(n.split(".")[0] in ("layerbuild", "layers") for n in names), (
                f"{path.name} imports the package absolutely; use relative imports, so that "
                "it works both as layerbuild (the CLI) and as layers.layerbuild (the tests)")
    return found


def test_build_package_is_small_modules_without_import_cycles() -> None:
    modules = {p.stem: p for p in PACKAGE_DIR.glob("*.py")}
    graph = {name: _package_imports(path) - {name} for name, path in modules.items()}
    assert graph["__init__"] == set(), "the package's __init__ imports none of its modules"
    for name, path in modules.items():
        assert graph[name] <= set(modules), (name, graph[name] - set(modules))
        tree = ast.parse(path.read_text())
        assert len(path.read_text().splitlines()) <= 400, f"{name}.py is over 400 lines"
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                assert node.end_lineno is not None
                assert node.end_lineno - node.lineno + 1 <= 250, f"{name}.{node.name}"
    # topological order: repeatedly take the modules whose imports are all taken
    ordered: list[str] = []
    while len(ordered) < len(graph):
        ready = sorted(n for n, deps in graph.items() if n not in ordered and deps <= {*ordered})
        assert ready, f"import cycle among {sorted(set(graph) - set(ordered))}"
        ordered += ready
    # the entry point stays a thin wrapper around the package's CLI
    entry = BUILD_PY.read_text()
    assert "from layerbuild.cli import main" in entry
    assert len(entry.splitlines()) <= 30
