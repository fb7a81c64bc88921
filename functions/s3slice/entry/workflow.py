"""One answer over a whole prefix: partial answers per map batch, then one reduce step.

A query that combines objects (an aggregate, ``GROUP BY``, ``DISTINCT``, ``ORDER BY``,
``LIMIT``) is split (:mod:`._split`) into a partial plan and a final plan. In the
Distributed Map workflow each batch, given the execution's name as ``BatchInput.run``,
reads its objects as one many-object read, applies the partial plan and writes the
partial frame as Parquet under ``<output uri>_partials/<run>/`` (named by the batch's
objects, so a retried batch overwrites its own), returning ``{"status": "ok", "partial":
uri, "stats": ...}``. Items a prefix read skips (folder markers and empty objects, by the
engine's own rule, :func:`s3slice.engine.sources.listable`) and objects under the output
location are not read: they are counted in the stats' ``objects_skipped`` and named in
``skipped``. A batch left with nothing to read writes an empty partial (no columns), so
that the reduce still finds one partial per batch.

Each partial names, in its Parquet metadata, the run and the query (its hash) it was
computed for, and its batch's stats. The reduce step (``{"Reduce": {"run", "query",
"output", "batches"}}``) reads every partial's footer first and refuses with a typed
``QueryError`` a partial of another query or run (a batch re-run with another query
overwrites its partial: a reduce over it would be a wrong answer). It refuses with
``ObjectNotFoundError`` when there are fewer or more than ``batches`` partials (a failed
batch never yields a reduced answer over missing data), or when no batch had an object
to read. It then applies the final plan, writes ``<output uri>combined.<hash>.<ext>``,
then the run's manifest ``_partials/<run>/reduced.json`` (the run, the query's hash and
the response), deletes the partials and answers as a direct invoke does, its stats
summed over the batches. A partial that cannot be deleted is named in
``partials_left``; the answer stands.

A reduce re-run (the workflow retries the reduce, and a retry can come after a reduce
that completed) finds the manifest and answers with the response it recorded, once it
has checked that the manifest is this query's and run's (a ``QueryError`` if not); a
partial still left is deleted then. It reads nothing outside the run's partials folder
(the function's role may read no other key of the output prefix): the manifest, written
only once the answer was, is the record that the answer is there. A reduce interrupted
before its manifest was written finds the partials and writes the same answer again,
under the same key.

A query that does not combine objects keeps per-object outputs; its reduce answers
``{"status": "ok", "reduced": false, "outputs": []}``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from s3slice.answer.write import output_key, put_all, serialize
from s3slice.core.contract import CHECK_FIELDS, PARTIALS, REDUCE_FIELDS
from s3slice.core.errors import (
    ConfigurationError,
    ObjectFormatError,
    ObjectNotFoundError,
    QueryError,
    RequestError,
    S3SliceError,
)
from s3slice.core.model import ObjectRef, OutputSpec, Query, Request, SourceSpec, parse_output
from s3slice.engine.engine import Engine
from s3slice.engine.results import Stats, summed_counts
from s3slice.entry.config import Config, parse_query_config
from s3slice.entry.events import Skipped, parse_run
from s3slice.entry.observe import logger, record_stats
from s3slice.parquet.footer import Footer
from s3slice.query.analysis import Analysis
from s3slice.query.analyzer import analyze, split_for
from s3slice.query.split.plan import Split, partial_step
from s3slice.query.sqlglot.sql_errors import sum_overflow

#: The Parquet metadata key a partial's batch stats travel in.
STATS_KEY = b"s3slice.batch_stats"
#: The Parquet metadata key naming what a partial answers: ``{"run", "query", "empty"}``.
PARTIAL_KEY = b"s3slice.partial"
#: A manifest holds a response kept under Step Functions' state payload limit (256 KiB).
MANIFEST_READ = 1024 * 1024
#: The run's manifest, in its partials folder, written once its answer is.
MANIFEST = "reduced.json"
#: The most skipped items a batch's response names (their count is in its stats).
SKIPPED_SHOWN = 20


def split_of(query: Query) -> tuple[Analysis, Split | None]:
    """The query analysed, and its split (None when it does not combine objects)."""
    analysis = analyze(query)
    return analysis, split_for(analysis)


def query_id(query: Query) -> str:
    """The hash a partial and a manifest name their query by (a request's query hash)."""
    return Request(sources=(), query=query).query_hash()


def partials_location(output: OutputSpec, run: str) -> tuple[str, str]:
    """(bucket, key prefix) of a run's partials."""
    return output.bucket, f"{output.prefix}{PARTIALS}/{run}/"


def map_batch(objects: Sequence[ObjectRef], skipped: Sequence[Skipped], query: Query,
              output: OutputSpec, run: str, engine: Engine) -> dict[str, Any] | None:
    """A map batch's partial answer over ``objects``, written for the reduce; None when
    the query does not combine objects (the batch keeps per-object outputs).
    ``skipped`` are the batch's items not read (reported, and counted in the stats)."""
    analysis, split = split_of(query)
    if split is None:
        return None
    bucket, prefix = partials_location(output, run)
    names = "\n".join(sorted([o.uri for o in objects] + [s.uri for s in skipped]))
    key = f"{prefix}batch-{hashlib.sha256(names.encode()).hexdigest()[:24]}.parquet"
    if objects:
        result = engine.read(Request(sources=tuple(objects), query=query),
                             finish=functools.partial(partial_step, analysis, split))
        table, stats, rows = result.frame.to_arrow(), result.stats, result.frame.height
    else:  # nothing to read: an empty partial, so the reduce still counts this batch
        table, stats, rows = pa.table({}), Stats.of_counts({}, rows_out=0), 0
    counts = {**stats.counts(), "objects_skipped": len(skipped)}
    identity = {"run": run, "query": query_id(query), "empty": not objects}
    table = table.replace_schema_metadata({
        **(table.schema.metadata or {}),
        STATS_KEY: json.dumps(counts).encode(),
        PARTIAL_KEY: json.dumps(identity).encode()})

    def parquet() -> bytes:
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        return buf.getvalue()
    put_all(engine, bucket, [(key, parquet)])
    record_stats(stats)
    return {"status": "ok", "partial": f"s3://{bucket}/{key}",
            **({"skipped": [{"source": s.uri, "reason": s.reason}
                            for s in skipped[:SKIPPED_SHOWN]]} if skipped else {}),
            "stats": {**counts, "rows_out": rows, "cost": dict(stats.cost)}}


def check(raw: object, *, cfg: Config) -> dict[str, Any]:
    """The workflow's first step, before any batch runs: ``{"status": "ok", "combines":
    bool}``, or the ``QueryError`` naming the construct a combining query cannot be split
    on (a median, a window function), so the map never starts on a query that could not
    be reduced exactly."""
    _, query, _ = _query_and_output(raw, cfg, event="Check", fields=CHECK_FIELDS)
    _, split = split_of(query)
    return {"status": "ok", "combines": split is not None}


def _query_and_output(raw: object, cfg: Config, *, event: str, fields: frozenset[str]
                      ) -> tuple[Mapping[str, Any], Query, OutputSpec]:
    """A workflow step's fields, query and output (each defaulting to the deployment's)."""
    if not isinstance(raw, Mapping):
        raise RequestError(f"expected an object, got {type(raw).__name__}", field=event)
    unknown = set(raw) - fields
    if unknown:
        raise RequestError(f"unknown field(s) {sorted(unknown)}", field=event)
    query = None
    if raw.get("query") is not None:
        try:
            query = parse_query_config(raw["query"], variable=f"{event}.query")
        except ConfigurationError as e:  # here the event is at fault
            raise RequestError(str(e)) from None
    query, output = cfg.require(what=f"the workflow's {event} step", query=query,
                                output=parse_output(raw.get("output"), field=f"{event}.output"),
                                given_in=event)
    return raw, query, output


def _final(split: Split, query: Query, partials: pl.LazyFrame) -> pl.LazyFrame:
    """The reduce's answer from the partials; a decimal sum beyond 38 digits named by the
    query's sums (``SUM(amount)``), as a read names it (:func:`sum_overflow`)."""
    try:
        return split.final([partials])
    except QueryError as e:
        named = sum_overflow(query.sql, str(e))
        if named is None:
            raise
        raise QueryError(named) from e


def reduce(raw: object, *, engine: Engine, cfg: Config) -> dict[str, Any]:
    """The reduce step of a run: see the module's docstring."""
    raw, query, output = _query_and_output(raw, cfg, event="Reduce", fields=REDUCE_FIELDS)
    run = parse_run(raw.get("run"), field="Reduce.run")
    batches = raw.get("batches")
    if isinstance(batches, bool) or not isinstance(batches, int) or batches < 0:
        raise RequestError(f"expected the number of map batches, got {batches!r}",
                           field="Reduce.batches")
    _, split = split_of(query)
    if split is None:
        return {"status": "ok", "reduced": False, "outputs": [], "stats": {}}
    bucket, prefix = partials_location(output, run)
    # combined.<hash of the query and the run's partials' location>: one key per run.
    key = output_key(output, Request(sources=(SourceSpec(bucket=bucket, key=prefix),),
                                     query=query, output=output), None)
    listed = engine.fetcher.list_objects(bucket, prefix)
    found = [o for o in listed if o.key.endswith(".parquet")]
    manifest = next((o for o in listed if o.key == f"{prefix}{MANIFEST}"), None)
    if manifest is not None:
        return _already_reduced(manifest, found, query, run, engine)
    if batches == 0:
        raise ObjectNotFoundError(
            f"the map of run {run!r} ran no batch (no objects were listed): there is no "
            "answer to reduce", uri=f"s3://{bucket}/{prefix}")
    if len(found) != batches:
        raise ObjectNotFoundError(
            f"{len(found)} partial answer(s) of run {run!r} where the map ran {batches} "
            "batch(es): a batch failed or is missing; nothing is reduced",
            uri=f"s3://{bucket}/{prefix}")
    each = _checked(found, query_id(query), run, engine)
    readable = tuple(ref for ref, meta in zip(found, each, strict=True) if not meta["empty"])
    if not readable:
        raise ObjectNotFoundError(
            f"no batch of run {run!r} had an object to read (every item was a folder "
            "marker, an empty object or under the output location): there is no answer "
            "to reduce", uri=f"s3://{bucket}/{prefix}")
    result = engine.read(Request(sources=readable, query=Query()),
                         finish=functools.partial(_final, split, query))
    counts = summed_counts(m["stats"] for m in each)
    counts["objects_skipped"] = sum(int(m["stats"].get("objects_skipped", 0)) for m in each)
    [size] = put_all(engine, output.bucket, [(key, lambda: serialize(result.frame, output))])
    response = {"status": "ok", "outputs": [{"uri": f"s3://{output.bucket}/{key}",
                                             "rows": result.frame.height, "bytes": size,
                                             "format": output.format}],
                "stats": {**counts, "rows_out": result.frame.height,
                          "reduce": result.stats.to_dict()}}
    record = {"run": run, "query": query_id(query), "response": response}
    put_all(engine, bucket, [(f"{prefix}{MANIFEST}", lambda: json.dumps(record).encode())])
    left = _delete(engine, found)
    record_stats(Stats.of_counts(counts, rows_out=result.frame.height))
    return {**response, **({"partials_left": left} if left else {})}


def _already_reduced(manifest: ObjectRef, partials: Sequence[ObjectRef], query: Query,
                     run: str, engine: Engine) -> dict[str, Any]:
    """The response a completed reduce of this run recorded, after checking that it is
    this query's and run's; partials still left are deleted."""
    tail = engine.fetcher.get_tail(manifest, max(manifest.size or 0, MANIFEST_READ))
    assert tail is not None
    try:
        record = json.loads(tail.data)
        recorded = (record["run"], record["query"], record["response"])
    except (ValueError, KeyError, TypeError) as e:
        raise ObjectFormatError(f"not a reduce's manifest: {e}", uri=manifest.uri) from None
    if recorded[:2] != (run, query_id(query)):
        raise QueryError(
            f"{manifest.uri}: run {run!r} was reduced for query {recorded[1]} (run "
            f"{recorded[0]!r}), not this query ({query_id(query)}): nothing is reduced again")
    response: dict[str, Any] = recorded[2]
    left = _delete(engine, partials)
    logger.info("run already reduced: its recorded answer", extra={"manifest": manifest.uri})
    return {**response, **({"partials_left": left} if left else {})}


def _delete(engine: Engine, partials: Sequence[ObjectRef]) -> list[str]:
    """Delete the run's partials once its answer is written; the URIs of those that could
    not be. The answer stands either way: the run's manifest answers a retried reduce."""
    left: list[str] = []
    for ref in partials:
        try:
            engine.fetcher.delete(ref.bucket, ref.key)
        except S3SliceError as e:
            logger.warning("partial answer not deleted", extra={"uri": ref.uri,
                                                                "error": e.to_dict()})
            left.append(ref.uri)
    return left


def _checked(partials: Sequence[ObjectRef], query: str, run: str,
             engine: Engine) -> list[dict[str, Any]]:
    """Each partial's identity and batch stats, from its Parquet metadata (its footer, by
    the reader's suffix GET on 8 threads, which the footer cache keeps for the read): a
    typed ``QueryError`` for a partial of another query or run, or one that does not say
    what it answers."""
    def footer(ref: ObjectRef) -> Footer:
        # size unknown: a suffix GET for the footer alone, not the whole small object
        return engine.parquet.footer(dataclasses.replace(ref, size=None)).footer

    with ThreadPoolExecutor(8, thread_name_prefix="s3slice-partial") as pool:
        footers = list(pool.map(engine.bind(footer), partials))
    each = []
    for ref, got in zip(partials, footers, strict=True):
        metadata = got.metadata.metadata or {}
        try:
            identity = json.loads(metadata[PARTIAL_KEY])
            stats = json.loads(metadata.get(STATS_KEY, b"{}"))
            named = (identity["run"], identity["query"])
            empty = bool(identity.get("empty", False))
        except (KeyError, ValueError, TypeError):
            raise QueryError(f"{ref.uri}: a partial answer that does not name its run and "
                             "query: nothing is reduced") from None
        if named != (run, query):
            raise QueryError(
                f"{ref.uri}: a partial answer of query {named[1]} in run {named[0]!r}, "
                f"where this reduce is of query {query} in run {run!r} (a batch was run "
                "again with another query?): nothing is reduced")
        each.append({"stats": stats, "empty": empty})
    return each
