"""Names the function and its deployment agree on: the one source of truth.

Standard library only, so the CDK app loads this file by path (as it loads the error
tree) without polars or the rest of the function package.
"""

from __future__ import annotations

from typing import Literal, get_args

OutputFormat = Literal["parquet", "csv", "json"]
#: The formats an output may be written in.
OUTPUT_FORMATS: tuple[str, ...] = get_args(OutputFormat)
#: The fields of a query given as JSON (the deployment's default query, a workflow's query).
QUERY_FIELDS = frozenset({"sql", "columns", "filter", "limit"})
#: Fields a Step Functions ``BatchInput`` may carry.
BATCH_INPUT_FIELDS = frozenset({"bucket", "query", "output", "run"})
#: Fields of the reduce step's ``{"Reduce": {...}}`` event.
REDUCE_FIELDS = frozenset({"run", "query", "output", "batches"})
#: Fields of the workflow's ``{"Check": {...}}`` event, sent before the map starts.
CHECK_FIELDS = frozenset({"query", "output"})
#: Under an output location, the folder the map batches' partial answers go to.
PARTIALS = "_partials"
