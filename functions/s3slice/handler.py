"""The Lambda entry point: event → route → run → response. Nothing else lives here."""

from __future__ import annotations

from typing import Any

# The engine's native libraries first, from the shallowest frame: imported deep inside the
# service's own package imports, pyarrow's import of numpy (in a venv; the layer has no
# numpy) crossed an interpreter data-stack chunk boundary and allocated and freed ~3,000
# 16 KiB chunks (+0.04 s of system time per cold start, strace -c).
import polars  # noqa: F401
import pyarrow  # noqa: F401

from s3slice.entry.dispatch import config, handle
from s3slice.entry.observe import lambda_entry

# Validate the function's configuration at cold start: a bad deployment fails its init
# with a ConfigurationError naming the variable, before any event is taken.
config()


@lambda_entry
def lambda_handler(event: Any, context: Any) -> dict[str, Any]:
    return handle(event, context)
