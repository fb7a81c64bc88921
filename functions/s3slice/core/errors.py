"""The service's error tree.

Every failure the service can name is one of these. The class name is the contract:
Lambda reports it as ``errorType``, so Step Functions can ``Retry``/``Catch`` by name.

    S3SliceError
    ├── ConfigurationError      the function's environment is invalid (found at cold start)
    ├── RequestError            the request or event is malformed (permanent)
    │   └── ResultTooLargeError rows asked for inline exceed Lambda's response limit
    ├── QueryError              the query cannot run against the data (permanent)
    │   ├── UnknownColumnError
    │   ├── FilterSyntaxError
    │   └── ForbiddenQueryError SQL reaching for anything but its sources
    ├── ObjectError             an object cannot be read as asked (permanent)
    │   ├── ObjectNotFoundError
    │   ├── AccessDeniedError
    │   ├── ObjectFormatError   not Parquet / corrupt / truncated
    │   └── ObjectChangedError  the object changed while it was being read
    ├── OutputError             the result cannot be written (permanent)
    ├── TimeoutBudgetError      the invocation ran out of time before finishing
    ├── S3SliceTransientError   network failures that outlived the retries (retryable)
    └── S3SliceThrottledError   throttling that outlived the retries (retryable)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class S3SliceError(Exception):
    """Base of every error the service raises on purpose."""

    retryable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict[str, object]:
        return {"errorType": type(self).__name__, "errorMessage": self.message,
                "retryable": self.retryable}


class ConfigurationError(S3SliceError):
    """The function's configuration (its environment) is invalid or would recurse."""

    def __init__(self, message: str, *, variable: str | None = None) -> None:
        super().__init__(f"{variable}: {message}" if variable else message)
        self.variable = variable


class RequestError(S3SliceError):
    """The request (or event) is malformed: a missing, mistyped or invalid field."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


class ResultTooLargeError(RequestError):
    """The rows asked for inline do not fit in a Lambda response."""


class QueryError(S3SliceError):
    """The query cannot run against the data it names."""


class UnknownColumnError(QueryError):
    def __init__(self, columns: list[str], *, source: str, available: list[str]) -> None:
        names = ", ".join(repr(c) for c in columns)
        shown = ", ".join(available[:50]) + (" …" if len(available) > 50 else "")
        super().__init__(f"unknown column {names} in {source}; available: {shown}")
        self.columns = columns
        self.source = source


class FilterSyntaxError(QueryError):
    """The filter or SQL text does not parse, or uses a construct the service does not run."""


class ForbiddenQueryError(QueryError):
    """The SQL reaches for something other than the query's sources."""


class SchemaConflictError(QueryError):
    """Objects of one query hold the same column with types that do not unify."""


class ObjectError(S3SliceError):
    """An object cannot be read as asked."""

    def __init__(self, message: str, *, uri: str) -> None:
        super().__init__(f"{uri}: {message}")
        self.uri = uri


class ObjectNotFoundError(ObjectError):
    pass


class AccessDeniedError(ObjectError):
    pass


class ObjectFormatError(ObjectError):
    """The object is not in the expected format, or is corrupt or truncated."""


class ObjectChangedError(ObjectError):
    """The object's ETag changed while it was being read, twice in a row."""


class OutputError(S3SliceError):
    """The result could not be written to its output location."""


class TimeoutBudgetError(S3SliceError):
    """The invocation stopped before Lambda's hard timeout; nothing was written."""


class S3SliceTransientError(S3SliceError):
    """A network or server failure that outlived the retries; trying again may succeed."""

    retryable = True


class S3SliceThrottledError(S3SliceTransientError):
    """S3 kept answering SlowDown/503 past the retries."""


class PreconditionFailed(Exception):
    """The object is not the one a read was pinned to (its ETag or size changed): the
    engine restarts the read. Never leaves the engine."""


def error_types(*, retryable: bool) -> tuple[str, ...]:
    """Every error type name the service can raise, permanent or retryable.

    Step Functions matches ``errorType`` by exact name, never by base class, so a
    ``Catch`` or ``Retry`` must list each concrete name; the workflow is built from this.
    """
    names: list[str] = []
    pending: list[type[S3SliceError]] = [S3SliceError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls is not S3SliceError and cls.retryable == retryable:
            names.append(cls.__name__)
    return tuple(sorted(names))


def is_native_panic(e: BaseException) -> bool:
    """Whether ``e`` is a Rust panic surfacing through pyo3 (polars, obstore, thriftpy2's
    peers). Each pyo3 extension defines its own ``pyo3_runtime.PanicException``, a
    ``BaseException`` that ``except Exception`` does not catch, so it is known by name."""
    cls = type(e)
    return cls.__name__ == "PanicException" and cls.__module__ == "pyo3_runtime"


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def plain(message: str) -> str:
    """A message on one line without terminal escape codes (sqlglot underlines the
    offending token with them)."""
    return " ".join(_ANSI.sub("", message).split())


def first_line(e: BaseException) -> str:
    """The first line of an exception's text (native errors append pages of context)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


@contextmanager
def contained(typed: Callable[[str], S3SliceError], *,
              native: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """Turn a native library's panic (and its ``native`` error types) into ``typed(text)``.

    Service errors pass through unchanged. Used around each phase that runs native code
    (decode, execute, write), so that no panic escapes as an untyped ``BaseException``:
    the caller's batch isolation then holds as for any other typed error.
    """
    try:
        yield
    except S3SliceError:
        raise
    except BaseException as e:
        if is_native_panic(e) or (native and isinstance(e, native)):
            raise typed(first_line(e)) from e
        raise
