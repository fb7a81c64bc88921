"""s3slice: the columns and rows a query needs from objects in S3, and nothing more.

The public surface is small: :func:`read_parquet` reads in polars' vocabulary and returns
a ``DataFrame`` (what the read did is ``frame.s3slice.stats``), :func:`read` answers a
JSON-shaped request with a frame and stats, :func:`run` also writes the outputs and returns
the service's JSON response, and the ``...Error`` classes are the error contract. The
Lambda entry point is ``s3slice.handler.lambda_handler``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from s3slice.core.errors import (
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
from s3slice.core.lazy import lazy_exports

if TYPE_CHECKING:
    from s3slice.answer.frames import read_parquet
    from s3slice.core.model import ObjectRef as ObjectRef
    from s3slice.core.model import OutputSpec as OutputSpec
    from s3slice.core.model import Query as Query
    from s3slice.core.model import Request
    from s3slice.core.model import parse_request as parse_request
    from s3slice.core.settings import Settings
    from s3slice.engine.engine import Engine as Engine
    from s3slice.engine.results import ReadResult, Stats
    from s3slice.fetch.base import Fetcher

    # The engine's parts, importable for tests and tools, not part of the public API.
    from s3slice.fetch.local import LocalFetcher as LocalFetcher
    from s3slice.fetch.local import RecordingFetcher as RecordingFetcher
    from s3slice.fetch.s3 import S3Fetcher as S3Fetcher
    from s3slice.parquet.footer_cache import FOOTER_CACHE as FOOTER_CACHE
    from s3slice.parquet.footer_cache import FooterCache as FooterCache

#: Where each lazily imported name lives: ``import s3slice`` (and so ``s3slice --version``
#: and the error classes) costs no polars, pyarrow or engine import; the first use of
#: one of these names imports its module (PEP 562).
_LAZY = {
    "read_parquet": "s3slice.answer.frames",
    "ObjectRef": "s3slice.core.model", "OutputSpec": "s3slice.core.model",
    "Query": "s3slice.core.model", "Request": "s3slice.core.model",
    "parse_request": "s3slice.core.model",
    "Engine": "s3slice.engine.engine", "Fetcher": "s3slice.fetch.base",
    "Settings": "s3slice.core.settings",
    "ReadResult": "s3slice.engine.results", "Stats": "s3slice.engine.results",
    "LocalFetcher": "s3slice.fetch.local", "RecordingFetcher": "s3slice.fetch.local",
    "S3Fetcher": "s3slice.fetch.s3",
    "FOOTER_CACHE": "s3slice.parquet.footer_cache", "FooterCache": "s3slice.parquet.footer_cache",
}


__getattr__ = lazy_exports(__name__, _LAZY, globals())


__version__ = "0.1.0"

__all__ = [
    "AccessDeniedError",
    "ConfigurationError",
    "FilterSyntaxError",
    "ForbiddenQueryError",
    "ObjectChangedError",
    "ObjectError",
    "ObjectFormatError",
    "ObjectNotFoundError",
    "OutputError",
    "QueryError",
    "ReadResult",
    "RequestError",
    "ResultTooLargeError",
    "S3SliceError",
    "S3SliceThrottledError",
    "S3SliceTransientError",
    "SchemaConflictError",
    "Settings",
    "Stats",
    "TimeoutBudgetError",
    "UnknownColumnError",
    "error_types",
    "read",
    "read_parquet",
    "run",
]


def read(request: Request | Mapping[str, Any], *, settings: Settings | None = None,
         fetcher: Fetcher | None = None) -> ReadResult:
    """Answer ``request`` with a polars frame (``.frame``) and honest stats (``.stats``)."""
    from s3slice.core.model import Request, parse_request
    from s3slice.core.settings import Settings
    from s3slice.engine.engine import Engine as Engine

    if not isinstance(request, Request):
        request = parse_request(request)
    return Engine(settings or Settings.from_env(), fetcher=fetcher).read(request)


def run(request: Request | Mapping[str, Any], *, settings: Settings | None = None,
        fetcher: Fetcher | None = None) -> dict[str, Any]:
    """Read, write the outputs, and return the service's JSON response."""
    from s3slice.answer.run import run as _run
    from s3slice.core.model import Request, parse_request
    from s3slice.core.settings import Settings
    from s3slice.engine.engine import Engine as Engine

    if not isinstance(request, Request):
        request = parse_request(request)
    engine = Engine(settings or Settings.from_env(), fetcher=fetcher)
    return _run(request, engine=engine).to_dict()
