"""The split: a query that combines rows across objects (an aggregate, ``GROUP BY``,
``DISTINCT``, ``ORDER BY``, ``LIMIT``), answered exactly as a partial plan per batch and a
final plan over the partials (polars SQL). Its modules, each importing only those listed
before it:

- ``sql``: the sqlglot tree helpers the plans are built with (hidden columns' names,
  ``LIMIT`` and ``OFFSET``, the names polars SQL gives unaliased outputs).
- ``shape``: what a query is to the split (which aggregates have an exact partial form).
- ``types``: exact sums across batches (partial sums in types that cannot wrap).
- ``plan``: :class:`Split` as it runs, polars SQL only, and whether a query combines rows
  at all (:func:`combines_rows`); no sqlglot.
- ``rows``, ``aggregate``: the partial and final plans of a query that keeps rows
  (``DISTINCT``, ``ORDER BY``, ``LIMIT``) and of one that aggregates.
- ``planner``: :func:`split_query`, a query's :class:`Split` planned with sqlglot.

The names below are imported on first use (PEP 562): ``plan`` runs without sqlglot, and a
read that never splits never imports ``planner``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from s3slice.core.lazy import lazy_exports

if TYPE_CHECKING:
    from s3slice.query.split.plan import PARTIALS_TABLE as PARTIALS_TABLE
    from s3slice.query.split.plan import Split as Split
    from s3slice.query.split.plan import combines_rows as combines_rows
    from s3slice.query.split.plan import partial_step as partial_step
    from s3slice.query.split.plan import used_split as used_split
    from s3slice.query.split.planner import split_query as split_query

_LAZY = {
    "PARTIALS_TABLE": "s3slice.query.split.plan", "Split": "s3slice.query.split.plan",
    "combines_rows": "s3slice.query.split.plan", "partial_step": "s3slice.query.split.plan",
    "used_split": "s3slice.query.split.plan", "split_query": "s3slice.query.split.planner",
}


__getattr__ = lazy_exports(__name__, _LAZY, globals())
