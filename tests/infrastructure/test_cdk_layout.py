"""The shape of cdk/: the construct library ``s3slice_cdk`` apart from the repository's own
app ``s3slice_app``; no import cycle (an import anywhere in a module counts, under
``TYPE_CHECKING`` too), no module over 400 lines, no class over 250; the library never
imports the app; ``staging`` imports the standard library only."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from tests.infrastructure.support import CDK_DIR

pytestmark = pytest.mark.infrastructure

PACKAGES = ("s3slice_cdk", "s3slice_app")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((CDK_DIR / package).rglob("*.py")):
            parts = path.relative_to(CDK_DIR).with_suffix("").parts
            found[".".join(parts).removesuffix(".__init__")] = path
    return found


def imports(module: str, path: Path) -> set[str]:
    """Every module ``module`` imports (absolute names), wherever the statement is."""
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_no_cycle_no_long_module_no_long_class() -> None:
    known = modules()
    graph = {m: {i for i in imports(m, p) if i in known and i != m
                 and not m.startswith(f"{i}.")}  # a module's own package: its parent
             for m, p in known.items()}
    # the library's lazy __init__ names its modules only to import them when used
    graph["s3slice_cdk"] = set()
    for name, path in known.items():
        text = path.read_text()
        assert len(text.splitlines()) <= 400, f"{name} is over 400 lines"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                assert node.end_lineno is not None
                assert node.end_lineno - node.lineno + 1 <= 250, f"{name}.{node.name}"
    ordered: list[str] = []
    while len(ordered) < len(graph):
        ready = sorted(n for n, deps in graph.items() if n not in ordered and deps <= {*ordered})
        assert ready, f"import cycle among {sorted(set(graph) - set(ordered))}"
        ordered += ready


def test_the_library_never_imports_the_app_and_staging_only_the_standard_library() -> None:
    for name, path in modules().items():
        found = imports(name, path)
        if name.startswith("s3slice_cdk"):
            assert not [i for i in found if i.startswith("s3slice_app")], name
        if name.startswith("s3slice_cdk.staging"):
            outside = {i.split(".")[0] for i in found} - {"__future__", "s3slice_cdk"}
            assert outside <= set(sys.stdlib_module_names), (name, outside)
            assert not [i for i in found if i.startswith("s3slice_cdk")
                        and not i.startswith("s3slice_cdk.staging")], name
