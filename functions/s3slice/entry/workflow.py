"""One answer over a whole prefix: partial answers per map batch, then one reduce step.

A query that combines objects (an aggregate, ``GROUP BY``, ``DISTINCT``, ``ORDER BY``,
``LIMIT``) is split (:mod:`._split`) into a partial plan and a final plan. In the
Distributed Map workflow each batch, given the execution's name as ``BatchInput.run``,
reads its objects as one many-object read, applies the partial plan and writes the
partial frame as Parquet under ``<output uri>_partials/<run>/`` (named by the batch's
objects, so a retried batch overwrites its own), returning ``{"status": "ok", "partial":
uri, "stats": ...}``. The reduce step (``{"Reduce": {"run", "query", "output",
"batches"}}``) reads every partial of the run with the engine, refuses when there are
fewer or more than ``batches`` of them (a failed batch never yields a reduced answer over
missing data), applies the final plan, writes ``<output uri>combined.<hash>.<ext>``,
deletes the partials and answers as a direct invoke does, its stats summed over the
batches (each partial carries its batch's stats in its Parquet metadata). A partial that
cannot be deleted is named in ``partials_left``; the answer stands. A map that ran no
batch (no objects listed) has no answer to reduce: a typed ``ObjectNotFoundError``.

A query that does not combine objects keeps per-object outputs; its reduce answers
``{"status": "ok", "reduced": false, "outputs": []}``.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow.parquet as pq

from s3slice._errors import ConfigurationError, ObjectNotFoundError, RequestError, S3SliceError
from s3slice._model import ObjectRef, OutputSpec, Query, Request, SourceSpec, parse_output
from s3slice._output import output_key, put_all, serialize
from s3slice.contract import CHECK_FIELDS, PARTIALS, REDUCE_FIELDS
from s3slice.engine.engine import Engine
from s3slice.engine.results import Stats, summed_counts
from s3slice.entry.config import Config, parse_query_config
from s3slice.entry.events import parse_run
from s3slice.entry.observe import logger, record_stats
from s3slice.parquet.footer import parse_footer
from s3slice.query.analysis import Analysis
from s3slice.query.analyzer import analyze, split_for
from s3slice.query.split_plan import Split, partial_step

#: The Parquet metadata key a partial's batch stats travel in.
STATS_KEY = b"s3slice.batch_stats"
#: A partial's footer is small: one suffix GET of this many bytes holds it.
STATS_READ = 256 * 1024

def split_of(query: Query) -> tuple[Analysis, Split | None]:
    """The query analysed, and its split (None when it does not combine objects)."""
    analysis = analyze(query)
    return analysis, split_for(analysis)


def partials_location(output: OutputSpec, run: str) -> tuple[str, str]:
    """(bucket, key prefix) of a run's partials."""
    return output.bucket, f"{output.prefix}{PARTIALS}/{run}/"


def map_batch(objects: Sequence[ObjectRef], query: Query, output: OutputSpec, run: str,
              engine: Engine) -> dict[str, Any] | None:
    """A map batch's partial answer, written for the reduce; None when the query does not
    combine objects (the batch keeps per-object outputs)."""
    analysis, split = split_of(query)
    if split is None:
        return None
    result = engine.read(Request(sources=tuple(objects), query=query),
                         finish=functools.partial(partial_step, analysis, split))
    bucket, prefix = partials_location(output, run)
    names = "\n".join(sorted(o.uri for o in objects))
    key = f"{prefix}batch-{hashlib.sha256(names.encode()).hexdigest()[:24]}.parquet"
    table = result.frame.to_arrow()
    table = table.replace_schema_metadata({
        **(table.schema.metadata or {}),
        STATS_KEY: json.dumps(result.stats.counts()).encode()})

    def parquet() -> bytes:
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        return buf.getvalue()
    put_all(engine, bucket, [(key, parquet)])
    record_stats(result.stats)
    return {"status": "ok", "partial": f"s3://{bucket}/{key}",
            "stats": {**result.stats.counts(), "rows_out": result.frame.height,
                      "cost": dict(result.stats.cost)}}


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
    found = [o for o in engine.fetcher.list_objects(bucket, prefix)
             if o.key.endswith(".parquet")]
    if batches == 0:
        raise ObjectNotFoundError(
            f"the map of run {run!r} ran no batch (no objects were listed): there is no "
            "answer to reduce", uri=f"s3://{bucket}/{prefix}")
    if len(found) != batches:
        raise ObjectNotFoundError(
            f"{len(found)} partial answer(s) of run {run!r} where the map ran {batches} "
            "batch(es): a batch failed or is missing; nothing is reduced",
            uri=f"s3://{bucket}/{prefix}")
    result = engine.read(Request(sources=tuple(found), query=Query()),
                         finish=lambda lf: split.final([lf]))
    # combined.<hash of the query and the run's partials' location>: one key per run.
    key = output_key(output, Request(sources=(SourceSpec(bucket=bucket, key=prefix),),
                                     query=query, output=output), None)
    counts = _summed(found, engine)
    [size] = put_all(engine, output.bucket, [(key, lambda: serialize(result.frame, output))])
    left = _delete(engine, found)
    record_stats(Stats.of_counts(counts, rows_out=result.frame.height))
    return {"status": "ok", "outputs": [{"uri": f"s3://{output.bucket}/{key}",
                                         "rows": result.frame.height, "bytes": size,
                                         "format": output.format}],
            **({"partials_left": left} if left else {}),
            "stats": {**counts, "rows_out": result.frame.height,
                      "reduce": result.stats.to_dict()}}


def _delete(engine: Engine, partials: Sequence[ObjectRef]) -> list[str]:
    """Delete the run's partials once its answer is written; the URIs of those that could
    not be. The answer stands either way: failing here would have the workflow retry a
    reduce whose partials are partly gone, and refuse an answer already written."""
    left: list[str] = []
    for ref in partials:
        try:
            engine.fetcher.delete(ref.bucket, ref.key)
        except S3SliceError as e:
            logger.warning("partial answer not deleted", extra={"uri": ref.uri,
                                                                "error": e.to_dict()})
            left.append(ref.uri)
    return left


def _summed(partials: Sequence[ObjectRef], engine: Engine) -> dict[str, int]:
    """The batches' stats, summed, from each partial's Parquet metadata (its footer, from
    the footer cache or one suffix GET)."""
    each = []
    for ref in partials:
        cached = engine.footers.newest(ref)
        if cached is not None:
            metadata = cached[1].metadata.metadata
        else:
            tail = engine.fetcher.get_tail(ref, STATS_READ)
            assert tail is not None
            metadata = parse_footer(tail.data, size=tail.size, uri=ref.uri).metadata.metadata
        each.append(json.loads((metadata or {}).get(STATS_KEY, b"{}")))
    return summed_counts(each)
