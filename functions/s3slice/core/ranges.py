"""Byte ranges of an object: half-open ``(start, end)`` pairs, coalesced, split into
parallel parts, subtracted, and the fetched pieces held for reading back."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable

from s3slice.core.settings import Settings

Range = tuple[int, int]


def coalesce(ranges: Iterable[Range], max_gap: int) -> list[Range]:
    """Sorted ranges with overlaps merged and neighbours closer than ``max_gap`` joined."""
    out: list[Range] = []
    for start, end in sorted(r for r in ranges if r[1] > r[0]):
        if out and start - out[-1][1] <= max_gap:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def split(ranges: Iterable[Range], part_size: int, *, fill: int = 1) -> list[Range]:
    """Each range cut into equal parts of at least ``part_size`` bytes (and under twice that).

    A range shorter than twice ``part_size`` stays one request: a whole row group's column
    chunks are one GET, as in polars' own reader, and only larger ranges are spread over
    parallel connections. When that gives fewer than ``fill`` parts (a read of one or two
    large ranges), the ranges with the longest parts are cut further, into parts of no less
    than ``part_size // 8``, until there are ``fill``: one connection's bandwidth no longer
    bounds such a read.
    """
    spans = [(start, end) for start, end in ranges]
    counts = [max(1, (end - start) // part_size) for start, end in spans]
    floor = max(1, part_size // 8)
    while sum(counts) < fill:
        can = [k for k, (a, b) in enumerate(spans) if (b - a) // (counts[k] + 1) >= floor]
        if not can:
            break
        counts[max(can, key=lambda k: (spans[k][1] - spans[k][0]) / counts[k])] += 1
    out: list[Range] = []
    for (start, end), parts in zip(spans, counts, strict=True):
        step, longer = divmod(end - start, parts)
        a = start
        for i in range(parts):
            b = a + step + (1 if i < longer else 0)
            out.append((a, b))
            a = b
    return out


def parts(ranges: Iterable[Range], settings: Settings) -> list[Range]:
    """``ranges`` split as the settings' knobs say (``part_size``, ``fill_parts``)."""
    return split(ranges, settings.part_size, fill=settings.fill_parts)


def subtract(ranges: Iterable[Range], held: Range) -> list[Range]:
    """``ranges`` less the bytes already ``held``."""
    lo, hi = held
    out: list[Range] = []
    for start, end in ranges:
        if end <= lo or start >= hi:
            out.append((start, end))
            continue
        if start < lo:
            out.append((start, lo))
        if end > hi:
            out.append((hi, end))
    return out


def total(ranges: Iterable[Range]) -> int:
    return sum(end - start for start, end in ranges)


class Held:
    """Fetched byte ranges of one object; any sub-range of one of them can be read back."""

    def __init__(self) -> None:
        self._pieces: dict[int, memoryview] = {}
        self._starts: list[int] = []
        self._lock = threading.Lock()

    def write(self, start: int, data: memoryview) -> None:
        with self._lock:
            if start not in self._pieces:
                bisect.insort(self._starts, start)
            self._pieces[start] = data

    def read(self, r: Range) -> bytes:
        """Bytes ``r`` (half-open), which may span neighbouring pieces."""
        a, b = r
        out: list[memoryview] = []
        k = bisect.bisect_right(self._starts, a) - 1
        pos = a
        while pos < b:
            start = self._starts[k] if 0 <= k < len(self._starts) else -1
            piece = self._pieces.get(start)
            if piece is None or not start <= pos < start + len(piece):
                raise KeyError(f"bytes {pos}-{b} of {a}-{b} were not fetched")
            end = min(b, start + len(piece))
            out.append(piece[pos - start:end - start])
            pos = end
            k += 1
        return b"".join(out)
