"""The one stack: function + layer, triggers, workflow and alarms, and every grant."""

from __future__ import annotations

from typing import Any

from aws_cdk import Annotations, Aws, CfnOutput, Duration, RemovalPolicy, Stack
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from s3slice_cdk import grants
from s3slice_cdk.alarms import Alarms, AlarmsProps, AlarmTopic
from s3slice_cdk.contract import FUNCTION_CODE_DIR, PARTIALS
from s3slice_cdk.function import ReadFunction, ReadFunctionProps
from s3slice_cdk.grants import (
    KMS_READ_ACTIONS,
    KMS_WRITE_ACTIONS,
    RESULT_WRITER_ACTIONS,
    BucketPrefix,
)
from s3slice_cdk.guard import PipelineGuard
from s3slice_cdk.guard import location as guard_location
from s3slice_cdk.nag import Acknowledged
from s3slice_cdk.triggers import Triggers, TriggersProps
from s3slice_cdk.uploads import abort_incomplete_uploads
from s3slice_cdk.workflow import Workflow, WorkflowProps

from .nag import add_suppressions
from .settings import StackSettings


class S3SliceStack(Stack):
    """Composes the constructs from ``settings`` and grants each exactly what it uses.

    The function may read the watched location and ``readUris`` (``s3:GetObject`` on
    ``bucket/prefix*``, ``s3:ListBucket`` with an ``s3:prefix`` condition) and write the
    output prefix (``s3:PutObject``, ``s3:AbortMultipartUpload``, ``s3:DeleteObject``),
    and list and read back the workflow's partial answers only in ``_partials/`` folders
    under the output prefix. The workflow may list the same locations as the function,
    read a table's planned items in those ``_partials/`` folders, write its Map Run
    results under the results prefix and describe its own Map Runs. Every S3
    statement holds only for buckets owned by the deploying account or ``bucketAccounts``
    (``s3:ResourceAccount``); ``kmsKeyArns`` adds ``kms:Decrypt`` (reads) and
    ``kms:GenerateDataKey`` (writes) on exactly those keys, through S3 in the region.
    ``glueTables`` adds ``glue:GetTable`` on exactly those tables (and the catalog and
    their databases, which Glue checks too), so the function can resolve
    ``{"iceberg": {"glue": "database.table"}}``; the tables' files must be readable
    (the watched location or ``readUris``).

    Attributes: ``settings``, ``data_bucket`` (``None`` when ``sourceBucket`` is given),
    ``access_logs_bucket``, ``source_bucket``, ``output_bucket``, ``read_function``,
    ``triggers``, ``workflow``, ``alarms``, ``alarm_topic``, ``owned_alarm_topic`` (the
    topic the stack creates when no ``alarmTopicArn`` is given), ``bucket_accounts``,
    ``kms_keys``, ``granted_object_locations``, ``partials_locations``,
    ``workflow_results_location``,
    ``nag_acknowledgments``.

    With ``snapStart``, the SQS event source mapping, the workflow's Lambda tasks (their
    ``FunctionName`` and the state machine's ``lambda:InvokeFunction`` grant) and the
    ``FunctionName`` output name the alias ``live`` (``read_function.invoked``), never the
    unqualified function; the S3 grants stay on the function's role, which the alias's
    invocations run under.
    """

    def __init__(self, scope: Construct, construct_id: str, *, settings: StackSettings,
                 **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.settings = settings
        self._imported: dict[str, s3.IBucket] = {}

        # ------------------------------------------------------------------ buckets
        self.data_bucket: s3.Bucket | None = None
        self.access_logs_bucket: s3.Bucket | None = None
        if settings.source_bucket is None:
            self.access_logs_bucket = s3.Bucket(
                self, "AccessLogs",
                encryption=s3.BucketEncryption.S3_MANAGED,
                block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
                enforce_ssl=True,
                object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
                lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(365))],
                removal_policy=RemovalPolicy.RETAIN,
            )
            self.data_bucket = s3.Bucket(
                self, "Data",
                encryption=s3.BucketEncryption.S3_MANAGED,
                block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
                enforce_ssl=True,
                versioned=True,
                lifecycle_rules=[s3.LifecycleRule(
                    # Overwritten and deleted objects stay recoverable this long, no longer.
                    noncurrent_version_expiration=Duration.days(
                        settings.noncurrent_version_days),
                    expired_object_delete_marker=True,
                    abort_incomplete_multipart_upload_after=Duration.days(7),
                )],
                server_access_logs_bucket=self.access_logs_bucket,
                server_access_logs_prefix="data/",
                removal_policy=RemovalPolicy.RETAIN,
            )
        self.source_bucket = self._bucket(settings.source_bucket)
        self.output_bucket = self._bucket(settings.output.bucket)

        #: The accounts that may own the buckets: the deploying one, then bucketAccounts.
        self.bucket_accounts: list[str] = list(dict.fromkeys(
            [Aws.ACCOUNT_ID, *settings.bucket_accounts]))
        #: The keys of SSE-KMS buckets (``kmsKeyArns``).
        self.kms_keys: list[kms.IKey] = [
            kms.Key.from_key_arn(self, f"Key{number}", arn)
            for number, arn in enumerate(settings.kms_key_arns, start=1)]
        readable = [BucketPrefix(bucket=self._bucket(location.bucket), prefix=location.prefix)
                    for location in settings.read_locations]
        watched = readable[0]
        output = BucketPrefix(bucket=self.output_bucket, prefix=settings.output_prefix)
        # A timed-out function's multipart upload: aborted by a rule, or flagged at synth.
        abort_incomplete_uploads(self, self.output_bucket, settings.output_prefix)
        results = BucketPrefix(bucket=self.output_bucket,
                               prefix=settings.workflow_results_prefix)
        #: Where the function may get objects, then where it may put them.
        self.granted_object_locations: list[BucketPrefix] = [*readable, output]
        #: Where the function may list and read back the workflow's partial answers (a
        #: map batch writes them, the reduce step reads and deletes them): a ``_partials/``
        #: folder directly under the output prefix or under a folder of it.
        self.partials_locations: list[BucketPrefix] = [
            BucketPrefix(bucket=self.output_bucket, prefix=f"{output.prefix}{PARTIALS}/"),
            BucketPrefix(bucket=self.output_bucket, prefix=f"{output.prefix}*/{PARTIALS}/"),
        ]
        self.workflow_results_location = results
        # The stack-wide guard: a Pipeline added to this stack can neither write where
        # this deployment watches or reads nor overlap its output (and vice versa).
        owner = self.node.path
        PipelineGuard.of(self).register([
            guard_location(watched.bucket, watched.prefix, "watched", owner),
            *(guard_location(r.bucket, r.prefix, "read", owner) for r in readable[1:]),
            guard_location(output.bucket, output.prefix, "output", owner),
            guard_location(results.bucket, results.prefix, "output", owner),
        ])

        # ------------------------------------------------------------------ function
        self.read_function = ReadFunction(self, "Reader", props=ReadFunctionProps(
            code_dir=FUNCTION_CODE_DIR,
            layer_dir=settings.resolved_layer_dir,
            query=settings.query,
            output_uri=output.uri,
            output_format=settings.output_format,
            source_uris=[location.uri for location in readable],
            architecture=settings.architecture,
            python_version=settings.python_version,
            memory_size=settings.memory_size,
            ephemeral_storage_size=settings.ephemeral_storage_size,
            timeout_seconds=settings.timeout_seconds,
            reserved_concurrency=settings.reserved_concurrency,
            log_retention_days=settings.log_retention_days,
            snap_start=settings.snap_start,
        ))
        function = self.read_function.function
        #: What every trigger invokes: the alias ``live`` with snapStart, else the function.
        invoked = self.read_function.invoked
        accounts = self.bucket_accounts
        grants.grant_get_objects(function, readable, accounts=accounts)
        grants.grant_list(function, readable, accounts=accounts)
        grants.grant_put_objects(function, output, accounts=accounts)
        # Writing and deleting partials is covered by the output prefix's grant above.
        grants.grant_get_objects(function, self.partials_locations, accounts=accounts)
        grants.grant_list(function, self.partials_locations, accounts=accounts)
        grants.grant_kms(function, self.kms_keys, KMS_READ_ACTIONS)
        grants.grant_kms(function, self.kms_keys, KMS_WRITE_ACTIONS)
        # Tables named in the Glue Data Catalog (``glueTables``): their metadata location.
        grants.grant_glue_get_tables(function, self, settings.glue_tables)

        # ------------------------------------------------------------------ triggers
        self.triggers = Triggers(self, "Triggers", props=TriggersProps(
            bucket=self.source_bucket,
            prefix=settings.source_prefix,
            suffixes=settings.source_suffixes,
            visibility_timeout=Duration.seconds(settings.queue_visibility_timeout_seconds),
            max_receive_count=settings.max_receive_count,
            batch_size=settings.batch_size,
            max_batching_window=Duration.seconds(settings.max_batching_window_seconds),
            max_concurrency=settings.event_source_max_concurrency,
            source_accounts=accounts,
        ))
        # Consuming the queue: the event source grants receive/delete/visibility (to the
        # function's role, whichever of function or alias it is added to).
        invoked.add_event_source(self.triggers.event_source)

        # ------------------------------------------------------------------ workflow
        self.workflow = Workflow(self, "Workflow", props=WorkflowProps(
            function=invoked,
            default_bucket_name=self.source_bucket.bucket_name,
            default_prefix=settings.source_prefix,
            default_query=settings.query,
            default_output_uri=output.uri,
            default_output_format=settings.output_format,
            results_bucket=self.output_bucket,
            results_prefix=settings.workflow_results_prefix,
            max_concurrency=settings.workflow_concurrency,
            items_per_batch=settings.workflow_items_per_batch,
            tolerated_failure_percentage=settings.workflow_tolerated_failure_percentage,
            log_retention_days=settings.log_retention_days,
            timeout=Duration.hours(settings.workflow_timeout_hours),
            outputs=False,  # the stack's own outputs below
        ))
        state_machine = self.workflow.state_machine
        grants.grant_list(state_machine, readable, accounts=accounts)
        # A table's planned data files, the table path's items (``items.json``).
        grants.grant_get_objects(state_machine, self.partials_locations, accounts=accounts)
        grants.grant_put_objects(state_machine, results, accounts=accounts,
                                 actions=RESULT_WRITER_ACTIONS)
        grants.grant_kms(state_machine, self.kms_keys, KMS_WRITE_ACTIONS)

        # ------------------------------------------------------------------ alarms
        self.owned_alarm_topic: sns.Topic | None = None
        self.alarm_topic: sns.ITopic
        if settings.alarm_topic_arn is not None:
            self.alarm_topic = sns.Topic.from_topic_arn(self, "AlarmTopic",
                                                        settings.alarm_topic_arn)
            if settings.alarm_email is not None:
                self.alarm_topic.add_subscription(
                    subscriptions.EmailSubscription(settings.alarm_email))
        else:
            owned = AlarmTopic(self, "Alerts", email=settings.alarm_email)
            self.owned_alarm_topic = self.alarm_topic = owned.topic
            if not owned.subscribed:
                Annotations.of(self).add_warning_v2("s3slice:alarms-unsubscribed", (
                    "the alarms notify the topic this stack creates (AlarmTopicArn output), "
                    "which has no subscriber: nobody hears of errors, throttles or dead "
                    "letters until you subscribe to it, or deploy with "
                    "--context alarmEmail=you@example.com or alarmTopicArn=<topic>"))
        # The alarms watch the function's own metrics (dimension FunctionName alone), which
        # count its invocations through the alias too: they stay on the function.
        self.alarms = Alarms(self, "Alarms", props=AlarmsProps(
            function=function,
            timeout=self.read_function.timeout,
            dead_letter_queue=self.triggers.dead_letter_queue,
            state_machine=state_machine,
            duration_ratio=settings.duration_alarm_ratio,
            topic=self.alarm_topic,
        ))

        # ------------------------------------------------------------------ outputs
        # With snapStart, the name direct callers invoke is the alias's (``<name>:live``).
        CfnOutput(self, "FunctionName", value=invoked.function_name)
        if self.read_function.alias is not None:
            CfnOutput(self, "FunctionAliasArn", value=self.read_function.alias.function_arn)
        CfnOutput(self, "StateMachineArn", value=state_machine.state_machine_arn)
        CfnOutput(self, "QueueUrl", value=self.triggers.queue.queue_url)
        CfnOutput(self, "DeadLetterQueueUrl", value=self.triggers.dead_letter_queue.queue_url)
        CfnOutput(self, "WatchedUri", value=watched.uri)
        CfnOutput(self, "OutputUri", value=output.uri)
        CfnOutput(self, "WorkflowResultsUri", value=results.uri)
        CfnOutput(self, "AlarmTopicArn", value=self.alarm_topic.topic_arn)

        #: The cdk-nag findings acknowledged, with their reasons.
        self.nag_acknowledgments: list[Acknowledged] = add_suppressions(self)

    def _bucket(self, name: str | None) -> s3.IBucket:
        """The stack's data bucket for ``None``, else the named bucket, imported once."""
        if name is None:
            assert self.data_bucket is not None
            return self.data_bucket
        if name not in self._imported:
            construct_id = f"Bucket{len(self._imported) + 1}"
            self._imported[name] = s3.Bucket.from_bucket_name(self, construct_id, name)
        return self._imported[name]
