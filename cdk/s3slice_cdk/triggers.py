"""S3 notifications → SQS (with a dead-letter queue) → an SQS event source for the function."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_notifications as s3n
from aws_cdk import aws_sqs as sqs
from constructs import Construct


@dataclasses.dataclass(frozen=True, kw_only=True)
class TriggersProps:
    """Which new objects trigger, and how their notifications are queued and consumed."""

    bucket: s3.IBucket
    prefix: str
    #: One notification rule per suffix; empty means any key under ``prefix``.
    suffixes: Sequence[str] = ()
    #: At least 6 x the function's timeout (AWS's advice for SQS event sources).
    visibility_timeout: Duration
    max_receive_count: int = 3
    batch_size: int = 10
    max_batching_window: Duration = dataclasses.field(
        default_factory=lambda: Duration.seconds(0))
    max_concurrency: int | None = None


class Triggers(Construct):
    """The watched location's ``ObjectCreated`` events, queued for the function.

    Both queues are encrypted (SSE-SQS) and refuse non-TLS requests. A message the
    function fails ``max_receive_count`` times moves to the dead-letter queue.

    Attributes: ``queue``, ``dead_letter_queue``, ``event_source`` (add it to the
    function: ``function.add_event_source(triggers.event_source)``), ``filters``.
    """

    def __init__(self, scope: Construct, construct_id: str, *, props: TriggersProps) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue = sqs.Queue(
            self, "DeadLetterQueue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        self.queue = sqs.Queue(
            self, "Queue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            visibility_timeout=props.visibility_timeout,
            retention_period=Duration.days(4),
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dead_letter_queue, max_receive_count=props.max_receive_count),
        )
        suffixes: Sequence[str | None] = list(props.suffixes) or [None]
        #: The key filters of the notification rules (none: every new object in the bucket).
        self.filters: list[s3.NotificationKeyFilter] = []
        destination = s3n.SqsDestination(self.queue)
        for suffix in suffixes:
            if not props.prefix and suffix is None:
                # The whole bucket, any key: one rule without a filter (CDK rejects an
                # empty NotificationKeyFilter).
                props.bucket.add_event_notification(s3.EventType.OBJECT_CREATED, destination)
                continue
            key_filter = s3.NotificationKeyFilter(prefix=props.prefix or None, suffix=suffix)
            props.bucket.add_event_notification(
                s3.EventType.OBJECT_CREATED, destination, key_filter)
            self.filters.append(key_filter)
        self.event_source = event_sources.SqsEventSource(
            self.queue,
            batch_size=props.batch_size,
            max_batching_window=props.max_batching_window,
            report_batch_item_failures=True,
            max_concurrency=props.max_concurrency,
        )
