"""The names the sandbox is made of, importing nothing (polars, sqlglot or otherwise), so
:mod:`.check` and the CDK's synth-time check share them with the function's analysis."""

from __future__ import annotations

#: The name a query reads its source by, as in S3 Select.
SOURCE_TABLE = "s3object"
#: Name prefixes of functions that read files or URLs (polars SQL's table functions).
FILE_FUNCTION_PREFIXES = ("read_", "scan_")
