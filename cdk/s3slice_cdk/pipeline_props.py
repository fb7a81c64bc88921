"""A pipeline's props (``Pipeline``'s, and what its workflow reads of them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns

from .function import ReadFunction
from .settings import OutputFormat


@dataclasses.dataclass(frozen=True, kw_only=True)
class PipelineProps:
    """What one pipeline watches, asks and writes. Every prop is keyword-only."""

    #: The function that runs the query (shared with other pipelines or not).
    function: ReadFunction
    #: The bucket whose new objects feed the pipeline. Its EventBridge notifications are
    #: switched on (``enable_event_bridge_notification``) unless ``enable_event_bridge``
    #: is false.
    source_bucket: s3.IBucket
    #: Only objects under this prefix (a folder: ends with ``/``; ``""`` is the bucket).
    source_prefix: str
    #: Only keys ending with one of these (empty: any key under the prefix).
    source_suffixes: Sequence[str] = ()
    #: The query, as the function's JSON contract: ``{"sql": ...}`` or
    #: ``{"columns": [...], "filter": ...}``; ``{}`` keeps every column and row.
    query: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: Where the pipeline's results go (may be the source bucket).
    output_bucket: s3.IBucket
    #: Results go under this prefix (ends with ``/``), outside every watched prefix.
    output_prefix: str
    #: ``parquet``, ``csv`` or ``json``.
    output_format: OutputFormat = "parquet"
    #: A rule pattern of your own in place of the generated one (e.g. with more
    #: conditions); it must match only ``Object Created`` events of objects under
    #: ``source_bucket``/``source_prefix``, the only ones the function may read.
    event_pattern: events.EventPattern | None = None
    #: The bus the rule listens on (default: the account's default bus, where S3 sends).
    event_bus: events.IEventBus | None = None
    #: Switch on the source bucket's EventBridge notifications (a property of a bucket
    #: this stack creates; CDK's notifications custom resource for an imported one).
    enable_event_bridge: bool = True
    #: Accounts that may own the buckets, besides the deploying one (``s3:ResourceAccount``).
    bucket_accounts: Sequence[str] = ()
    #: Keys of SSE-KMS buckets the pipeline reads or writes.
    kms_keys: Sequence[kms.IKey] = ()
    #: Receives of a message before it moves to the dead-letter queue.
    max_receive_count: int = 3
    #: Messages per invocation (above 10 needs ``max_batching_window``).
    batch_size: int = 10
    #: How long the event source gathers a batch.
    max_batching_window: Duration = dataclasses.field(
        default_factory=lambda: Duration.seconds(0))
    #: The event source's MaximumConcurrency (2..1000).
    max_concurrency: int = 10
    #: Where the dead-letter alarm notifies (ALARM and OK); none: the alarm only.
    alarm_topic: sns.ITopic | None = None
