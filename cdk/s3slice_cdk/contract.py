"""What the deployment takes from the function's own code: its contract, read by path.

The function package is the one source of truth for the names it and its deployment must
agree on: ``s3slice/core/contract.py`` (output formats, the fields of a query and of
the workflow's events, the partials folder) and ``s3slice/core/errors.py`` (the error
type names Step Functions retries and catches, read by ``service_errors``). Both import
nothing but the standard library, so the CDK app loads them here by path, with
:func:`load_function_module`: it needs neither polars nor the rest of the function
package, and never imports the package as ``s3slice``.

This module imports nothing from the rest of ``s3slice_cdk`` (``settings`` imports it).
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

#: The repository, when this is a clone of it (``functions/``, ``layers/``, ``cdk.json``).
REPO_DIR = Path(__file__).resolve().parents[2]
#: The function's code in a clone of the repository (the ``s3slice`` package lives in it).
REPO_FUNCTION_CODE_DIR = REPO_DIR / "functions"
#: The function's code the ``s3slice-cdk`` distribution carries (``cdk/setup.py`` copies
#: the release's ``functions/s3slice`` there; absent in a clone).
CARRIED_FUNCTION_CODE_DIR = Path(__file__).resolve().parent / "function_code"


def _function_code_dir() -> Path:
    """The directory holding the ``s3slice`` package: the repository's ``functions/`` in
    a clone, else the copy the installed distribution carries (found without importing
    it: the constructs need no polars)."""
    for code_dir in (REPO_FUNCTION_CODE_DIR, CARRIED_FUNCTION_CODE_DIR):
        if (code_dir / "s3slice" / "core" / "contract.py").is_file():
            return code_dir
    raise ImportError(f"s3slice_cdk carries the function's code in {CARRIED_FUNCTION_CODE_DIR}"
                      ", which is missing: install the s3slice-cdk wheel of a release (or "
                      "build it with `uv build cdk`), not a copy of the cdk/ folder")


#: The directory the function's code asset is staged from: it holds the ``s3slice``
#: package and nothing else that ships.
FUNCTION_CODE_DIR = _function_code_dir()
#: The function package.
FUNCTION_PACKAGE_DIR = FUNCTION_CODE_DIR / "s3slice"
#: Whether this is a clone of the repository (the layer build and ``cdk.json`` are here).
IN_REPOSITORY = FUNCTION_CODE_DIR == REPO_FUNCTION_CODE_DIR
#: The names the function and the deployment agree on.
CONTRACT_MODULE = FUNCTION_PACKAGE_DIR / "core" / "contract.py"


@functools.cache
def load_function_module(path: Path) -> ModuleType:
    """One standard-library-only module of the function package, loaded from ``path``.

    It is registered as ``s3slice_cdk._function.<stem>`` (never as part of ``s3slice``, so
    it cannot shadow or be shadowed by the package itself), once per path.
    """
    name = f"s3slice_cdk._function.{path.stem.lstrip('_')}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} from the function's code")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and typing resolve names through it
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def names(module: ModuleType, attribute: str) -> tuple[str, ...]:
    """``module.attribute``: a non-empty collection of distinct, non-empty names."""
    value = getattr(module, attribute, None)
    items: tuple[object, ...] = ()
    if isinstance(value, set | frozenset):
        items = tuple(sorted(value, key=str))  # an unordered set: in a stable order
    elif isinstance(value, Iterable) and not isinstance(value, str | bytes):
        items = tuple(value)
    if (not items or not all(isinstance(n, str) and n for n in items)
            or len(set(items)) != len(items)):
        raise TypeError(f"{module.__file__}: {attribute} must hold distinct, non-empty "
                        f"names, got {value!r}")
    return tuple(str(n) for n in items)


def name(module: ModuleType, attribute: str) -> str:
    """``module.attribute``: one non-empty name without a ``/``."""
    value = getattr(module, attribute, None)
    if not isinstance(value, str) or not value or "/" in value:
        raise TypeError(f"{module.__file__}: {attribute} must be a name without '/', "
                        f"got {value!r}")
    return value


_contract = load_function_module(CONTRACT_MODULE)

#: The formats an output may be written in.
OUTPUT_FORMATS: tuple[str, ...] = names(_contract, "OUTPUT_FORMATS")
#: The fields of a query given as JSON (the ``query`` setting, a workflow's query).
QUERY_FIELDS: frozenset[str] = frozenset(names(_contract, "QUERY_FIELDS"))
#: The fields of a Distributed Map batch's ``BatchInput``.
BATCH_INPUT_FIELDS: frozenset[str] = frozenset(names(_contract, "BATCH_INPUT_FIELDS"))
#: The fields of the reduce step's ``{"Reduce": {...}}`` event.
REDUCE_FIELDS: frozenset[str] = frozenset(names(_contract, "REDUCE_FIELDS"))
#: The fields of the check step's ``{"Check": {...}}`` event.
CHECK_FIELDS: frozenset[str] = frozenset(names(_contract, "CHECK_FIELDS"))
#: The folder under an output location where map batches leave their partial answers
#: (``<output uri><PARTIALS>/<run>/``).
PARTIALS: str = name(_contract, "PARTIALS")
#: The function refuses to start work with less than this left before its timeout.
SAFETY_MARGIN_MS: int = int(_contract.SAFETY_MARGIN_MS)
