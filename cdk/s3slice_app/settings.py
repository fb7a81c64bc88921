"""The repository stack's settings, validated: every CDK context key (``context``) mapped
onto the constructs' props by ``S3SliceStack``. The keys, their defaults and the rules on
prefixes and SnapStart are in ``context``'s docstring."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from s3slice_cdk.contract import SAFETY_MARGIN_MS
from s3slice_cdk.settings import (
    ARCHITECTURES,
    KEY_CHARACTERS,
    OUTPUT_FORMATS,
    PYTHON_VERSIONS,
    QUERY_FIELDS,
    SNAPSTART_MAX_EPHEMERAL_STORAGE_MB,
    SNAPSTART_PYTHON_VERSIONS,
    Architecture,
    OutputFormat,
    SettingsError,
    is_glue_table,
)

from .context import EMPTY_ALLOWED, PARSERS, REPO_DIR, S3Location, context_key, parse_str

#: Where ``python layers/build.py --arch <arch>`` puts the layer.
LAYER_BUILD_ROOT = REPO_DIR / "layers" / "build"

_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_TOPIC_ARN = re.compile(r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}(\.fifo)?$")
#: A KMS key ARN (not an alias: IAM matches the key's ARN, never an alias's).
_KEY_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]{1,128}$")
_ACCOUNT = re.compile(r"^\d{12}$")
_EMAIL = re.compile(r"^[^@\s,]+@[^@\s,]+\.[^@\s,]+$")
#: Lambda keeps this much of the account's concurrency unreserved.
UNRESERVED_MINIMUM = 100
#: The Distributed Map's MaxConcurrency when not given, if the concurrency budget allows.
DEFAULT_WORKFLOW_MAX_CONCURRENCY = 100


@dataclasses.dataclass(frozen=True, kw_only=True)
class StackSettings:
    """Validated settings. ``context``'s docstring has the context keys and defaults."""

    source_bucket: str | None = None
    source_prefix: str = "incoming/"
    source_suffixes: tuple[str, ...] = (".parquet", ".csv", ".json", ".jsonl", ".ndjson")
    read_uris: tuple[S3Location, ...] = ()
    allow_whole_bucket_reads: bool = False
    #: Glue Data Catalog tables (``database.table``) whose metadata location the function may
    #: look up (``{"iceberg": {"glue": ...}}``); their files must lie in a readable location.
    glue_tables: tuple[str, ...] = ()
    kms_key_arns: tuple[str, ...] = ()
    bucket_accounts: tuple[str, ...] = ()
    output_bucket: str | None = None
    output_prefix: str = "results/"
    output_format: OutputFormat = "parquet"
    query: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    memory_size: int = 3008
    ephemeral_storage_size: int = 4096
    timeout_seconds: int = 300
    architecture: Architecture = "arm64"
    python_version: str = "3.13"
    reserved_concurrency: int | None = None
    account_concurrency: int = 1000
    log_retention_days: int = 30
    layer_dir: Path | None = None
    batch_size: int = 10
    max_batching_window_seconds: int = 0
    max_receive_count: int = 3
    event_source_max_concurrency: int = 10
    #: ``None``: ``DEFAULT_WORKFLOW_MAX_CONCURRENCY``, or less to fit (``workflow_concurrency``).
    workflow_max_concurrency: int | None = None
    workflow_items_per_batch: int = 10
    workflow_tolerated_failure_percentage: float = 5
    workflow_results_prefix: str = "workflow-results/"
    workflow_timeout_hours: int = 24
    alarm_topic_arn: str | None = None
    alarm_email: str | None = None
    noncurrent_version_days: int = 30
    duration_alarm_ratio: float = 0.8
    nag: bool = True
    #: Lambda SnapStart on published versions; every trigger invokes the alias ``live``.
    snap_start: bool = False

    def __post_init__(self) -> None:
        self._validate()

    # ----------------------------------------------------------------- derived values
    @property
    def watched(self) -> S3Location:
        """The location whose new objects trigger the function."""
        return S3Location(bucket=self.source_bucket, prefix=self.source_prefix)

    @property
    def output(self) -> S3Location:
        bucket = self.output_bucket if self.output_bucket is not None else self.source_bucket
        return S3Location(bucket=bucket, prefix=self.output_prefix)

    @property
    def workflow_results(self) -> S3Location:
        return S3Location(bucket=self.output.bucket, prefix=self.workflow_results_prefix)

    @property
    def read_locations(self) -> tuple[S3Location, ...]:
        """Everything the function may read: the watched location first, then readUris."""
        return (self.watched, *self.read_uris)

    @property
    def concurrency_budget(self) -> tuple[int, str]:
        """What the function can run at once, and the setting that says so: its reserved
        concurrency when given, else the account's quota."""
        if self.reserved_concurrency is not None:
            return self.reserved_concurrency, "reservedConcurrency"
        return self.account_concurrency, "accountConcurrency"

    @property
    def workflow_concurrency(self) -> int:
        """The Distributed Map's MaxConcurrency: the setting, else 100 or whatever less the
        budget leaves beside the queue's cap."""
        if self.workflow_max_concurrency is not None:
            return self.workflow_max_concurrency
        budget, _ = self.concurrency_budget
        return max(1, min(DEFAULT_WORKFLOW_MAX_CONCURRENCY,
                          budget - self.event_source_max_concurrency))

    @property
    def resolved_layer_dir(self) -> Path:
        if self.layer_dir is not None:
            return self.layer_dir
        return LAYER_BUILD_ROOT / self.architecture

    @property
    def queue_visibility_timeout_seconds(self) -> int:
        """Six times the function timeout (AWS's advice), plus the batching window."""
        return 6 * self.timeout_seconds + self.max_batching_window_seconds

    # ----------------------------------------------------------------- validation
    def _validate(self) -> None:
        for name in ("source_bucket", "output_bucket"):
            value = getattr(self, name)
            if value is not None and not _BUCKET_NAME.match(value):
                raise SettingsError(f"{context_key(name)}: {value!r} is not a valid S3 bucket name")
        for location in self.read_uris:
            if location.bucket is None or not _BUCKET_NAME.match(location.bucket):
                raise SettingsError(f"readUris: {location.bucket!r} is not a valid bucket name")
        _check_characters(self)
        for name in self.glue_tables:
            if not is_glue_table(name):
                raise SettingsError(
                    f"glueTables: {name!r} is not 'database.table' (a Glue database's and "
                    "table's names, each of lowercase letters, digits, '_' and '-', joined "
                    "by one '.')")
        for arn in self.kms_key_arns:
            if not _KEY_ARN.match(arn):
                raise SettingsError(
                    f"kmsKeyArns: {arn!r} is not a KMS key ARN "
                    "(arn:aws:kms:<region>:<account>:key/<key id>; aliases are not accepted, "
                    "since IAM matches the key's ARN)")
        for account in self.bucket_accounts:
            if not _ACCOUNT.match(account):
                raise SettingsError(f"bucketAccounts: {account!r} is not a 12-digit account id")
        if self.alarm_email is not None and not _EMAIL.match(self.alarm_email):
            raise SettingsError(f"alarmEmail: {self.alarm_email!r} is not an e-mail address")
        _check_range("memory_size", self.memory_size, 128, 10240)
        _check_range("ephemeral_storage_size", self.ephemeral_storage_size, 512, 10240)
        _check_range("timeout_seconds", self.timeout_seconds,
                     SAFETY_MARGIN_MS // 1000 + 1, 900)
        _check_range("log_retention_days", self.log_retention_days, 1, 3653)
        _check_range("batch_size", self.batch_size, 1, 10000)
        _check_range("max_batching_window_seconds", self.max_batching_window_seconds, 0, 300)
        _check_range("max_receive_count", self.max_receive_count, 1, 1000)
        if self.workflow_max_concurrency is not None:
            _check_range("workflow_max_concurrency", self.workflow_max_concurrency, 1, 10000)
        _check_range("workflow_timeout_hours", self.workflow_timeout_hours, 1, 8760)
        _check_range("noncurrent_version_days", self.noncurrent_version_days, 1, 3650)
        _check_range("account_concurrency", self.account_concurrency, 10, 10_000_000)
        _check_range("workflow_items_per_batch", self.workflow_items_per_batch, 1, 10000)
        _check_range("workflow_tolerated_failure_percentage",
                     self.workflow_tolerated_failure_percentage, 0, 100)
        _check_range("duration_alarm_ratio", self.duration_alarm_ratio, 0.05, 1)
        if self.reserved_concurrency is not None:
            _check_range("reserved_concurrency", self.reserved_concurrency, 0, 100000)
        _check_range("event_source_max_concurrency", self.event_source_max_concurrency, 2, 1000)
        if self.batch_size > 10 and self.max_batching_window_seconds == 0:
            raise SettingsError("batchSize: more than 10 messages per batch needs "
                                "maxBatchingWindowSeconds > 0 (an SQS event source rule)")
        if self.queue_visibility_timeout_seconds > 43200:
            raise SettingsError("timeoutSeconds/maxBatchingWindowSeconds: the queue's visibility "
                                "timeout (6 x timeout + window) would exceed SQS's 12 hours")
        if self.architecture not in ARCHITECTURES:
            raise SettingsError(f"architecture: must be one of {', '.join(ARCHITECTURES)}, "
                                f"got {self.architecture!r}")
        if self.python_version not in PYTHON_VERSIONS:
            raise SettingsError(f"pythonVersion: must be one of {', '.join(PYTHON_VERSIONS)}, "
                                f"got {self.python_version!r}")
        if self.output_format not in OUTPUT_FORMATS:
            raise SettingsError(f"outputFormat: must be one of {', '.join(OUTPUT_FORMATS)}, "
                                f"got {self.output_format!r}")
        unknown = set(self.query) - QUERY_FIELDS
        if unknown:
            raise SettingsError(f"query: unknown keys {sorted(unknown)}; "
                                f"allowed: {sorted(QUERY_FIELDS)}")
        from s3slice_cdk.query_check import check_query
        check_query(self.query, "settings")
        if self.alarm_topic_arn is not None and not _TOPIC_ARN.match(self.alarm_topic_arn):
            raise SettingsError(f"alarmTopicArn: {self.alarm_topic_arn!r} is not an SNS topic ARN")
        for prefix_name in ("output_prefix", "workflow_results_prefix"):
            if not getattr(self, prefix_name).endswith("/"):
                raise SettingsError(f"{context_key(prefix_name)}: must be a prefix ending with '/'")
        for name, prefix in (("sourcePrefix", self.source_prefix),
                             *(("readUris", r.prefix) for r in self.read_uris)):
            if prefix and not prefix.endswith("/"):
                raise SettingsError(f"{name}: {prefix!r} must end with '/' (or be empty)")
        _check_suffixes(self)
        _check_no_recursion(self)
        _check_read_uris(self)
        _check_concurrency(self)
        _check_snap_start(self)

    # ----------------------------------------------------------------- from context
    @classmethod
    def from_context(cls, get: Callable[[str], Any]) -> StackSettings:
        """Read every setting with ``get(key)`` (e.g. ``app.node.try_get_context``)."""
        kwargs: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            raw = get(context_key(field.name))
            if raw is None or (raw == "" and field.name not in EMPTY_ALLOWED):
                continue
            parse: Callable[[str, Any], Any] = PARSERS.get(field.name, parse_str)
            kwargs[field.name] = parse(field.name, raw)
        return cls(**kwargs)


def _check_characters(s: StackSettings) -> None:
    """No IAM wildcard, policy variable or URL-encoded character in a key setting."""
    values = [("sourcePrefix", s.source_prefix), ("outputPrefix", s.output_prefix),
              ("workflowResultsPrefix", s.workflow_results_prefix),
              *(("sourceSuffixes", suffix) for suffix in s.source_suffixes),
              *(("readUris", location.uri) for location in s.read_uris)]
    for name, value in values:
        text = value.removeprefix("s3://") if name == "readUris" else value
        bad = sorted(set(text) - KEY_CHARACTERS)
        if bad:
            raise SettingsError(
                f"{name}: {value!r} contains {' '.join(repr(c) for c in bad)}. IAM reads "
                "'*' and '?' as wildcards and '${...}' as a policy variable in the ARNs "
                "and conditions granted (so a prefix with them grants more than it "
                "names), and S3 wants other characters URL-encoded; use only letters, "
                "digits and / ! - _ . ' ( ) =")


def _check_read_uris(s: StackSettings) -> None:
    """readUris never overlap the output, and name a whole bucket only when allowed."""
    for location in s.read_uris:
        if location.overlaps(s.output):
            raise SettingsError(
                f"readUris: {location.uri} overlaps the output location "
                f"{s.output.uri}: the function could read what it writes. Choose a "
                "readUris prefix outside outputPrefix, or another outputBucket.")
        if not location.prefix and not s.allow_whole_bucket_reads:
            raise SettingsError(
                f"readUris: {location.uri} names the whole bucket {location.bucket}. Give "
                "a prefix (s3://bucket/prefix/), or set allowWholeBucketReads=true to "
                "grant reading every object in it.")


def _check_concurrency(s: StackSettings) -> None:
    """What the function may run at once fits what it, and the account, can run."""
    reserved = s.reserved_concurrency
    ceiling = s.account_concurrency - UNRESERVED_MINIMUM
    if reserved is not None and reserved > ceiling:
        raise SettingsError(
            f"reservedConcurrency: {reserved} exceeds accountConcurrency "
            f"({s.account_concurrency}) minus the {UNRESERVED_MINIMUM} Lambda keeps "
            "unreserved; lower it, or set accountConcurrency to the account's quota")
    if reserved == 0:
        return  # the function is switched off: nothing runs, nothing to bound
    budget, budget_key = s.concurrency_budget
    total = s.event_source_max_concurrency + s.workflow_concurrency
    if total > budget:
        raise SettingsError(
            f"eventSourceMaxConcurrency + workflowMaxConcurrency: "
            f"{s.event_source_max_concurrency} + {s.workflow_concurrency} = "
            f"{total} concurrent executions exceed {budget_key} ({budget}): the queue "
            "and the workflow at full speed would be throttled (queue messages would "
            "count receives towards the dead-letter queue). Lower either, or raise "
            f"{budget_key}.")


def _check_snap_start(s: StackSettings) -> None:
    """SnapStart only where Lambda offers it: Python 3.12+ and at most 512 MB of /tmp."""
    if not s.snap_start:
        return
    if s.python_version not in SNAPSTART_PYTHON_VERSIONS:
        raise SettingsError(
            f"pythonVersion: {s.python_version} cannot be used with snapStart=true: "
            "Lambda SnapStart supports the Python runtimes "
            f"{', '.join(SNAPSTART_PYTHON_VERSIONS)} only. Set pythonVersion=3.12 or "
            "later (and build the layer for it), or snapStart=false.")
    if s.ephemeral_storage_size > SNAPSTART_MAX_EPHEMERAL_STORAGE_MB:
        raise SettingsError(
            f"ephemeralStorageSize: {s.ephemeral_storage_size} MB cannot be used with "
            "snapStart=true: Lambda SnapStart does not support ephemeral storage above "
            f"{SNAPSTART_MAX_EPHEMERAL_STORAGE_MB} MB. Set ephemeralStorageSize="
            f"{SNAPSTART_MAX_EPHEMERAL_STORAGE_MB} (objects larger than the function's "
            "memory budget then have less room to spill to /tmp), or snapStart=false.")


def _check_suffixes(s: StackSettings) -> None:
    suffixes = s.source_suffixes
    if len(set(suffixes)) != len(suffixes):
        raise SettingsError(f"sourceSuffixes: duplicates in {list(suffixes)}")
    for a in suffixes:
        for b in suffixes:
            if a != b and b.endswith(a):
                # S3 rejects two notification rules whose filters overlap.
                raise SettingsError(f"sourceSuffixes: {a!r} is a suffix of {b!r}; S3 "
                                    "rejects overlapping notification filters")


def _check_no_recursion(s: StackSettings) -> None:
    """Nothing the stack writes may land where it is watched (that would loop)."""
    watched = s.watched
    for name, location in (("outputPrefix", s.output),
                           ("workflowResultsPrefix", s.workflow_results)):
        if location.overlaps(watched):
            bucket = watched.bucket or "the stack's data bucket"
            raise SettingsError(
                f"{name}: {location.prefix!r} overlaps the watched prefix "
                f"{watched.prefix!r} in {bucket}: every result written there would "
                "trigger the function again. Choose a prefix outside the watched one "
                "(e.g. outputPrefix=results/ with sourcePrefix=incoming/) or another "
                "outputBucket.")


# --------------------------------------------------------------------- parsing helpers
def _check_range(name: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise SettingsError(f"{context_key(name)}: must be between {low} and {high}, got {value}")
