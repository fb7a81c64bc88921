"""The function's own configuration: what triggered runs query and where they write.

Read from the environment once, at cold start, and validated there, so a bad deployment
fails on its first invocation with a ``ConfigurationError`` naming the variable instead
of failing object by object.

============================  ==========================================================
``S3SLICE_QUERY``             the query for triggered objects, as JSON: ``{"sql": ...}``
                              or ``{"columns": [...], "filter": ..., "limit": ...}``
``S3SLICE_OUTPUT_URI``        where results go: ``s3://bucket/prefix/``
``S3SLICE_OUTPUT_FORMAT``     ``parquet`` (default), ``csv`` or ``json``
``S3SLICE_OUTPUT_COMPRESSION``  as in the request's ``output.compression``
``S3SLICE_SOURCE_URIS``       comma-separated ``s3://bucket/prefix/`` the triggers watch
============================  ==========================================================

Recursion guard: an object under the output location is never processed, and a
configuration whose output lies inside a watched source location is refused.

Watched sources: an object a trigger names (an S3 notification, an EventBridge event, an
SQS message) outside every watched source is refused (:func:`refuse_unwatched`), as IAM
would refuse it: defence in depth beside the function's grants. A pipeline's message
names its own source; with none configured or named, triggered objects are not checked.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from s3slice.core.contract import QUERY_FIELDS
from s3slice.core.errors import AccessDeniedError, ConfigurationError, QueryError, RequestError
from s3slice.core.model import ObjectRef, OutputSpec, Query, parse_output, parse_query, parse_s3_uri
from s3slice.core.settings import Settings
from s3slice.query.analyzer import analyze

#: Why an output URI naming one object cannot serve runs that write a result per object.
ONE_PER_OBJECT = ("{} names one object, but triggered runs and map batches write a result "
                   "for each object: end it with '/' to write them under it")


def _under(bucket: str, key: str, location: tuple[str, str]) -> bool:
    """Whether ``bucket/key`` lies in ``location`` (a bucket and a key prefix)."""
    return bucket == location[0] and key.startswith(location[1])


def watched(bucket: str, key: str, source: tuple[str, str]) -> bool:
    """Whether ``bucket/key`` lies in the watched ``source`` (a bucket and a folder).

    Buckets compare exactly and a prefix is a folder: ``landing/`` never holds
    ``landing2/x``, and a prefix written without its ``/`` (``s3://b/landing``) holds the
    key ``landing`` itself and what lies under ``landing/``, never ``landing2/x``. An
    empty prefix is the whole bucket.
    """
    src_bucket, prefix = source
    if bucket != src_bucket:
        return False
    if not prefix or prefix.endswith("/"):
        return key.startswith(prefix)
    return key == prefix or key.startswith(f"{prefix}/")


def refuse_unwatched(obj: ObjectRef, sources: tuple[tuple[str, str], ...], *,
                     named_by: str) -> AccessDeniedError | None:
    """The error for a triggered object outside every watched source (``named_by`` says
    where the sources come from), or None when it lies in one or none are known."""
    if not sources or any(watched(obj.bucket, obj.key, s) for s in sources):
        return None
    shown = ", ".join(f"s3://{b}/{p}" for b, p in sources)
    return AccessDeniedError(
        f"outside the watched source{'s' if len(sources) > 1 else ''} {shown} ({named_by}): "
        f"a triggered object is read only from them; nothing was read or written for it",
        uri=obj.uri)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    query: Query | None = None
    output: OutputSpec | None = None
    sources: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Config:
        env = os.environ if env is None else env
        Settings.from_env(env)  # the tuning variables too: a bad one fails the init
        query = None
        raw_query = env.get("S3SLICE_QUERY", "").strip()
        if raw_query:
            query = parse_query_config(raw_query, variable="S3SLICE_QUERY")
        output = None
        if env.get("S3SLICE_OUTPUT_URI"):
            spec: dict[str, Any] = {"uri": env["S3SLICE_OUTPUT_URI"]}
            for name in ("format", "compression"):
                value = env.get(f"S3SLICE_OUTPUT_{name.upper()}")
                if value:
                    spec[name] = value
            try:
                output = parse_output(spec, field="output")
            except RequestError as e:
                raise ConfigurationError(e.message, variable="S3SLICE_OUTPUT_URI") from None
            if output is not None and output.file_key is not None:
                raise ConfigurationError(ONE_PER_OBJECT.format(output.uri),
                                         variable="S3SLICE_OUTPUT_URI")
        sources: list[tuple[str, str]] = []
        for i, uri in enumerate(u.strip() for u in env.get("S3SLICE_SOURCE_URIS", "").split(",")):
            if not uri:
                continue
            try:
                sources.append(parse_s3_uri(uri, field=f"S3SLICE_SOURCE_URIS[{i}]"))
            except RequestError as e:
                raise ConfigurationError(e.message, variable="S3SLICE_SOURCE_URIS") from None
        config = cls(query=query, output=output, sources=tuple(sources))
        config.check_recursion()
        return config

    def check_recursion(self) -> None:
        """Refuse an output location that the function's own triggers watch."""
        if self.output is None:
            return
        out = (self.output.bucket, self.output.prefix)
        for bucket, prefix in self.sources:
            # Either prefix containing the other means outputs can land in a watched place.
            if bucket == out[0] and (out[1].startswith(prefix) or prefix.startswith(out[1])):
                raise ConfigurationError(
                    f"the output location {self.output.uri} overlaps the watched source "
                    f"s3://{bucket}/{prefix}: every result would trigger the function again",
                    variable="S3SLICE_OUTPUT_URI")

    def is_output(self, obj: ObjectRef, output: OutputSpec | None = None) -> bool:
        """Whether ``obj`` lies under this configuration's (or ``output``'s) location."""
        outputs = [o for o in (self.output, output) if o is not None]
        return any(_under(obj.bucket, obj.key, (o.bucket, o.prefix)) for o in outputs)

    def require(self, *, what: str, query: Query | None = None,
                output: OutputSpec | None = None,
                given_in: str | None = None) -> tuple[Query, OutputSpec]:
        """The query and output a run needs: ``query``/``output`` when the event gave them
        (in its field ``given_in``), else the configuration's, else a clear error. With
        ``given_in`` the event could have carried them, so it is a :class:`RequestError`
        naming that field; otherwise the function's configuration is at fault."""
        query, output = query or self.query, output or self.output
        missing = [(name, variable) for name, variable, v in (
            ("query", "S3SLICE_QUERY", query), ("output", "S3SLICE_OUTPUT_URI", output))
            if v is None]
        if missing:
            name, variable = missing[0]
            if given_in is not None:
                raise RequestError(f"no {name}: give {given_in}.{name} or configure the "
                                   f"function's {variable}", field=f"{given_in}.{name}")
            raise ConfigurationError(
                f"{what} needs {' and '.join(v for _, v in missing)} to be set",
                variable=variable)
        assert query is not None
        assert output is not None
        return query, output


def parse_query_config(raw: str | Mapping[str, Any], *, variable: str,
                       typed: bool = False) -> Query:
    """A query given as configuration (JSON text or an object) rather than a request.
    ``typed``: a query the analysis refuses raises its own :class:`QueryError` (a
    pipeline's message: its failure log tells a forbidden query from a missing column),
    else a :class:`ConfigurationError`."""
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            # Plain SQL is accepted too.
            value = {"sql": raw}
    else:
        value = raw
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"expected a JSON object with 'sql' or 'columns'/'filter', "
                                 f"got {type(value).__name__}", variable=variable)
    unknown = set(value) - QUERY_FIELDS
    if unknown:
        raise ConfigurationError(f"unknown field(s) {sorted(unknown)}; expected some of "
                                 f"{sorted(QUERY_FIELDS)}", variable=variable)
    try:
        query = parse_query(value)
        # Analysed now, so a bad column expression or forbidden SQL fails at cold start.
        analyze(query)
    except QueryError as e:
        if typed:
            raise
        raise ConfigurationError(e.message, variable=variable) from None
    except RequestError as e:
        raise ConfigurationError(e.message, variable=variable) from None
    return query
