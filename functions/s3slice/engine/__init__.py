"""The engine: resolves a request's sources, reads each object with the reader of its
format on a thread pool, runs the query's final step and returns the frame with its stats.

Imports the format readers (``parquet``, ``text``), ``query``, ``fetch`` and the value
types; never ``entry`` (Lambda) nor the output writer.
"""
