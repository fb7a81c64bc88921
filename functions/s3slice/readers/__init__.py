"""What every format reader gives the engine (``base``: ``Io``, ``Timings``,
``ObjectResult``, ``ObjectReader``). The readers themselves are ``parquet/`` and ``text/``.
"""
