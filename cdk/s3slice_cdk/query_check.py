"""Every query a construct carries, checked at synth as the function will check it.

The function's :mod:`s3slice.query.check` parses and sandboxes a query with the same code
its analysis runs (the S3 Select dialect, one SELECT reading only ``s3object``, no function
that reads files, a filter that is a condition), importing sqlglot but never polars,
pyarrow or the engine. A query it refuses would fail every object at run time (and land
each message in the dead-letter queue): here it fails ``cdk synth``, naming the construct
and S3 Select's error.

The constructs need ``sqlglot`` (the function's own parser) for this, nothing heavier.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

from .contract import FUNCTION_CODE_DIR, FUNCTION_PACKAGE_DIR
from .settings import SettingsError

_Checker = Callable[[Mapping[str, Any]], object]


def _load() -> tuple[_Checker, type[Exception]]:
    """The function's ``check_query`` and its error base (the public
    ``s3slice.S3SliceError``), imported from the function package the code asset is made
    of: the clone's ``functions/``, else the copy the distribution carries, put first on
    ``sys.path`` unless that very package is already what ``s3slice`` imports."""
    if "s3slice" not in sys.modules:
        spec = importlib.util.find_spec("s3slice")
        found = (Path(next(iter(spec.submodule_search_locations))).resolve()
                 if spec is not None and spec.submodule_search_locations else None)
        if found != FUNCTION_PACKAGE_DIR and str(FUNCTION_CODE_DIR) not in sys.path:
            sys.path.insert(0, str(FUNCTION_CODE_DIR))
    check = importlib.import_module("s3slice.query.check")
    package = importlib.import_module("s3slice")
    return cast(_Checker, check.check_query), cast(type[Exception], package.S3SliceError)


def check_query(query: Mapping[str, Any], where: str) -> None:
    """Refuse (:class:`SettingsError`, naming ``where``) a query the function would refuse
    for every object. ``{}`` (every column and row) passes."""
    checker, error = _load()
    try:
        checker(dict(query))
    except error as e:
        raise SettingsError(f"{where}: query: {type(e).__name__}: {e}; the function would "
                            "refuse it for every object (each message would end in the "
                            "dead-letter queue)") from e
