"""The query by sqlglot's parse in S3 Select's dialect: every SQL query, and the filters
polars' own parse does not cover (paths, qualified names, S3 Select's functions, any
call). sqlglot is imported only by requests that need it. Its modules:

- ``dialect``: S3 Select's date functions as sqlglot parses them into SQL polars runs;
  the constants sqlglot literals stand for.
- ``sql_errors``: a text that does not parse, told in S3 Select's terms.
- ``sql``: parsing and the sandbox (a filter is a condition on columns; a query is one
  SELECT that reads only ``s3object``), and the names S3 Select gives a SELECT list.
- ``path_rewrite``: path expressions (``s.b.c``, ``s.tags[0]``) found in the tree and
  rewritten into the columns :mod:`s3slice.query.paths` computes.
- ``pushdown``: the part of a WHERE condition statistics can judge, as a pruning predicate.
- ``analysis``: a query's :class:`~s3slice.query.analysis.Analysis` from all of the above.

The package is named for the parser it wraps; ``import sqlglot`` in its modules is the
library (imports are absolute).
"""
