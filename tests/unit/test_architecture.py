"""The house's shape, as ARCHITECTURE.md describes it: which layer of the function may
import which; and in every Python package of the repository (the function, the CDK
construct library, the layer build, the tests) no import cycle, and in the shipped code
and the tests no module over 400 lines and no class over 250."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOT = REPO / "functions" / "s3slice"
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 250

#: Each unit and the units it may import. A unit is a subpackage, or for ``core`` (the
#: values every layer shares) each of its modules, whose order matters as much.
ALLOWED: dict[str, frozenset[str]] = {k: frozenset(v) for k, v in {
    "core": (),
    "core.contract": (),
    "core.errors": (),
    "core.settings": ("core.errors",),
    "core.table": ("core.errors",),
    "core.model": ("core.errors", "core.table", "core.contract"),
    "core.ranges": ("core.settings",),
    "core.cost": ("core.settings",),
    "core.values": (),
    "core.lazy": (),
    "query": ("core.errors", "core.lazy", "core.model"),
    "fetch": ("core.errors", "core.model", "core.ranges", "core.settings"),
    "readers": ("core.model", "core.ranges", "core.settings", "fetch", "query"),
    "parquet": ("core.errors", "core.model", "core.ranges", "core.settings", "fetch", "query",
                "readers"),
    "text": ("core.contract", "core.errors", "core.model", "core.ranges", "core.settings",
             "fetch", "query", "readers"),
    "iceberg": ("core.errors", "parquet", "query"),
    "engine": ("core.cost", "core.errors", "core.model", "core.settings", "core.table",
               "fetch", "iceberg", "parquet", "query", "readers", "text"),
    "answer": ("core.cost", "core.errors", "core.model", "core.settings", "core.values",
               "engine", "fetch", "query", "readers"),
    "entry": ("answer", "core.contract", "core.cost", "core.errors", "core.model",
              "core.settings", "core.table", "engine", "parquet", "query"),
    "handler": ("entry",),
    "cli": ("core.contract", "core.errors", "core.model", "core.values", "handler"),
    "__main__": ("cli",),
    "__init__": ("answer", "core.errors", "core.lazy", "core.model", "core.settings", "engine",
                 "fetch", "parquet"),
}.items()}

#: The packages whose modules are each a unit of their own.
SPLIT = frozenset({"core"})


def modules(root: Path = ROOT, name: str = "s3slice") -> Iterator[tuple[str, Path]]:
    """Every module of the package ``name`` in ``root``, by dotted name."""
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if any(p.startswith(".") for p in parts):  # a work directory, never code
            continue
        yield ".".join((name, *parts)).removesuffix(".__init__"), path


def unit(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return ".".join(parts[1:3]) if parts[1] in SPLIT else parts[1]


def imports(module: str, path: Path, root: str = "s3slice") -> set[str]:
    """The modules of package ``root`` that ``module`` imports, wherever the import is."""
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            if base == root or base.startswith(root + "."):
                # ``from pkg import mod`` imports pkg.mod; ``from mod import name``, mod.
                found.update(f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(root + "."))
    return found


GRAPH = {m: imports(m, p) for m, p in modules()}


def test_every_unit_is_described() -> None:
    assert {unit(m) for m in GRAPH} == set(ALLOWED)


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_a_module_imports_only_the_layers_below_it(module: str) -> None:
    own = unit(module)
    used = {unit(t) for t in GRAPH[module]} - {own}
    assert used <= ALLOWED[own], f"{module} imports {sorted(used - ALLOWED[own])}"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """An import cycle of ``graph`` (module → the modules it imports), or None.

    An import of ``pkg.mod.name`` is an edge to ``pkg.mod``; a package importing its own
    parent (its ``__init__``) is not a cycle, as Python runs the parent first."""
    known = set(graph)
    edges = {m: {t if t in known else t.rpartition(".")[0] for t in ts} & known
             for m, ts in graph.items()}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(edges[m] - {m}):
            if state.get(n) == 1 and not m.startswith(n + "."):
                return [*path[path.index(n):], n]
            if n not in state and (found := visit(n)) is not None:
                return found
        path.pop()
        state[m] = 2
        return None
    for m in sorted(edges):
        if m not in state and (found := visit(m)) is not None:
            return found
    return None


def test_no_import_cycles() -> None:
    cycle = find_cycle(GRAPH)
    assert cycle is None, f"import cycle: {' -> '.join(cycle or [])}"


#: Every Python package of the house: (its name, its directory).
PACKAGES = {
    "s3slice": ROOT,
    "s3slice_cdk": REPO / "cdk" / "s3slice_cdk",
    "s3slice_app": REPO / "cdk" / "s3slice_app",
    "layerbuild": REPO / "layers" / "layerbuild",
    "tests": REPO / "tests",
}


@pytest.mark.parametrize("name", list(PACKAGES))
def test_no_import_cycles_in_any_package(name: str) -> None:
    graph = {m: imports(m, p, name) for m, p in modules(PACKAGES[name], name)}
    assert graph, f"no modules found for {name}"
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle or [])}"


def test_a_cycle_is_found() -> None:
    """The cycle finder finds one (a test that cannot fail would prove nothing)."""
    assert find_cycle({"p.a": {"p.b.X"}, "p.b": {"p.a"}}) == ["p.a", "p.b", "p.a"]
    assert find_cycle({"p": {"p.a"}, "p.a": {"p.X"}}) is None  # a module using its parent
    assert find_cycle({"p.a": {"p.b"}, "p.b": set()}) is None


def small_modules() -> list[Any]:
    """The shipped code (the function, the construct library and its app, the layer build
    and its scripts) and the tests, each module once."""
    paths = [p for _, p in modules()]
    paths += sorted((REPO / "cdk").glob("*.py"))
    paths += [p for name in ("s3slice_cdk", "s3slice_app") for _, p in modules(
        PACKAGES[name], name)]
    # Not layers/smoke_check.py: a script run alone in an isolated interpreter that fails
    # on any module loaded from outside the layer, the function or the standard library,
    # so it cannot be split into modules of its own.
    paths += [REPO / "layers" / "build.py"] + [p for _, p in modules(
        PACKAGES["layerbuild"], "layerbuild")]
    # Every test module and the benchmark.
    paths += sorted(p for p in (REPO / "tests").rglob("*.py")
                    if ".work" not in p.relative_to(REPO).parts)
    return [pytest.param(p, id=p.relative_to(REPO).as_posix()) for p in paths]


@pytest.mark.parametrize("path", small_modules())
def test_modules_and_classes_stay_small(path: Path) -> None:
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_MODULE_LINES
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            assert node.end_lineno is not None
            assert node.end_lineno - node.lineno + 1 <= MAX_CLASS_LINES, node.name


def test_importing_the_package_imports_nothing_heavy() -> None:
    """``import s3slice`` (the error classes, ``--version``) loads no polars, pyarrow or
    engine: the public API's other names are imported on first use (PEP 562)."""
    import subprocess
    import sys

    code = ("import sys, s3slice; s3slice.RequestError; print(sorted(n for n in sys.modules "
            "if n.split('.')[0] in ('polars', 'pyarrow', 'sqlglot') or n.startswith("
            "('s3slice.engine', 's3slice.answer', 's3slice.fetch', 's3slice.parquet'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env={"PYTHONPATH": str(REPO / "functions")}, timeout=60)
    assert done.stdout.strip() == "[]", done.stdout


#: query/'s top level: at most this many modules (``__init__.py`` not counted); the rest
#: lives in its packages by parser and purpose (``sqlglot/``, ``polars/``, ``pruning/``,
#: ``coercion/``, ``split/``), as ARCHITECTURE.md describes (issue 40).
MAX_QUERY_TOP_MODULES = 12


def test_query_top_level_stays_small() -> None:
    query = ROOT / "query"
    top = sorted(p.stem for p in query.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_QUERY_TOP_MODULES, top
    # Every package of query/ says what it is for, and the CDK's synth-time check keeps
    # the import path the construct library loads (``s3slice.query.check``).
    assert all((d / "__init__.py").is_file() for d in query.iterdir()
               if d.is_dir() and not d.name.startswith((".", "_")))
    assert "check" in top


def test_a_plain_filter_imports_no_sqlglot() -> None:
    """A plain filter is analysed by polars' own parse: sqlglot (the ``sqlglot/``
    analysis, the split's planner) is imported only by a request that needs it, and a
    query the CDK checks at synth loads no polars or pyarrow."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from s3slice.core.model import Query\n"
            "from s3slice.query.analyzer import analyze\n"
            "analyze(Query(filter='a > 1 AND b IN (2, 3) AND c IS NULL'))\n"
            "print(sorted(n for n in sys.modules if n.split('.')[0] == 'sqlglot'\n"
            "             or n.startswith(('s3slice.query.sqlglot', 's3slice.query.split.'))))\n")
    check = ("import sys\n"
             "from s3slice.query.check import check_query\n"
             "check_query({'sql': 'SELECT a, COUNT(*) FROM s3object GROUP BY a'})\n"
             "print(sorted(n for n in sys.modules if n.split('.')[0] in ('polars', 'pyarrow')))\n")
    for text, loaded in ((code, "['s3slice.query.split.plan']"), (check, "[]")):
        done = subprocess.run([sys.executable, "-c", text], capture_output=True, text=True,
                              check=True, env={"PYTHONPATH": str(REPO / "functions")},
                              timeout=60)
        assert done.stdout.strip() == loaded, done.stdout
