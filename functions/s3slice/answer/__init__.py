"""A request answered: ``run`` reads it through the engine and writes its answer
(``write``: outputs with deterministic keys, rows inline, rolled back on failure), in text by
``textual`` or as Parquet streamed through ``spool``; ``frames`` answers in polars'
vocabulary (``read_parquet``). Imports the engine and the shared values; never ``entry``.
"""
