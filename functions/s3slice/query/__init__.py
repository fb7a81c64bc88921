"""The query: parsed and sandboxed SQL (S3 Select's dialect), the pruning predicate, path
expressions, and the split of a combining query into partial and final plans.

Knows nothing of S3, Parquet or Lambda: it imports only the value types and errors.
"""
