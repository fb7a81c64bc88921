"""The query: parsed and sandboxed SQL (S3 Select's dialect), the pruning predicate, path
expressions, and the split of a combining query into partial and final plans.

Knows nothing of S3, Parquet or Lambda: it imports only the value types and errors.
Its modules:

- ``source``: the names the sandbox is made of (imports nothing).
- ``depth``: how deep a text nests, refused before any parser recurses on it.
- ``paths``: path expressions (``s.b.c``, ``s.tags[0]``), computed as columns (polars).
- ``analysis``: ``Analysis``, what every reader needs of an analysed query (no parser).
- ``analyzer``: ``analyze`` (cached per query): a plain filter by polars' parse, anything
  else by sqlglot's, imported only then; and the query's split.
- ``check``: a query checked without polars, as the CDK does at synth.

And its packages:

- ``pruning/``: the pruning predicate, how statistics judge it, what a scan may be handed.
- ``polars/``: the one way SQL reaches polars; polars' own parse of a plain filter; a
  polars expression as filter text.
- ``sqlglot/``: sqlglot's parse in S3 Select's dialect: the sandbox, parse errors in S3
  Select's terms, path rewriting, the pushdown of WHERE, the analysis of a query.
- ``coercion/``: S3 Select's readings of timestamps, zones and numbers in text.
- ``split/``: a combining query as exact partial and final plans.
"""
