"""The shape of cdk/: the construct library ``s3slice_cdk`` apart from the repository's own
app ``s3slice_app``: the library never imports the app; ``staging`` imports the standard
library only. (No import cycle, no module over 400 lines and no class over 250 in either
package: tests/unit/test_architecture.py, for every package of the house.)"""

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
