"""The library call in polars' vocabulary: :func:`read_parquet` takes what
``pl.read_parquet`` / ``pl.scan_parquet(...).filter(...)`` take and returns a polars
``DataFrame``, with what the read did on it as ``frame.s3slice.stats``."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import polars as pl

from s3slice.core.errors import RequestError
from s3slice.core.model import parse_request
from s3slice.core.settings import Settings
from s3slice.engine.engine import Engine
from s3slice.engine.results import Stats
from s3slice.query.polars import expr as polars_expr

#: polars' ``storage_options`` names for S3 (object_store's, with and without ``aws_``),
#: and the setting or credential each gives.
_OPTIONS = {
    "aws_access_key_id": "access_key_id", "access_key_id": "access_key_id",
    "aws_secret_access_key": "secret_access_key", "secret_access_key": "secret_access_key",
    "aws_session_token": "token", "session_token": "token", "token": "token",
    "aws_region": "region", "region": "region",
    "aws_endpoint_url": "endpoint_url", "aws_endpoint": "endpoint_url",
    "endpoint_url": "endpoint_url", "endpoint": "endpoint_url",
}

#: Polars' credential provider protocol: a call returns the ``aws_*`` keys and when they
#: expire (seconds since the epoch, or None).
CredentialProvider = Callable[[], tuple[Mapping[str, Any], int | None]]

#: The attribute a frame :func:`read_parquet` returned holds its stats in (a DataFrame is
#: neither hashable nor slotted, so it carries them itself, and they go with it).
_STATS = "_s3slice_stats"


def read_parquet(source: str | Sequence[str], *, columns: Sequence[str] | None = None,
                 filter: pl.Expr | str | None = None,
                 n_rows: int | None = None,
                 storage_options: Mapping[str, Any] | None = None,
                 credential_provider: CredentialProvider | None = None,
                 settings: Settings | None = None) -> pl.DataFrame:
    """Read the Parquet objects ``source`` names (a key, a list, a prefix ending in ``/``
    or a glob), fetching only what the query needs; ``frame.s3slice.stats`` says what was
    fetched and pruned.

    ``filter`` is SQL text (``"a <= 1000 AND b = 'x'"``) or a polars expression; either
    prunes row groups, pages, Bloom filters and partitions (an expression by its
    comparisons of columns with constants, :mod:`s3slice.query.polars.expr`) and an
    expression is then applied to the rows read as polars applies it (the columns it names
    are read too). ``storage_options`` takes
    polars' S3 keys (``aws_access_key_id``, ``aws_secret_access_key``,
    ``aws_session_token``, ``aws_region``, ``aws_endpoint_url``); ``credential_provider``
    is polars' (``pl.CredentialProviderAWS`` or any callable of that shape). Without
    either, the environment's credentials and boto3's chain are used.
    """
    options = _storage_options(storage_options)
    base = settings or Settings.from_env()
    overrides: dict[str, Any] = {k: options.pop(k) for k in ("region", "endpoint_url")
                                 if k in options}
    if credential_provider is not None:
        if options:
            raise RequestError("give credentials in storage_options or a credential_provider, "
                               "not both", field="credential_provider")
        overrides["credentials"] = _from_polars(credential_provider)
    elif options:
        if not {"access_key_id", "secret_access_key"} <= set(options):
            raise RequestError("needs both aws_access_key_id and aws_secret_access_key",
                               field="storage_options")
        static = {"token": None, **options, "expires_at": None}
        overrides["credentials"] = lambda: static
    request: dict[str, Any] = {"source": source if isinstance(source, str) else list(source),
                               "input": "parquet"}
    if isinstance(filter, pl.Expr):
        wanted = list(columns) if columns is not None else None
        if wanted is not None:
            request["columns"] = wanted + [c for c in filter.meta.root_names()
                                           if c not in wanted]
        pruning = polars_expr.to_sql(filter)  # prunes as SQL text does; rows: filter's own
        if pruning is not None:
            request["filter"] = pruning
    else:
        if columns is not None:
            request["columns"] = list(columns)
        if filter is not None:
            request["filter"] = filter
        if n_rows is not None:
            request["limit"] = n_rows
    engine = Engine(dataclasses.replace(base, **overrides))
    result = engine.read(parse_request(request))
    frame = result.frame
    if isinstance(filter, pl.Expr):
        frame = frame.filter(filter)
        if columns is not None:
            frame = frame.select(list(columns))
        if n_rows is not None:
            frame = frame.head(n_rows)
    setattr(frame, _STATS, result.stats)
    return frame


def _storage_options(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    if raw is None:
        return {}
    unknown = sorted(set(raw) - set(_OPTIONS))
    if unknown:
        raise RequestError(f"unknown S3 option(s) {unknown}; expected some of "
                           f"{sorted(_OPTIONS)}", field="storage_options")
    return {_OPTIONS[k]: v for k, v in raw.items() if v is not None}


def _from_polars(provider: CredentialProvider) -> Callable[[], Mapping[str, Any]]:
    """polars' credential provider as obstore's."""
    def credentials() -> Mapping[str, Any]:
        given, expiry = provider()
        try:
            return {"access_key_id": given["aws_access_key_id"],
                    "secret_access_key": given["aws_secret_access_key"],
                    "token": given.get("aws_session_token"),
                    "expires_at": None if expiry is None else
                    dt.datetime.fromtimestamp(expiry, tz=dt.UTC)}
        except KeyError as e:
            raise RequestError(f"the credential provider gave no {e}",
                               field="credential_provider") from None
    return credentials


@pl.api.register_dataframe_namespace("s3slice")
class S3SliceFrame:
    """``frame.s3slice.stats``: what the read that made ``frame`` did (None for a frame
    :func:`read_parquet` did not return)."""

    def __init__(self, frame: pl.DataFrame) -> None:
        self._frame = frame

    @property
    def stats(self) -> FrameStats | None:
        stats: Stats | None = getattr(self._frame, _STATS, None)
        return None if stats is None else FrameStats(stats.to_dict())


class FrameStats(dict[str, Any]):
    """A read's stats as the response's ``stats`` mapping (equal to it, printed as it is);
    its keys also read as attributes (``stats.rows_out``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"the stats have no {name!r}") from None
