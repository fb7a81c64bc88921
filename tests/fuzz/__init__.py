"""A differential fuzzer: random tables written by several Parquet writers, random filters
and aggregates in the service's dialect, the service's answer against polars' in-memory
evaluation and DuckDB's on the same file (:mod:`tests.fuzz.runner`).

``python -m tests.fuzz --seconds 480`` runs with a fresh seed; every difference is printed
with the case seed that replays it (``python -m tests.fuzz --replay SEED``).
"""
