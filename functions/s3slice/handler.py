"""The Lambda entry point: event → route → run → response. Nothing else lives here."""

from __future__ import annotations

from typing import Any

from s3slice.entry.dispatch import config, handle
from s3slice.entry.observe import lambda_entry

# Validate the function's configuration at cold start: a bad deployment fails its init
# with a ConfigurationError naming the variable, before any event is taken.
config()


@lambda_entry
def lambda_handler(event: Any, context: Any) -> dict[str, Any]:
    return handle(event, context)
