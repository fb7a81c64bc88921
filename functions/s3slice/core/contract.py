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
#: The function stops this long before Lambda's hard timeout (a request, or the next
#: object of a batch, starts only with more time left), so nothing is left half-written: a
#: timeout of this or less fails every invocation.
SAFETY_MARGIN_MS = 3000
#: Under an output location, the folder the map batches' partial answers go to.
PARTIALS = "_partials"
#: The extensions of an output key that names one object, and the format each says.
FILE_EXTENSIONS = {"parquet": "parquet", "csv": "csv", "json": "json", "ndjson": "json",
                   "jsonl": "json"}


def file_format(key: str) -> tuple[str, str | None] | None:
    """The format and compression (``gzip`` for ``.gz``, else None: the format's default)
    an output key names by its extension (``out/result.csv.gz``); None for a key with no
    such extension, which is a prefix."""
    name = key.rpartition("/")[2].lower()
    stem, gzip = (name[:-3], "gzip") if name.endswith(".gz") else (name, None)
    base, dot, ext = stem.rpartition(".")
    fmt = FILE_EXTENSIONS.get(ext) if dot and base else None
    if fmt is None or (gzip and fmt == "parquet"):
        return None
    return fmt, gzip


#: A source key's extensions that name its format (checked after a compression extension).
SOURCE_EXTENSIONS: dict[str, str] = {
    ".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json", ".ndjson": "json",
    ".parquet": "parquet", ".pq": "parquet"}
SOURCE_COMPRESSION_EXTENSIONS = (".gz", ".gzip", ".bz2", ".zst", ".zstd")


def source_format(key: str) -> tuple[str, str]:
    """The format a source key names by its extension (``data.csv.gz`` is CSV; any other
    key is Parquet), and its name less any compression extension (``data.csv``)."""
    name = key.rsplit("/", 1)[-1].lower()
    for ext in SOURCE_COMPRESSION_EXTENSIONS:
        if name.endswith(ext):
            name = name[: -len(ext)]
            break
    dot = name.rfind(".")
    return (SOURCE_EXTENSIONS.get(name[dot:], "parquet") if dot > 0 else "parquet"), name
