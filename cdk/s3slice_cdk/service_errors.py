"""The function's error type names, read from its own error module (the contract).

Lambda reports a raised exception's class name as ``errorType``, and Step Functions
matches ``Retry``/``Catch`` ``ErrorEquals`` against it by exact name, never by base class:
catching ``QueryError`` does not catch ``UnknownColumnError``. So the workflow lists every
concrete name, taken from ``s3slice.error_types()`` in ``functions/s3slice/core/errors.py``.

That file imports nothing but the standard library, so it is loaded here by path (as the
rest of the function's contract is, by ``contract.load_function_module``): the CDK app
needs neither polars nor the rest of the function package.
"""

from __future__ import annotations

from pathlib import Path

from .contract import FUNCTION_PACKAGE_DIR, load_function_module

#: The function package's error tree (``S3SliceError`` and its subclasses).
ERRORS_MODULE = FUNCTION_PACKAGE_DIR / "core" / "errors.py"


def load_error_types(path: Path = ERRORS_MODULE) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(retryable, permanent)``: every error type name the function can raise."""
    module = load_function_module(path)
    retryable = _names(module.error_types(retryable=True), path)
    permanent = _names(module.error_types(retryable=False), path)
    if not retryable or not permanent or set(retryable) & set(permanent):
        raise ValueError(f"{path}: error_types() must name disjoint, non-empty sets of "
                         f"retryable {retryable} and permanent {permanent} errors")
    return retryable, permanent


def _names(value: object, path: Path) -> tuple[str, ...]:
    if not isinstance(value, tuple) or not all(isinstance(n, str) and n for n in value):
        raise TypeError(f"{path}: error_types() must return a tuple of names, got {value!r}")
    return tuple(str(n) for n in value)


#: ``RETRYABLE_ERRORS``: trying again may succeed (retried with backoff).
#: ``PERMANENT_ERRORS``: retrying cannot help (caught: the batch fails at once).
RETRYABLE_ERRORS, PERMANENT_ERRORS = load_error_types()
