"""What a read gives back: the frame, the per-object results and the typed stats."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import polars as pl

from s3slice.core.model import ObjectRef
from s3slice.query.analysis import Analysis
from s3slice.readers.base import ObjectResult


@dataclasses.dataclass(frozen=True, kw_only=True)
class Stats:
    """A request's stats: what was read, how, how long each phase took and what it cost.

    :meth:`to_dict` is the ``stats`` of the service's JSON response (the contract).
    """

    #: The counts that add up over objects, over a batch's objects and over batches.
    COUNTS: ClassVar[tuple[str, ...]] = (
        "objects", "objects_pruned", "object_bytes", "row_groups", "row_groups_read",
        "rows_in", "needed_bytes", "bytes_fetched", "requests")

    objects: int = 0
    objects_pruned: int = 0
    object_bytes: int = 0
    row_groups: int = 0
    row_groups_read: int = 0
    rows_in: int = 0
    needed_bytes: int = 0
    bytes_fetched: int = 0
    requests: int = 0
    strategy: str = ""
    strategy_inputs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    rows_out: int = 0
    timings_ms: Mapping[str, float] = dataclasses.field(default_factory=dict)
    cost: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: An Iceberg table's planning: its snapshot, manifests read and pruned, data files
    #: pruned by partition and by column bounds, delete files applied (``iceberg``).
    table: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def of_counts(cls, counts: Mapping[str, int], *, rows_out: int) -> Stats:
        """Stats that hold only counts (a reduce's, summed over its batches)."""
        given: dict[str, Any] = {k: int(counts.get(k, 0)) for k in cls.COUNTS}
        return dataclasses.replace(cls(rows_out=rows_out), **given)

    def counts(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.COUNTS}

    def to_dict(self) -> dict[str, Any]:
        return {**self.counts(), "strategy": self.strategy,
                "strategy_inputs": dict(self.strategy_inputs), "rows_out": self.rows_out,
                "timings_ms": dict(self.timings_ms), "cost": dict(self.cost),
                **({"iceberg": dict(self.table)} if self.table else {})}

    def with_write(self, write_ms: float, cost: Mapping[str, Any]) -> Stats:
        """These stats once the outputs were written in ``write_ms``, at ``cost`` in all."""
        timings = {**self.timings_ms, "write": round(write_ms, 1),
                   "total": round(self.timings_ms.get("total", 0.0) + write_ms, 1)}
        return dataclasses.replace(self, timings_ms=timings, cost=dict(cost))


def summed_counts(each: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """The :attr:`Stats.COUNTS` of several requests (or batches), added up."""
    total = dict.fromkeys(Stats.COUNTS, 0)
    for counts in each:
        for k in Stats.COUNTS:
            total[k] += int(counts.get(k, 0))
    return total


@dataclasses.dataclass(kw_only=True)
class ReadResult:
    """What ``read`` returns: the query's result and how it was obtained."""

    frame: pl.DataFrame
    stats: Stats
    objects: list[ObjectResult]
    analysis: Analysis
    per_object: list[tuple[ObjectRef, pl.DataFrame]] | None = None
    #: The read's requests by S3 price tier (``get``, ``put``, ``free``), for its cost.
    requests_by_tier: dict[str, int] = dataclasses.field(default_factory=dict)
