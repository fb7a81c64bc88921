"""What one request cost, as AWS bills it: Lambda duration times configured memory times the
GB-second price, plus S3 requests at their tier's price (settings, list prices by
default). The init phase and Lambda's per-invocation charge are not in it: they belong to
the invocation, not to the query.

The duration's price needs the function's configured memory, which only Lambda
(``AWS_LAMBDA_FUNCTION_MEMORY_SIZE``) or the caller (``Settings(memory_mb=...)``, the
command line's ``--memory-mb``) knows. Without it, ``gb_s``, ``lambda_usd`` and ``usd`` are
null (unknown), never computed from this machine's RAM; the S3 requests' price is known."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from s3slice.core.settings import Settings


def cost(settings: Settings, *, duration_ms: float, requests: Mapping[str, int]
         ) -> dict[str, Any]:
    """``stats.cost``: GB-seconds and USD for a request that ran ``duration_ms`` and made
    ``requests`` (counts by price tier: ``get``, ``put``, ``free``)."""
    s3 = (requests.get("get", 0) * settings.price_get_per_1000
          + requests.get("put", 0) * settings.price_put_per_1000) / 1000
    memory_mb = settings.function_memory_mb
    if memory_mb is None:
        return {"gb_s": None, "memory_mb": None, "architecture": settings.architecture,
                "lambda_usd": None, "s3_requests_usd": round(s3, 12), "usd": None}
    gb_s = memory_mb / 1024 * duration_ms / 1000
    compute = gb_s * settings.gb_second_price
    return {"gb_s": round(gb_s, 6), "memory_mb": memory_mb,
            "architecture": settings.architecture, "lambda_usd": round(compute, 12),
            "s3_requests_usd": round(s3, 12), "usd": round(compute + s3, 12)}


def add(total: float | None, part: float | None) -> float | None:
    """A sum of costs: unknown once any part is unknown."""
    return None if total is None or part is None else total + part
