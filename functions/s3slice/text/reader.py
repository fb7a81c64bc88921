"""Reading one CSV or JSON object for a query: the whole object in parallel parts (the
first GET learns the size and brings the tail), then parsed by polars with the row filter.

One larger than that first GET is scanned lazily, the filter applied as it is parsed: from
memory when it is at most a quarter of the memory budget (polars parses an in-memory
source on every core), else from a file in /tmp when there is room for it (compressed
content is decompressed into /tmp by streaming). A small one, a scan range or a JSON
document is parsed whole.

What it decodes to is bounded before it is parsed: a line (a record) of a sixteenth of the
memory budget or more is refused, and so is compressed content that expands past a quarter
of the memory budget (parsed in memory) or past the room in /tmp (streamed).
"""

from __future__ import annotations

import polars as pl

from s3slice.core import ranges as _ranges
from s3slice.core.errors import ObjectFormatError
from s3slice.core.model import InputSpec, ObjectRef
from s3slice.fetch.image import FileImage, Image, MemoryImage, read_at
from s3slice.query.analysis import Analysis, collect
from s3slice.readers.base import Io, ObjectResult, Timings
from s3slice.text.bounds import check_lines, check_width, line_limit
from s3slice.text.formats import (
    collect_text,
    decompress,
    decompressed_file,
    detect_compression,
    read_text,
    sampled_schema,
    scan_text,
    streamable,
)


class TextReader:
    """Reads CSV and JSON objects through ``io``, as ``spec`` says."""

    def __init__(self, io: Io, spec: InputSpec) -> None:
        self.io = io
        self.spec = spec

    def read(self, obj: ObjectRef, analysis: Analysis, timings: Timings) -> ObjectResult:
        s, spec = self.io.settings, self.spec
        self.io.deadline()
        with timings.phase("fetch"):
            tail = self.io.fetcher.get_tail(obj, s.footer_size)
        assert tail is not None  # asked with no If-None-Match
        size = tail.size
        tmp_free = s.tmp_free_bytes()
        lazy = len(tail.data) < size and streamable(spec)
        to_tmp = lazy and size > s.memory_budget_bytes // 4 and size * 4 <= tmp_free
        image: Image = FileImage(size, s.tmp_dir) if to_tmp else MemoryImage(size)
        try:
            with timings.phase("fetch"):
                head = size - len(tail.data)
                image.write(head, memoryview(tail.data))
                self.io.fetch(obj, _ranges.parts([(0, head)], s) if head else [], tail.etag,
                              image.write)
            self.io.deadline()
            with timings.phase("execute"):
                with image.source() as f:
                    compression = (detect_compression(read_at(f, 0, min(size, 4)))
                                   if spec.compression == "auto" else spec.compression)
                lazy = lazy and (compression == "none" or size * 4 <= tmp_free)
                max_line = line_limit(s.memory_budget_bytes)
                if lazy:
                    room = tmp_free - (size if to_tmp else 0)
                    with decompressed_file(image.reader_source(), compression, s.tmp_dir,
                                           uri=obj.uri, limit=room) as source:
                        check_lines(source, spec, max_line, uri=obj.uri)
                        check_width(source, spec, uri=obj.uri)
                        frame, rows_in = _streamed(analysis, source, spec, obj.uri)
                else:
                    with image.source() as f:
                        raw = read_at(f, 0, size)
                    data = read_text(decompress(raw, compression, uri=obj.uri,
                                                limit=s.memory_budget_bytes // 4),
                                     spec, uri=obj.uri, max_line=max_line)
                    analysis.needed_columns(data.columns, source=obj.uri)
                    rows_in = data.height
                    frame = collect(analysis.prefilter(data.lazy()))
        finally:
            image.close()
        return ObjectResult(obj=obj, frame=frame, size=size, row_groups=0, row_groups_read=0,
                            rows_in=rows_in, needed_bytes=size, strategy="whole-text",
                            inputs={"object_bytes": size, "format": spec.format,
                                    "compression": compression, "streamed": lazy,
                                    "image": "tmp" if to_tmp else "memory"})


def _streamed(analysis: Analysis, source: str | bytes, spec: InputSpec,
              uri: str) -> tuple[pl.DataFrame, int]:
    """The query's rows of a streamed object, and its rows parsed. A large CSV typed by its
    first rows is read again with every row's types when a later value does not parse as
    them (the types widen, as reading it whole in memory gives)."""
    sampled = sampled_schema(source, spec)
    while True:
        lf = scan_text(source, spec, uri=uri, schema=sampled)
        schema = lf.collect_schema()
        analysis.needed_columns(schema.names(), source=uri)
        try:
            return _counted(analysis, lf, schema, spec, uri)
        except ObjectFormatError:
            if sampled is None:
                raise
            sampled = None


def _counted(analysis: Analysis, lf: pl.LazyFrame, schema: pl.Schema, spec: InputSpec,
             uri: str) -> tuple[pl.DataFrame, int]:
    """The query's rows of a streamed scan, and how many rows were parsed, in one pass:
    polars' streaming engine hands each parsed batch to a counter on its way to the filter
    (a filter past the counter is no longer pushed into the scan; the parse itself is the
    same)."""
    parsed: list[int] = []

    def count(batch: pl.DataFrame) -> pl.DataFrame:
        parsed.append(batch.height)
        return batch
    counted = lf.map_batches(count, streamable=True, schema=schema)
    frame = collect_text(analysis.prefilter(counted), spec, uri=uri, streaming=True)
    return frame, sum(parsed)
