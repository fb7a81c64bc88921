"""The query: parsed and sandboxed SQL (S3 Select's dialect), the pruning predicate, path
expressions, and the split of a combining query into partial and final plans.

Knows nothing of S3, Parquet or Lambda: it imports only the value types and errors.
Modules, each importing only those listed before it:

- ``predicate``: the pruning predicate and how statistics judge it.
- ``dialect``: S3 Select's date functions as sqlglot parses them; literal constants.
- ``sql``: parsing, the sandbox, and the names S3 Select gives a SELECT list.
- ``paths``: path expressions, rewritten into columns and computed over the data.
- ``pushdown``: the part of WHERE that becomes the pruning predicate.
- ``analysis``: ``Analysis`` and ``analyze`` (cached per query).
- ``split_sql``, ``split_shape``, ``split_rows``, ``split_aggregate``: the rewriting of a
  combining query into partial and final plans.
- ``split``: the ``Split`` type, its execution, and the split of an analysed query.
"""
