"""Side-by-side benchmark of the read service against its peers.

Not part of the default test run: no module here is named like a pytest test file.
Start it with ``.venv/bin/python -m tests.benchmark.run --scale 0.1`` (see README.md).
"""
