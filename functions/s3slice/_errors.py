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
