"""The Lambda entry point: event → Request → run → Response. Nothing else lives here."""

from __future__ import annotations

from typing import Any

from ._entry import handle


def lambda_handler(event: Any, context: Any) -> dict[str, Any]:
    return handle(event, context)
