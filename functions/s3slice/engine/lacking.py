"""Objects of a many-object read that lack a column the query names: the column is null
there, typed as in the objects that have it (as a partition column is a constant of its
object, such a column is a null constant of the object that lacks it). A column that no
object has stays an :class:`UnknownColumnError`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import polars as pl

from s3slice.core.errors import UnknownColumnError
from s3slice.core.model import ObjectRef
from s3slice.query.analysis import Analysis
from s3slice.readers.base import ObjectResult

Item: TypeAlias = tuple[ObjectRef, Analysis]
#: Runs a function over items, in parallel, keeping their order.
Run: TypeAlias = Callable[[Callable[[Item], Any], list[Item]], list[Any]]
#: The types an object's own schema gives those of the names it has (none when unknown).
TypesOf: TypeAlias = Callable[[ObjectRef, Sequence[str]], dict[str, pl.DataType]]


def read_all(work: list[Item], one: Callable[[Item], ObjectResult], run: Run,
             types_of: TypesOf) -> list[ObjectResult]:
    """Each object of ``work`` read by ``one`` (through ``run``). Over several objects, one
    that lacks columns the query names is read again with them null; a column no object
    has is the :class:`UnknownColumnError` of an object lacking it."""
    def lenient(item: Item) -> ObjectResult | UnknownColumnError:
        try:
            return one(item)
        except UnknownColumnError as e:
            if len(work) > 1 and e.source == item[0].uri and (
                    set(e.columns) <= item[1].referenced):
                return e
            raise

    first = run(lenient, work)
    lacking = {k: e for k, e in enumerate(first) if isinstance(e, UnknownColumnError)}
    if not lacking:
        return first
    if len(lacking) == len(work):
        nowhere = set.intersection(*(set(e.columns) for e in lacking.values()))
        if nowhere:  # the error of an object lacking just those, if one does
            raise next((e for e in lacking.values() if set(e.columns) == nowhere),
                       next(iter(lacking.values())))
    read = [r for r in first if isinstance(r, ObjectResult)]
    types = _types({c for e in lacking.values() for c in e.columns}, read,
                   [o for o, _ in work], types_of)
    again = [(work[k][0], with_nulls(work[k][1], {c: types[c] for c in e.columns}))
             for k, e in lacking.items()]
    redone = dict(zip(lacking, run(one, again), strict=True))
    return [r if isinstance(r, ObjectResult) else redone[k] for k, r in enumerate(first)]


def with_nulls(analysis: Analysis, types: dict[str, pl.DataType]) -> Analysis:
    """``analysis`` for an object that lacks the columns of ``types``: each a null constant
    of its type, as a partition column is a constant of its object."""
    return analysis.for_object({**analysis.partitions, **dict.fromkeys(types)},
                               {**analysis.partition_types, **types}, pruned=analysis.pruned)


def _types(columns: set[str], read: list[ObjectResult], objects: list[ObjectRef],
           types_of: TypesOf) -> dict[str, pl.DataType]:
    """The type of each of ``columns`` in the objects that have it: as an object's read
    gave it, else by an object's own schema (a Parquet footer, cached by its read), else
    null."""
    types: dict[str, pl.DataType] = {}
    for c in columns:
        types[c] = next((r.frame.schema[c] for r in read
                         if c in r.frame.schema and r.frame.schema[c] != pl.Null), pl.Null())
    for obj in objects:
        unknown = [c for c in sorted(columns) if types[c] == pl.Null]
        if not unknown:
            break
        types.update(types_of(obj, unknown))
    return types
