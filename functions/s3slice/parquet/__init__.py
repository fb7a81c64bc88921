"""Parquet mechanics: footers, the read plan, page indexes, Bloom filters, decoding.

Pure functions of bytes and footers, plus the reader that fetches and decodes one object
through a :class:`s3slice.fetch.base.Fetcher`. Imports only the shared value types, byte
ranges, the predicate, settings, errors and the fetch interface; never the engine, the
query analysis beyond its predicate, or anything of Lambda.
"""
