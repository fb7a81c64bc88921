"""A planned read handed to polars' own S3 reader: when the plan reads every row group of
the object and nothing but their column chunks, s3slice's fetch would bring polars exactly
the bytes polars fetches itself, at more cost (seed 004's job, one process, warm, MinIO
behind the benchmark's shaping: obstore's GETs of the 20 needed column chunks alone
0.095 CPU s, polars' whole scan, fetch and decode 0.14 to 0.16, and the copy into the image
about 0.04 more; ``tests/benchmark/results/handoff.md``).

The plan still decides and reports: the footer, the statistics, the Bloom filters and the
page index are s3slice's, and the hand-off happens only when they prune nothing polars
would read. The guarantees stay:

- the object is pinned by its ETag: after polars' read, a 4-byte GET from byte 0 with
  ``If-Match`` (the footer's ETag) fails when the object changed since the footer was
  read, and the read restarts (``PreconditionFailed``); the same bytes check the leading
  ``PAR1`` when the first column chunk starts at byte 4, as the ranged fetch does;
- polars decodes with the filter exactly as it does from the image (the decoders'
  choice in :func:`s3slice.parquet.decode.decode`), and only where that choice is polars'
  own (flat columns, no INT96, time zones polars holds, types as the pyarrow path gives);
- when polars fails, the read is done again by the ranged fetch, whose decoders answer
  the object or name what is wrong with it;
- ``stats`` stay truthful: s3slice cannot count polars' requests and bytes, so
  ``requests`` and ``bytes_fetched`` (and the request cost) add to s3slice's own the
  GETs polars makes for the plan (:func:`planned_gets`), and
  ``strategy_inputs.transport`` says ``polars``: those figures are planned.
"""

from __future__ import annotations

import logging

import polars as pl
import pyarrow as pa

from s3slice.core.errors import first_line, is_native_panic
from s3slice.core.model import ObjectRef
from s3slice.core.settings import Settings
from s3slice.parquet import thrift as _thrift
from s3slice.parquet.arrow import foreign_time_zones
from s3slice.parquet.decode import int96_metadata, polars_schema
from s3slice.parquet.footer import HEAD_REACH, MAGIC, Footer, check_head, nested_columns
from s3slice.parquet.plan import Plan
from s3slice.query.analysis import Analysis
from s3slice.readers.base import Io

logger = logging.getLogger("s3slice")

#: The suffix polars' reader fetches first, for the footer.
POLARS_SUFFIX = 256 * 1024


def applies(s: Settings, footer: Footer, plan: Plan, analysis: Analysis, uri: str) -> bool:
    """Whether polars' S3 reader would fetch exactly the plan's bytes and decode them as
    the image's read would: a filtered read of every row group (the page index, when
    there is one, already found no pages to leave out), flat columns polars types as the
    pyarrow path does, and fetched and decoded columns that fit the memory budget together
    (polars holds the fetched chunks while the answer, which may be every row, grows)."""
    md = footer.metadata
    if (s.strategy != "auto" or analysis.pruned or analysis.where is None or plan.fields
            or not plan.columns or md.num_row_groups == 0
            or len(plan.row_groups) != md.num_row_groups):
        return False
    columns = list(plan.columns)
    schema = footer.arrow_schema
    int96 = int96_metadata(footer, uri)
    if (int96 is not None and int96[1] & set(columns)) or nested_columns(md) & set(columns) or (
            foreign_time_zones(pa.schema([schema.field(c) for c in columns]))):
        return False
    index = _thrift.column_positions(md)
    decoded = sum(md.row_group(g).column(index[c]).total_uncompressed_size
                  for g in range(md.num_row_groups) for c in columns)
    if plan.needed_bytes + decoded > s.memory_budget_bytes:
        return False
    # polars fetches a row group's needed chunks in as few GETs as it likes, the other
    # columns' bytes between them too (the tests' server log shows it): the hand-off is
    # only for needed chunks (nearly) side by side, as when the query's columns are.
    if sum(_spans(plan)) - plan.needed_bytes > plan.needed_bytes // 16:
        return False
    return _native_schema(footer, tuple(columns)) == polars_schema(schema, tuple(columns))


def planned_gets(plan: Plan) -> list[int]:
    """The bytes of each GET polars' reader makes for ``plan``: its footer in a suffix of
    :data:`POLARS_SUFFIX` (one more when the footer is longer), then each row group's
    needed chunks and what lies between them. The plan's figures, not counted: the
    tests compare them with what the S3 server saw."""
    footer = plan.footer
    gets = [min(footer.size, POLARS_SUFFIX)]
    if footer.length > POLARS_SUFFIX:
        gets.append(footer.length - POLARS_SUFFIX)
    return gets + _spans(plan)


def _spans(plan: Plan) -> list[int]:
    """Each kept row group's bytes from its first needed chunk to the end of its last."""
    return [max(e for _, e in plan.chunks[g]) - min(a for a, _ in plan.chunks[g])
            for g in plan.row_groups]


def _native_schema(footer: Footer, columns: tuple[str, ...]) -> pl.Schema:
    """The types polars' own reader gives ``columns``, from the footer alone."""
    full = footer.memo.get("polars_native")
    if full is None:
        full = footer.memo.setdefault("polars_native", pl.read_parquet_schema(MAGIC + footer.raw))
    return pl.Schema({c: full[c] for c in columns})


def read(io: Io, obj: ObjectRef, plan: Plan, analysis: Analysis, etag: str,
         location: tuple[str, dict[str, str]]) -> pl.DataFrame | None:
    """The plan's rows, filtered, read by polars from S3 and checked against the object's
    ETag; None when polars failed (the caller reads the object itself). A changed object
    raises ``PreconditionFailed``; a wrong leading magic is an ``ObjectFormatError``."""
    source, options, uri, footer = *location, obj.uri, plan.footer
    try:
        lf = pl.scan_parquet(source, storage_options=options, credential_provider=None,
                             glob=False, hive_partitioning=False).select(list(plan.columns))
        # A scan prunes by statistics: it is handed only what they judge exactly.
        frame = analysis.scanned(lf)
    except BaseException as e:
        if not (isinstance(e, Exception) or is_native_panic(e)):
            raise
        logger.info("polars' S3 reader failed; s3slice fetches the object itself",
                    extra={"uri": uri, "error": first_line(e)})
        return None
    head = bytearray(len(MAGIC))

    def held(start: int, data: memoryview) -> None:
        head[start:start + len(data)] = data

    # If-Match: fails (PreconditionFailed) when the object is not the one the footer was.
    io.fetch(obj, [(0, min(len(MAGIC), footer.size))], etag, held)
    for nbytes in planned_gets(plan):
        io.fetcher.counters.add(nbytes)
    # The ranged fetch checks the magic when the first chunk it reads starts at byte 4.
    first = min(start for g in plan.row_groups for start, _ in plan.chunks[g])
    if first <= HEAD_REACH:
        check_head(memoryview(head), uri)
    return frame
