"""The function's engine settings as typed props (``S3SLICE_*`` environment variables).

Each field is one of ``functions/s3slice/core/settings.py``'s knobs; ``None`` leaves the
function's own default (documented there). A test checks every variable name against
that file.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from .settings import SettingsError

#: ``functions/s3slice/core/settings.py``'s strategies (checked by a test).
Strategy = Literal["auto", "ranges", "whole", "batches"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class FunctionSettings:
    """Engine settings of the function; every field keyword-only and optional."""

    #: ``S3SLICE_STRATEGY``: how a Parquet object is read (``auto`` picks per object).
    strategy: Strategy | None = None
    #: ``S3SLICE_MEMORY_BUDGET_MB``: memory the engine plans with (default 60 % of memory).
    memory_budget_mb: int | None = None
    #: ``S3SLICE_CONCURRENCY``: parallel S3 requests (default scaled to memory, 8..64).
    concurrency: int | None = None
    #: ``S3SLICE_READ_AHEAD_MB``: a streamed read's row groups fetched ahead (default 48).
    read_ahead_mb: int | None = None
    #: ``S3SLICE_FOOTER_CACHE_MB``: Parquet footers kept between invocations (default 64).
    footer_cache_mb: int | None = None
    #: ``S3SLICE_REQUEST_TIMEOUT_S``: one S3 request's timeout in seconds (default 30).
    request_timeout_s: float | None = None
    #: ``S3SLICE_PART_SIZE``: the smallest part of a split read, bytes (default 8 MiB).
    part_size: int | None = None
    #: ``S3SLICE_UPLOAD_PART_SIZE``: a multipart upload's part, bytes (default 32 MiB).
    upload_part_size: int | None = None
    #: ``S3SLICE_SMALL_OBJECT_SIZE``: below this known size, one GET (default 4 MiB).
    small_object_size: int | None = None
    #: ``S3SLICE_WHOLE_OBJECT_RATIO``: needed/size above it reads the whole object (0.75).
    whole_object_ratio: float | None = None
    #: ``S3SLICE_PAGE_INDEX_RATIO``: page bytes/row-group bytes at most to read pages (0.8).
    page_index_ratio: float | None = None

    def environment(self) -> dict[str, str]:
        """The set fields as the function's environment variables."""
        env: dict[str, str] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None:
                continue
            if isinstance(value, bool) or (not isinstance(value, str) and value <= 0):
                raise SettingsError(f"FunctionSettings.{field.name}: expected a positive "
                                    f"number, got {value!r}")
            env[f"S3SLICE_{field.name.upper()}"] = str(value)
        return env
