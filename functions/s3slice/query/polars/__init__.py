"""The query by polars itself: the one way SQL text reaches polars, polars' own parse of a
plain filter, and a polars expression read as filter text. Its modules:

- ``sql``: SQL text checked (one lexical reading for every tokenizer) and run over the
  registered frames only, its literals read by the columns' types
  (:mod:`s3slice.query.coercion`).
- ``plain_filter``: a plain filter (comparisons with constants, AND/OR/NOT, IS NULL, IN,
  BETWEEN) analysed by polars' own SQL parser, without sqlglot.
- ``expr``: a polars expression (``read_parquet(filter=pl.Expr)``) as SQL filter text, for
  pruning only.

The package is named for the library it uses; ``import polars`` in its modules is the
library (imports are absolute).
"""
