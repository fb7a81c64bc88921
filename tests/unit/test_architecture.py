"""The package's shape, as ARCHITECTURE.md describes it: which layer may import which, no
import cycles, no module over 400 lines and no class over 250."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "functions" / "s3slice"
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 250

#: Each unit (a subpackage, or a top-level module) and the units it may import.
ALLOWED: dict[str, frozenset[str]] = {k: frozenset(v) for k, v in {
    "contract": (),
    "_errors": (),
    "_settings": ("_errors",),
    "_table": ("_errors",),
    "_model": ("_errors", "_table", "contract"),
    "_ranges": ("_settings",),
    "_cost": ("_settings",),
    "_arrow": (),
    "_values": (),
    "_textual": ("_errors", "_values"),
    "query": ("_errors", "_model"),
    "fetch": ("_errors", "_model", "_ranges", "_settings"),
    "_read": ("_model", "_ranges", "_settings", "fetch", "query"),
    "parquet": ("_arrow", "_errors", "_model", "_ranges", "_read", "_settings", "fetch",
                "query"),
    "text": ("_errors", "_model", "_ranges", "_read", "_settings", "contract", "fetch",
             "query"),
    "iceberg": ("_errors", "parquet", "query"),
    "engine": ("_cost", "_errors", "_model", "_read", "_settings", "_table", "fetch",
               "iceberg", "parquet", "query", "text"),
    "_spool": ("_errors", "fetch"),
    "_output": ("_cost", "_errors", "_model", "_read", "_spool", "_textual", "_values",
                "engine"),
    "entry": ("_cost", "_errors", "_model", "_output", "_settings", "_table", "_textual",
              "contract", "engine", "parquet", "query"),
    "handler": ("entry",),
    "_invoke": ("_values", "handler"),
    "_local_s3": (),
    "_demo": ("_invoke", "_local_s3"),
    "_cli_query": ("contract",),
    "__main__": ("_cli_query", "_demo", "_errors", "_invoke", "_model"),
    "_frames": ("_errors", "_model", "_settings", "engine", "query"),
    "__init__": ("_errors", "_frames", "_model", "_output", "_settings", "engine", "fetch",
                 "parquet"),
}.items()}


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        yield ".".join(("s3slice", *parts)).removesuffix(".__init__"), path


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(module: str, path: Path) -> set[str]:
    """The s3slice modules ``module`` imports, wherever the import statement is."""
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            if base == "s3slice" or base.startswith("s3slice."):
                # ``from pkg import mod`` imports pkg.mod; ``from mod import name``, mod.
                found.update(f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("s3slice."))
    return found


GRAPH = {m: imports(m, p) for m, p in modules()}


def test_every_unit_is_described() -> None:
    assert {unit(m) for m in GRAPH} == set(ALLOWED)


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_a_module_imports_only_the_layers_below_it(module: str) -> None:
    own = unit(module)
    used = {unit(t) for t in GRAPH[module]} - {own}
    assert used <= ALLOWED[own], f"{module} imports {sorted(used - ALLOWED[own])}"


def test_no_import_cycles() -> None:
    known = set(GRAPH)
    edges = {m: {t if t in known else t.rpartition(".")[0] for t in ts} & known
             for m, ts in GRAPH.items()}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in sorted(edges[m] - {m}):
            if state.get(n) == 1 and not m.startswith(n + "."):  # a package's own parent
                raise AssertionError(f"import cycle: {' -> '.join([*path[path.index(n):], n])}")
            if n not in state:
                visit(n)
        path.pop()
        state[m] = 2
    for m in sorted(edges):
        if m not in state:
            visit(m)


@pytest.mark.parametrize(("module", "path"), list(modules()))
def test_modules_and_classes_stay_small(module: str, path: Path) -> None:
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_MODULE_LINES
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            assert node.end_lineno is not None
            assert node.end_lineno - node.lineno + 1 <= MAX_CLASS_LINES, node.name
