"""The repository stack's CDK context keys, each with a documented default, and how each
value is parsed (``StackSettings.from_context`` validates them).

Every setting is read from the CDK context (``cdk.json``'s ``context`` or
``cdk deploy --context key=value``) and validated at synth time, before any construct
is made. Values given on the command line arrive as strings; values in ``cdk.json`` may
be typed JSON. Both are accepted.

=================================== ============================== =============================
context key                         default                        meaning
=================================== ============================== =============================
sourceBucket                        (a bucket the stack creates)   bucket whose objects trigger
                                                                   the function
sourcePrefix                        ``incoming/``                  only keys under it trigger
                                                                   (a ``/`` is appended)
sourceSuffixes                      ``.parquet,.csv,.json,.jsonl,  only keys ending with one of
                                    .ndjson``                      these trigger (empty: any)
readUris                            (none)                         more ``s3://bucket/prefix/``
                                                                   locations the function may
                                                                   read (never triggers)
allowWholeBucketReads               false                          readUris may name a whole
                                                                   bucket (``s3://bucket/``)
glueTables                          (none)                         AWS Glue Data Catalog tables
                                                                   (``database.table``,
                                                                   comma-separated) the function
                                                                   may resolve: ``glue:GetTable``
                                                                   on exactly those
kmsKeyArns                          (none)                         KMS keys of SSE-KMS buckets
                                                                   (key ARNs, comma-separated)
bucketAccounts                      (none)                         more accounts that may own
                                                                   the buckets (the deploying
                                                                   account always may)
outputBucket                        the source bucket              where results go
outputPrefix                        ``results/``                   results go under it
outputFormat                        ``parquet``                    parquet, csv or json
query                               ``{}`` (all columns and rows)  the query applied to
                                                                   triggered objects (JSON)
memorySize                          3008                           MB, 128..10240
ephemeralStorageSize                4096                           MB of /tmp, 512..10240
timeoutSeconds                      300                            4..900
architecture                        ``arm64``                      arm64 or x86_64
pythonVersion                       ``3.13``                       Lambda Python runtime
reservedConcurrency                 (none)                         reserved concurrent
                                                                   executions
accountConcurrency                  1000                           the account's Lambda
                                                                   concurrency quota (checked
                                                                   against, never set)
logRetentionDays                    30                             function and workflow logs
layerDir                            ``layers/build/<arch>``        the built layer (has
                                                                   ``python/``)
batchSize                           10                             SQS messages per invocation
maxBatchingWindowSeconds            0                              SQS batching window
maxReceiveCount                     3                              receives before the DLQ
eventSourceMaxConcurrency           10                             SQS poller concurrency cap
                                                                   (2..1000)
workflowMaxConcurrency              100 (less if the budget is     Distributed Map concurrency
                                    smaller)
workflowItemsPerBatch               10                             objects per child execution
workflowToleratedFailurePercentage  5                              0..100
workflowResultsPrefix               ``workflow-results/``          Map Run results, in the
                                                                   output bucket
workflowTimeoutHours                24                             state machine TimeoutSeconds
alarmTopicArn                       (a topic the stack creates)    SNS topic for alarm actions
alarmEmail                          (none)                         e-mail subscribed to it
noncurrentVersionDays               30                             noncurrent versions in the
                                                                   created data bucket expire
durationAlarmRatio                  0.8                            p99 duration / timeout alarm
nag                                 true                           run cdk-nag AwsSolutions in
                                                                   ``cdk synth``
snapStart                           false                          Lambda SnapStart: a published
                                                                   version and the alias
                                                                   ``live``, which every trigger
                                                                   invokes (needs pythonVersion
                                                                   3.12+ and
                                                                   ephemeralStorageSize <= 512)
=================================== ============================== =============================

Every prefix (``sourcePrefix``, ``outputPrefix``, ``workflowResultsPrefix`` and the
prefixes of ``readUris``) is a folder: a ``/`` is appended when missing, so that
``landing`` never also covers ``landing-archive/``. Prefixes, suffixes and URIs may hold
only letters, digits and ``/ ! - _ . ' ( ) =``: IAM reads ``*`` and ``?`` as wildcards
and ``${...}`` as a policy variable in the ARNs the stack grants, and S3 needs the other
characters URL-encoded, so any of them is refused, naming the key.

``snapStart`` is refused, naming the setting to change, where Lambda SnapStart is not
offered: a ``pythonVersion`` below 3.12 (SnapStart supports the Python 3.12 and later
managed runtimes) or an ``ephemeralStorageSize`` above 512 MB (SnapStart does not support
more /tmp than that, so the default 4096 must be lowered explicitly:
``--context ephemeralStorageSize=512``). EFS and provisioned concurrency, which SnapStart
does not support either, are never configured by this stack.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from s3slice_cdk.contract import REPO_DIR
from s3slice_cdk.settings import SettingsError

__all__ = ["EMPTY_ALLOWED", "PARSERS", "REPO_DIR", "S3Location", "context_key", "parse_str"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class S3Location:
    """A bucket (by name; ``None`` is the bucket the stack creates) and a key prefix."""

    bucket: str | None
    prefix: str

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def overlaps(self, other: S3Location) -> bool:
        """True when a key could be under both (same bucket, one prefix starts the other)."""
        return self.bucket == other.bucket and (
            self.prefix.startswith(other.prefix) or other.prefix.startswith(self.prefix))



def context_key(field_name: str) -> str:
    """``source_bucket`` → ``sourceBucket``."""
    head, *rest = field_name.split("_")
    return head + "".join(word.capitalize() for word in rest)


def parse_str(name: str, raw: Any) -> str:
    if not isinstance(raw, str):
        raise SettingsError(f"{context_key(name)}: expected a string, got {raw!r}")
    return raw.strip()


def _parse_prefix(name: str, raw: Any) -> str:
    return parse_str(name, raw).lstrip("/")


def _as_folder(prefix: str) -> str:
    """``landing`` → ``landing/`` (a prefix names a folder); ``""`` stays the whole bucket."""
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


def _parse_dir_prefix(name: str, raw: Any) -> str:
    return _as_folder(_parse_prefix(name, raw))


def _parse_int(name: str, raw: Any) -> int:
    if isinstance(raw, bool):
        raise SettingsError(f"{context_key(name)}: expected an integer, got {raw!r}")
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise SettingsError(f"{context_key(name)}: expected an integer, got {raw!r}") from None


def _parse_float(name: str, raw: Any) -> float:
    if isinstance(raw, bool):
        raise SettingsError(f"{context_key(name)}: expected a number, got {raw!r}")
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise SettingsError(f"{context_key(name)}: expected a number, got {raw!r}") from None


def _parse_bool(name: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in {"true", "1", "yes", "on"}:
        return True
    if text in {"false", "0", "no", "off"}:
        return False
    raise SettingsError(f"{context_key(name)}: expected true or false, got {raw!r}")


def _parse_list(name: str, raw: Any) -> tuple[str, ...]:
    items: Sequence[Any]
    if isinstance(raw, str):
        text = raw.strip()
        items = json.loads(text) if text.startswith("[") else text.split(",")
    elif isinstance(raw, list | tuple):
        items = raw
    else:
        raise SettingsError(f"{context_key(name)}: expected a list or a comma-separated string")
    if not all(isinstance(item, str) for item in items):
        raise SettingsError(f"{context_key(name)}: every item must be a string, got {raw!r}")
    return tuple(item.strip() for item in items if item.strip())


def _parse_uris(name: str, raw: Any) -> tuple[S3Location, ...]:
    locations = []
    for uri in _parse_list(name, raw):
        if not uri.startswith("s3://"):
            raise SettingsError(f"{context_key(name)}: expected s3://bucket/prefix, got {uri!r}")
        bucket, _, prefix = uri[5:].partition("/")
        locations.append(S3Location(bucket=bucket, prefix=_as_folder(prefix.lstrip("/"))))
    return tuple(locations)


def _parse_query(name: str, raw: Any) -> Mapping[str, Any]:
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError as e:
            raise SettingsError(f"{context_key(name)}: not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise SettingsError(f"{context_key(name)}: expected a JSON object, got {raw!r}")
    return cast("dict[str, Any]", value)


def _parse_path(name: str, raw: Any) -> Path:
    path = Path(parse_str(name, raw)).expanduser()
    return path if path.is_absolute() else REPO_DIR / path


def _parse_optional_str(name: str, raw: Any) -> str | None:
    return parse_str(name, raw) or None


#: Settings for which an empty value means something (the whole bucket, any suffix, none).
EMPTY_ALLOWED = frozenset({"source_prefix", "source_suffixes", "read_uris"})

PARSERS: dict[str, Callable[[str, Any], Any]] = {
    "source_bucket": _parse_optional_str,
    "source_prefix": _parse_dir_prefix,
    "source_suffixes": _parse_list,
    "read_uris": _parse_uris,
    "allow_whole_bucket_reads": _parse_bool,
    "glue_tables": _parse_list,
    "kms_key_arns": _parse_list,
    "bucket_accounts": _parse_list,
    "output_bucket": _parse_optional_str,
    "output_prefix": _parse_dir_prefix,
    "query": _parse_query,
    "memory_size": _parse_int,
    "ephemeral_storage_size": _parse_int,
    "timeout_seconds": _parse_int,
    "reserved_concurrency": _parse_int,
    "account_concurrency": _parse_int,
    "log_retention_days": _parse_int,
    "layer_dir": _parse_path,
    "batch_size": _parse_int,
    "max_batching_window_seconds": _parse_int,
    "max_receive_count": _parse_int,
    "event_source_max_concurrency": _parse_int,
    "workflow_max_concurrency": _parse_int,
    "workflow_items_per_batch": _parse_int,
    "workflow_tolerated_failure_percentage": _parse_float,
    "workflow_results_prefix": _parse_dir_prefix,
    "workflow_timeout_hours": _parse_int,
    "alarm_email": _parse_optional_str,
    "noncurrent_version_days": _parse_int,
    "duration_alarm_ratio": _parse_float,
    "nag": _parse_bool,
    "snap_start": _parse_bool,
}
