"""Typed settings: defaults, then the environment, then explicit arguments (which win)."""

from __future__ import annotations

import dataclasses
import os
import platform
import shutil
import tempfile
from collections.abc import Callable, Mapping
from typing import Any, Literal, get_args

from s3slice.core.errors import ConfigurationError, RequestError

Strategy = Literal["auto", "ranges", "whole", "batches"]
STRATEGIES: tuple[str, ...] = get_args(Strategy)

MiB = 1024 * 1024
#: A streamed read's bytes fetched ahead, by default: chosen by measurement (seed-004 at
#: 512 and 1,024 MB: the whole plan's warm GB-s, 65 MB less peak RSS; 32 MiB cost more).
READ_AHEAD_DEFAULT = 48 * MiB
Architecture = Literal["arm64", "x86_64"]
ARCHITECTURES: tuple[str, ...] = get_args(Architecture)
#: Lambda's list price per GB-second of duration by architecture, US East, first pricing
#: tier.
LAMBDA_GB_SECOND_PRICES: dict[str, float] = {"arm64": 0.0000133334, "x86_64": 0.0000166667}
#: ``platform.machine()`` on each of Lambda's architectures.
_MACHINES: dict[str, Architecture] = {"aarch64": "arm64", "arm64": "arm64",
                                      "x86_64": "x86_64"}


def _physical_memory_mb() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // MiB)
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 2048


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """Knobs of the engine. Every field has a documented default and an environment name.

    ======================  ===============================  ===================================
    field                   environment                      default
    ======================  ===============================  ===================================
    endpoint_url            AWS_ENDPOINT_URL_S3,             AWS's own endpoint
                            AWS_ENDPOINT_URL
    region                  AWS_REGION, AWS_DEFAULT_REGION   us-east-1
    strategy                S3SLICE_STRATEGY                 auto
    memory_mb               AWS_LAMBDA_FUNCTION_MEMORY_SIZE  the machine's memory (plans the
                                                             budget and concurrency)
    function_memory_mb      AWS_LAMBDA_FUNCTION_MEMORY_SIZE  unknown: the function's configured
                                                             memory, which prices stats.cost
                                                             (set with memory_mb when given)
    architecture            S3SLICE_ARCHITECTURE             on Lambda this machine's, else
                                                             arm64 (the stack's default)
    memory_budget_mb        S3SLICE_MEMORY_BUDGET_MB         60 % of memory_mb
    tmp_dir                 S3SLICE_TMP_DIR                  the system temp dir (/tmp on Lambda)
    footer_size             S3SLICE_FOOTER_SIZE              256 KiB (one suffix GET)
    max_gap                 S3SLICE_MAX_GAP                  64 KiB (coalesce ranges closer)
    part_size               S3SLICE_PART_SIZE                8 MiB (smallest part of a split)
    fill_parts              S3SLICE_FILL_PARTS               8 (fewer parts: cut them further)
    upload_part_size        S3SLICE_UPLOAD_PART_SIZE         32 MiB (a part of a multipart
                                                             upload; S3's least is 5 MiB)
    concurrency             S3SLICE_CONCURRENCY              scaled to memory (8..64)
    read_ahead_mb           S3SLICE_READ_AHEAD_MB            48, at most a quarter of the
                                                             memory budget (a streamed read's
                                                             row groups fetched or decoding)
    small_object_size       S3SLICE_SMALL_OBJECT_SIZE        4 MiB (known size below: one GET)
    whole_object_ratio      S3SLICE_WHOLE_OBJECT_RATIO       0.75 (needed/size above: whole)
    page_index_ratio        S3SLICE_PAGE_INDEX_RATIO         0.8 (page bytes/row-group bytes
                                                             at most: read pages; 0: never)
    footer_cache_mb         S3SLICE_FOOTER_CACHE_MB          64
    request_timeout_s       S3SLICE_REQUEST_TIMEOUT_S        30
    price_gb_second         S3SLICE_PRICE_GB_SECOND          Lambda's list price for the
                                                             function's architecture (arm64
                                                             0.0000133334, x86_64 0.0000166667)
    price_get_per_1000      S3SLICE_PRICE_GET_PER_1000       0.0004 (S3 Standard GET, HEAD)
    price_put_per_1000      S3SLICE_PRICE_PUT_PER_1000       0.005 (S3 Standard PUT, LIST)
    iceberg_allowed_        S3SLICE_ICEBERG_ALLOWED_         none: an Iceberg table's files are
    locations               LOCATIONS                        read only under its location and
                                                             its write.*.path properties; more
                                                             s3:// prefixes, comma-separated, or
                                                             ``*`` for any
    ======================  ===============================  ===================================
    """

    endpoint_url: str | None = None
    region: str = "us-east-1"
    strategy: Strategy = "auto"
    memory_mb: int = 2048
    function_memory_mb: int | None = None
    architecture: Architecture = "arm64"
    memory_budget_mb: int | None = None
    tmp_dir: str = "/tmp"  # noqa: S108 - Lambda's only writable directory
    footer_size: int = 256 * 1024
    max_gap: int = 64 * 1024
    part_size: int = 8 * MiB
    fill_parts: int = 8
    upload_part_size: int = 32 * MiB
    concurrency: int | None = None
    read_ahead_mb: int | None = None
    small_object_size: int = 4 * MiB
    whole_object_ratio: float = 0.75
    page_index_ratio: float = 0.8
    footer_cache_mb: int = 64
    request_timeout_s: float = 30.0
    price_gb_second: float | None = None
    price_get_per_1000: float = 0.0004
    price_put_per_1000: float = 0.005
    iceberg_allowed_locations: str = ""
    #: S3 credentials other than the environment's (a library caller's ``storage_options``
    #: or credential provider): a callable returning obstore's form, ``access_key_id``,
    #: ``secret_access_key``, ``token`` and ``expires_at`` (a datetime or None). Called
    #: again when they expire. Not in the environment: a caller gives it.
    credentials: Callable[[], Mapping[str, Any]] | None = dataclasses.field(default=None,
                                                                            repr=False)

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise RequestError(f"must be one of {', '.join(ARCHITECTURES)}, got "
                               f"{self.architecture!r}", field="architecture")
        if self.function_memory_mb is not None and self.function_memory_mb <= 0:
            raise RequestError("must be positive", field="function_memory_mb")
        if self.strategy not in STRATEGIES:
            raise RequestError(f"must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}",
                               field="strategy")
        for name in ("footer_size", "part_size", "fill_parts", "memory_mb"):
            if getattr(self, name) <= 0:
                raise RequestError("must be positive", field=name)
        if self.max_gap < 0:
            raise RequestError("must not be negative", field="max_gap")
        if self.read_ahead_mb is not None and self.read_ahead_mb <= 0:
            raise RequestError("must be positive", field="read_ahead_mb")
        for prefix in self.iceberg_locations:
            if prefix != "*" and not (prefix.startswith("s3://") and prefix[5:].strip("/")):
                raise RequestError(f"expected s3:// prefixes (comma-separated) or *, got "
                                   f"{prefix!r}", field="iceberg_allowed_locations")
        if self.upload_part_size < 5 * MiB:
            raise RequestError("must be at least 5 MiB, S3's smallest part",
                               field="upload_part_size")

    @property
    def iceberg_locations(self) -> tuple[str, ...]:
        """The prefixes besides a table's own where its files may be read
        (:mod:`s3slice.iceberg.locations`)."""
        return tuple(p for p in (p.strip() for p in self.iceberg_allowed_locations.split(","))
                     if p)

    @property
    def upload_concurrency(self) -> int:
        """Parts of a multipart upload in flight at once: a quarter of the memory budget's
        worth, between 1 and 12."""
        return max(1, min(12, self.memory_budget_bytes // 4 // self.upload_part_size))

    @property
    def memory_budget_bytes(self) -> int:
        """Bytes the engine may hold at once for fetched data."""
        mb = self.memory_budget_mb if self.memory_budget_mb is not None else self.memory_mb * 0.6
        return int(mb * MiB)

    @property
    def read_ahead_bytes(self) -> int:
        """Bytes of a streamed read's row groups held at once, fetched or being decoded
        (one window at least: :mod:`s3slice.parquet.read_ahead`)."""
        if self.read_ahead_mb is not None:
            return self.read_ahead_mb * MiB
        return max(MiB, min(READ_AHEAD_DEFAULT, self.memory_budget_bytes // 4))

    @property
    def max_concurrency(self) -> int:
        """Parallel requests: Lambda's network share grows with memory (and vCPUs with it)."""
        if self.concurrency is not None:
            return max(1, self.concurrency)
        return max(8, min(64, self.memory_mb // 96))

    @property
    def gb_second_price(self) -> float:
        """USD per GB-second of Lambda duration: the setting, else the list price of the
        function's architecture."""
        if self.price_gb_second is not None:
            return self.price_gb_second
        return LAMBDA_GB_SECOND_PRICES[self.architecture]

    def tmp_free_bytes(self) -> int:
        try:
            return shutil.disk_usage(self.tmp_dir).free
        except OSError:
            return 0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``env`` (default ``os.environ``); keyword arguments win."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {
            "region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
            "memory_mb": _physical_memory_mb(),
            "tmp_dir": tempfile.gettempdir(),
        }
        if env.get("AWS_LAMBDA_FUNCTION_NAME"):  # on Lambda, this machine is the function's
            values["architecture"] = _MACHINES.get(platform.machine(), "x86_64")
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
        if endpoint:
            values["endpoint_url"] = endpoint
        for field, (name, cast) in _ENVIRONMENT.items():
            raw = env.get(name)
            if raw is None or raw == "":
                continue
            try:
                values[field] = cast(raw)
            except ValueError:
                raise ConfigurationError(f"cannot read {raw!r} as {cast.__name__}",
                                         variable=name) from None
        given = {k: v for k, v in overrides.items() if v is not None}
        values.update(given)
        if "memory_mb" in given or env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE"):
            # A memory size that was given is the function's; the machine's RAM is not.
            values.setdefault("function_memory_mb", values["memory_mb"])
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise TypeError(f"unknown settings: {', '.join(sorted(unknown))}")
        try:
            return cls(**values)
        except RequestError as e:
            # A value the environment gave is the deployment's fault, not the caller's.
            if e.field in given or e.field not in _ENVIRONMENT:
                raise
            raise ConfigurationError(e.message, variable=_ENVIRONMENT[e.field][0]) from None


#: Each setting read from the environment: its variable and how its text is read.
_ENVIRONMENT: dict[str, tuple[str, type]] = {
    "strategy": ("S3SLICE_STRATEGY", str),
    "memory_mb": ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", int),
    "architecture": ("S3SLICE_ARCHITECTURE", str),
    "memory_budget_mb": ("S3SLICE_MEMORY_BUDGET_MB", int),
    "tmp_dir": ("S3SLICE_TMP_DIR", str),
    "footer_size": ("S3SLICE_FOOTER_SIZE", int),
    "max_gap": ("S3SLICE_MAX_GAP", int),
    "part_size": ("S3SLICE_PART_SIZE", int),
    "fill_parts": ("S3SLICE_FILL_PARTS", int),
    "upload_part_size": ("S3SLICE_UPLOAD_PART_SIZE", int),
    "concurrency": ("S3SLICE_CONCURRENCY", int),
    "read_ahead_mb": ("S3SLICE_READ_AHEAD_MB", int),
    "small_object_size": ("S3SLICE_SMALL_OBJECT_SIZE", int),
    "whole_object_ratio": ("S3SLICE_WHOLE_OBJECT_RATIO", float),
    "page_index_ratio": ("S3SLICE_PAGE_INDEX_RATIO", float),
    "footer_cache_mb": ("S3SLICE_FOOTER_CACHE_MB", int),
    "request_timeout_s": ("S3SLICE_REQUEST_TIMEOUT_S", float),
    "price_gb_second": ("S3SLICE_PRICE_GB_SECOND", float),
    "price_get_per_1000": ("S3SLICE_PRICE_GET_PER_1000", float),
    "price_put_per_1000": ("S3SLICE_PRICE_PUT_PER_1000", float),
    "iceberg_allowed_locations": ("S3SLICE_ICEBERG_ALLOWED_LOCATIONS", str),
}
