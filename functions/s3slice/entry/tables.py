"""Iceberg tables in the Distributed Map workflow. The planning step
(``{"PlanTable": {"source": {"iceberg": ...}, "query", "output", "run"}}``) plans the
table's scan from metadata and writes the planned data files as the map's items, a JSON
array at ``<output>_partials/<run>/items.json`` (for the map's ItemReader), answering
``{"status": "ok", "combines", "items": {"bucket", "key", "count"}, "stats"}`` with the
files and bytes pruned by metadata. A batch of such items (``{"iceberg": metadata,
"snapshot_id", "file"}``) is read as the table's snapshot restricted to its files, with
the delete files that apply to them, and answered by the same partial and reduce steps as
a prefix's batch (:mod:`.workflow`); a query that does not combine rows writes one output
per batch."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from s3slice.answer.run import run as run_request
from s3slice.answer.write import put_all
from s3slice.core.errors import ConfigurationError, RequestError
from s3slice.core.model import Request, parse_output
from s3slice.core.table import TableSource, parse_table_source
from s3slice.engine.engine import Engine
from s3slice.entry import workflow
from s3slice.entry.config import Config, parse_query_config
from s3slice.entry.events import parse_batch_input, parse_run

PLAN_FIELDS = frozenset({"source", "query", "output", "run"})
ITEMS = "items.json"


def plan_table(event: Mapping[str, Any], engine: Engine, cfg: Config, context: Any
               ) -> dict[str, Any]:
    raw = event["PlanTable"]
    if not isinstance(raw, Mapping):
        raise RequestError(f"expected an object, got {type(raw).__name__}", field="PlanTable")
    unknown = set(raw) - PLAN_FIELDS
    if unknown:
        raise RequestError(f"unknown field(s) {sorted(unknown)}", field="PlanTable")
    source = raw.get("source")
    if not isinstance(source, Mapping) or "iceberg" not in source:
        raise RequestError("expected a table: {\"iceberg\": ...}", field="PlanTable.source")
    table = parse_table_source(source)
    query = None
    if raw.get("query") is not None:
        try:
            query = parse_query_config(raw["query"], variable="PlanTable.query")
        except ConfigurationError as e:  # here the event is at fault
            raise RequestError(str(e)) from None
    query, output = cfg.require(what="the workflow's PlanTable step", query=query,
                                output=parse_output(raw.get("output"), field="PlanTable.output"),
                                given_in="PlanTable")
    run = parse_run(raw.get("run"), field="PlanTable.run")
    from s3slice.engine.iceberg_source import plan_items  # only for a table (cold start)

    items, stats = plan_items(engine, table, Request(sources=(table,), query=query))
    _, split = workflow.split_of(query)
    bucket, prefix = workflow.partials_location(output, run)
    key = f"{prefix}{ITEMS}"
    put_all(engine, bucket, [(key, lambda: json.dumps(items).encode())])
    return {"status": "ok", "combines": split is not None,
            "items": {"bucket": bucket, "key": key, "count": len(items)}, "stats": stats}


def _source(items: object) -> TableSource:
    """The table snapshot and files a batch's items name (one snapshot per batch)."""
    if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
        raise RequestError("expected a list of table items", field="Items")
    tables = {(i.get("iceberg"), i.get("snapshot_id")) for i in items}
    if len(tables) != 1:
        raise RequestError(f"a batch reads one table snapshot, got {len(tables)}",
                           field="Items")
    files = [i.get("file") for i in items]
    if not all(isinstance(f, str) for f in files):  # "": no file (a plan that kept none)
        raise RequestError("every table item names its data file", field="Items")
    [(metadata, snapshot)] = tables
    base = parse_table_source({"iceberg": metadata, "snapshot_id": snapshot})
    return TableSource(bucket=base.bucket, key=base.key, snapshot_id=base.snapshot_id,
                       files=tuple(cast(list[str], files)))


def table_batch(event: Mapping[str, Any], engine: Engine, cfg: Config, context: Any
                ) -> dict[str, Any]:
    batch = parse_batch_input(event.get("BatchInput"))
    query, output = cfg.require(what="a Step Functions input", query=batch.query,
                                output=batch.output, given_in="BatchInput")
    source = _source(event.get("Items"))
    if batch.run is not None:
        # the table's files as the batch's one source: its partial is named by them
        partial = workflow.map_batch(cast(Any, [source]), [], query, output, batch.run,
                                     engine)
        if partial is not None:
            return partial
    answer = run_request(Request(sources=(source,), query=query, output=output),
                         engine=engine)
    return answer.to_dict()
