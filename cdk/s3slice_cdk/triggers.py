"""S3 notifications → SQS (with a dead-letter queue) → an SQS event source for the function."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jsii
from aws_cdk import Aws, Duration
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from aws_cdk.interfaces import aws_s3 as s3_refs
from constructs import Construct

#: The SQS event source's MaximumConcurrency when not given (see cdk/README.md).
DEFAULT_MAX_CONCURRENCY = 10


@jsii.implements(s3.IBucketNotificationDestination)
class AccountPinnedSqsDestination:
    """Like ``aws_s3_notifications.SqsDestination``, but the queue policy also pins the
    bucket's account: S3 may send only for this bucket (``aws:SourceArn``) owned by one
    of ``accounts`` (``aws:SourceAccount``), so a bucket name re-registered elsewhere
    cannot send. (The queues here are SSE-SQS: no KMS key policy to amend.)"""

    def __init__(self, queue: sqs.IQueue, accounts: Sequence[str]) -> None:
        self.queue = queue
        self.accounts = list(accounts)

    def bind(self, _scope: Construct,
             bucket: s3_refs.IBucketRef) -> s3.BucketNotificationDestinationConfig:
        source_account: str | list[str] = (
            self.accounts[0] if len(self.accounts) == 1 else self.accounts)
        self.queue.grant_send_messages(iam.ServicePrincipal("s3.amazonaws.com", conditions={
            "ArnLike": {"aws:SourceArn": bucket.bucket_ref.bucket_arn},
            "StringEquals": {"aws:SourceAccount": source_account},
        }))
        return s3.BucketNotificationDestinationConfig(
            arn=self.queue.queue_arn, type=s3.BucketNotificationDestinationType.QUEUE,
            dependencies=[self.queue])


@dataclasses.dataclass(frozen=True, kw_only=True)
class TriggersProps:
    """Which new objects trigger, and how their notifications are queued and consumed;
    every prop keyword-only."""

    #: The watched bucket.
    bucket: s3.IBucket
    #: Only keys under this prefix trigger (``""``: the whole bucket).
    prefix: str
    #: One notification rule per suffix; empty means any key under ``prefix``.
    suffixes: Sequence[str] = ()
    #: At least 6 x the function's timeout (AWS's advice for SQS event sources).
    visibility_timeout: Duration
    #: Receives of a message before it moves to the dead-letter queue.
    max_receive_count: int = 3
    #: Messages per invocation.
    batch_size: int = 10
    #: How long the event source gathers a batch.
    max_batching_window: Duration = dataclasses.field(
        default_factory=lambda: Duration.seconds(0))
    #: The event source's MaximumConcurrency: at most this many concurrent invocations.
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    #: Accounts that may own the bucket (``aws:SourceAccount``); none: the stack's account.
    source_accounts: Sequence[str] = ()


class Triggers(Construct):
    """The watched location's ``ObjectCreated`` events, queued for the function.

    Both queues are encrypted (SSE-SQS) and refuse non-TLS requests; only S3, for this
    bucket in one of ``source_accounts``, may send. A message the function fails
    ``max_receive_count`` times moves to the dead-letter queue.

    Attributes: ``queue``, ``dead_letter_queue``, ``event_source`` (add it to the
    function: ``function.add_event_source(triggers.event_source)``), ``filters``.
    """

    def __init__(self, scope: Construct, construct_id: str, *, props: TriggersProps) -> None:
        super().__init__(scope, construct_id)
        self.queue, self.dead_letter_queue = object_queues(
            self, visibility_timeout=props.visibility_timeout,
            max_receive_count=props.max_receive_count)
        suffixes: Sequence[str | None] = list(props.suffixes) or [None]
        #: The key filters of the notification rules (none: every new object in the bucket).
        self.filters: list[s3.NotificationKeyFilter] = []
        destination = AccountPinnedSqsDestination(
            self.queue, list(props.source_accounts) or [Aws.ACCOUNT_ID])
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


def object_queues(scope: Construct, *, visibility_timeout: Duration, max_receive_count: int
                  ) -> tuple[sqs.Queue, sqs.Queue]:
    """The queue of object events a function consumes, and its dead-letter queue (both
    encrypted, TLS only): ``Queue`` and ``DeadLetterQueue`` in ``scope``."""
    dead_letter_queue = sqs.Queue(
        scope, "DeadLetterQueue",
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=Duration.days(14),
    )
    queue = sqs.Queue(
        scope, "Queue",
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        visibility_timeout=visibility_timeout,
        retention_period=Duration.days(4),
        dead_letter_queue=sqs.DeadLetterQueue(
            queue=dead_letter_queue, max_receive_count=max_receive_count),
    )
    return queue, dead_letter_queue
