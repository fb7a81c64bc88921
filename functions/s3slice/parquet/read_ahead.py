"""A streamed read's row groups fetched ahead of their decode, within a bound on the bytes
held: the fetch of the next windows overlaps the decode of this one, and a window's bytes
are let go as soon as its rows are in the sink.

A window is a run of consecutive kept row groups, so that polars decodes it as a slice of
rows; each window lands in an image of its own, freed when its rows have gone to the sink
(a reader still holding a zero-copy view of it keeps it alive: nothing is ever overwritten
under a frame). The windows being fetched, waiting or being decoded hold at most
``limit`` bytes together (one window at least), where a read of the whole plan held every
needed byte until the last was decoded.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from s3slice.core.errors import ObjectError
from s3slice.core.model import ObjectRef
from s3slice.core.ranges import Range
from s3slice.fetch.image import Image, MemoryImage
from s3slice.parquet.footer import reaching_head, under_any
from s3slice.parquet.plan import Plan, chunk_range
from s3slice.readers.base import Io

#: Fetches in flight at once, at most (each its own ``get_ranges`` call, whose parts run
#: in parallel too).
MAX_WINDOWS_IN_FLIGHT = 8


@dataclasses.dataclass(frozen=True)
class Window:
    groups: tuple[int, ...]
    nbytes: int


def windows(sizes: Mapping[int, int], limit: int) -> list[Window]:
    """Kept row groups (index → needed bytes, in file order) as windows: runs of
    consecutive groups of at most half of ``limit`` bytes each (a larger group is a window
    of its own), so that two or more are in flight within ``limit``."""
    target = max(1, limit // 2)
    out: list[Window] = []
    run: list[int] = []
    size = 0
    for g, nbytes in sizes.items():
        if run and (g != run[-1] + 1 or size + nbytes > target):
            out.append(Window(tuple(run), size))
            run, size = [], 0
        run.append(g)
        size += nbytes
    if run:
        out.append(Window(tuple(run), size))
    return out


def fetch_groups(io: Io, obj: ObjectRef, etag: str | None, plan: Plan,
                 groups: Sequence[int] | None = None, *, fill: bool = True) -> Image:
    """A new in-memory image of ``obj`` holding its footer and the needed column chunks of
    ``groups`` (the plan's kept ones by default), fetched in parallel; ``fill`` as in
    :meth:`Plan.fetch_ranges`. The caller closes it."""
    footer = plan.footer
    check_planned(plan, plan.row_groups if groups is None else groups, obj.uri)
    image = MemoryImage(footer.size)
    try:
        image.write(footer.data_end, memoryview(footer.raw))
        ranges: list[Range] = plan.fetch_ranges(
            io.settings, row_groups=groups, held=(footer.data_end, footer.size), fill=fill)
        # A fetch of the first row group's first chunk starts at byte 0: the leading magic
        # is checked for 4 bytes more.
        ranges, sink = reaching_head(ranges, image.write, obj.uri)
        io.fetch(obj, ranges, etag, sink)
    except BaseException:
        image.close()
        raise
    return image


def check_planned(plan: Plan, groups: Sequence[int], uri: str) -> None:
    """Every column chunk the decoders may read for ``plan`` in ``groups`` is one the plan
    fetches; else :class:`ObjectError`, before any fetch. An image is zeros where nothing was
    fetched, and zeros decode as a corrupt page header at best, as values at worst.

    The decoders' own rules, not the planner's: polars reads a column by its top-level
    name, every leaf of it (a top-level name may hold a dot: ``user.id``); pyarrow reads
    the leaves under each read name's dotted path (``user.id`` is also the ``id`` of a
    struct ``user``).
    """
    footer = plan.footer
    md = footer.metadata
    leaves = _decoded_leaves(plan)
    for g in groups:
        have = set(plan.chunks.get(g, ()))
        for i in leaves:
            if chunk_range(md, g, i, footer=footer, uri=uri) not in have:
                raise ObjectError(
                    f"column {md.schema.column(i).path!r} of row group {g} would be decoded "
                    "but its bytes are not in the read's plan; nothing unfetched is decoded",
                    uri=uri)


def _decoded_leaves(plan: Plan) -> list[int]:
    """The leaf columns the decoders may read for ``plan``'s columns (once per footer and
    selection: every window and batch of a read asks)."""
    footer, reads = plan.footer, frozenset(plan.read_columns)
    memo: dict[tuple[Any, ...], list[int]] = footer.memo.setdefault("decoded_leaves", {})
    key = (plan.columns, tuple(sorted(reads)), tuple(sorted(plan.fields)))
    leaves = memo.get(key)
    if leaves is None:
        if len(memo) >= 64:  # kept with a cached footer: a bound on the selections kept
            memo.clear()
        md, tops, columns = footer.metadata, footer.leaf_tops, set(plan.columns)
        leaves = memo.setdefault(key, [
            i for i in range(md.num_columns)
            if (tops[i] in columns and tops[i] not in plan.fields)
            or under_any(md.schema.column(i).path, reads)])
    return leaves


class ReadAhead:
    """Fetches ``windows`` of ``plan`` in order, each into its own image, keeping fetches
    running ahead of the consumer within ``limit`` bytes: :meth:`take` each window in
    turn, :meth:`release` it once its rows are in the sink, and :meth:`close` at the end
    (also after a failure)."""

    def __init__(self, io: Io, obj: ObjectRef, etag: str | None, plan: Plan,
                 windows: Sequence[Window], limit: int) -> None:
        self._io = io
        self._obj = obj
        self._etag = etag
        self._plan = plan
        self._windows = list(windows)
        self._limit = limit
        workers = max(1, min(MAX_WINDOWS_IN_FLIGHT, len(self._windows)))
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="s3slice-ahead")
        self._pending: deque[tuple[Window, Future[Image]]] = deque()
        self._next = 0
        self._held = 0

    def _fetch(self, window: Window) -> Image:
        # The windows in flight are the parallel requests: a window's ranges are not cut
        # further to fill connections (a request each is priced).
        return fetch_groups(self._io, self._obj, self._etag, self._plan, window.groups,
                            fill=False)

    def _fill(self) -> None:
        while self._next < len(self._windows) and len(self._pending) < MAX_WINDOWS_IN_FLIGHT:
            window = self._windows[self._next]
            if self._pending and self._held + window.nbytes > self._limit:
                return
            self._pending.append((window, self._pool.submit(self._fetch, window)))
            self._held += window.nbytes
            self._next += 1

    def take(self) -> tuple[Window, Image] | None:
        """The next window with its image, once fetched (a failed fetch raises here); None
        after the last. The caller gives it back with :meth:`release`."""
        self._fill()
        if not self._pending:
            return None
        window, future = self._pending[0]
        image = future.result()
        self._pending.popleft()
        return window, image

    def release(self, window: Window, image: Image) -> None:
        """A window's rows are in the sink: its image goes, and the fetches behind it may
        run."""
        image.close()
        self._held -= window.nbytes

    def close(self) -> None:
        """Stop: windows not yet started are dropped, the running ones are waited for (no
        request outlives the read), and every image fetched is let go."""
        self._next = len(self._windows)
        self._pool.shutdown(wait=True, cancel_futures=True)
        while self._pending:
            _, future = self._pending.popleft()
            if not future.cancelled() and future.exception() is None:
                future.result().close()
