"""Pruning: what statistics (a row group's, a page's, a partition's, a Bloom filter's) may
judge of a filter. Its modules, each importing only those listed before it:

- ``bounds``: polars' own comparisons of column values with a constant's SQL text, in the
  column's own type.
- ``predicate``: the small predicate language the filters become, and its evaluation
  against column statistics (SQL's three values, over-approximated).
- ``scan_safe``: what of a row filter a reader that prunes by statistics (polars' Parquet
  scan) may be handed: comparisons of bare columns with constants only.

The predicate is made by each parser's analysis (:mod:`s3slice.query.sqlglot.pushdown`,
:mod:`s3slice.query.polars.plain_filter`).
"""
