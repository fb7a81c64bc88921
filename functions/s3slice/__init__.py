"""s3slice: the columns and rows a query needs from objects in S3, and nothing more.

The public surface is small: :func:`read` answers a request with a polars frame and
stats, :func:`run` also writes the outputs and returns the service's JSON response, and
the ``...Error`` classes are the error contract. The Lambda entry point is
``s3slice.handler.lambda_handler``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from s3slice._errors import (
    AccessDeniedError,
    ConfigurationError,
    FilterSyntaxError,
    ForbiddenQueryError,
    ObjectChangedError,
    ObjectError,
    ObjectFormatError,
    ObjectNotFoundError,
    OutputError,
    QueryError,
    RequestError,
    ResultTooLargeError,
    S3SliceError,
    S3SliceThrottledError,
    S3SliceTransientError,
    SchemaConflictError,
    TimeoutBudgetError,
    UnknownColumnError,
    error_types,
)
from s3slice._model import ObjectRef, OutputSpec, Query, Request, parse_request
from s3slice._output import run as _run
from s3slice._settings import Settings
from s3slice.engine.engine import Engine
from s3slice.engine.results import ReadResult, Stats
from s3slice.fetch.base import Fetcher
from s3slice.fetch.local import LocalFetcher, RecordingFetcher
from s3slice.fetch.s3 import S3Fetcher
from s3slice.parquet.footer_cache import FOOTER_CACHE, FooterCache

__version__ = "0.1.0"

__all__ = [
    "FOOTER_CACHE",
    "AccessDeniedError",
    "ConfigurationError",
    "Engine",
    "Fetcher",
    "FilterSyntaxError",
    "FooterCache",
    "ForbiddenQueryError",
    "LocalFetcher",
    "ObjectChangedError",
    "ObjectError",
    "ObjectFormatError",
    "ObjectNotFoundError",
    "ObjectRef",
    "OutputError",
    "OutputSpec",
    "Query",
    "QueryError",
    "ReadResult",
    "RecordingFetcher",
    "Request",
    "RequestError",
    "ResultTooLargeError",
    "S3Fetcher",
    "S3SliceError",
    "S3SliceThrottledError",
    "S3SliceTransientError",
    "SchemaConflictError",
    "Settings",
    "Stats",
    "TimeoutBudgetError",
    "UnknownColumnError",
    "error_types",
    "parse_request",
    "read",
    "run",
]


def read(request: Request | Mapping[str, Any], *, settings: Settings | None = None,
         fetcher: Fetcher | None = None) -> ReadResult:
    """Answer ``request`` with a polars frame (``.frame``) and honest stats (``.stats``)."""
    if not isinstance(request, Request):
        request = parse_request(request)
    return Engine(settings or Settings.from_env(), fetcher=fetcher).read(request)


def run(request: Request | Mapping[str, Any], *, settings: Settings | None = None,
        fetcher: Fetcher | None = None) -> dict[str, Any]:
    """Read, write the outputs, and return the service's JSON response."""
    if not isinstance(request, Request):
        request = parse_request(request)
    engine = Engine(settings or Settings.from_env(), fetcher=fetcher)
    return _run(request, engine=engine).to_dict()
