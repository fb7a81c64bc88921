"""The repository's stack's cdk-nag acknowledgments, each with the reason it is safe here
(the constructs' own are ``s3slice_cdk.nag``'s and ``s3slice_cdk.library_nag``'s)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from constructs import Node

from s3slice_cdk.function import ReadFunction
from s3slice_cdk.grants import BucketPrefix
from s3slice_cdk.nag import (
    PARTIALS_REASON,
    PREFIX_REASON,
    RUNTIME_REASON,
    XRAY_REASON,
    Acknowledged,
    WildcardAllowance,
    acknowledge,
    acknowledge_notifications_handler,
    acknowledge_wildcards,
    acknowledge_workflow,
    exact,
)
from s3slice_cdk.workflow import Workflow

from .settings import StackSettings


class ReviewedStack(Protocol):
    """What ``add_suppressions`` reads of the stack (``S3SliceStack`` has it all); a
    protocol, so that this module and ``stack.py`` do not import each other."""

    @property
    def node(self) -> Node: ...
    def resolve(self, obj: Any) -> Any: ...
    @property
    def settings(self) -> StackSettings: ...
    @property
    def read_function(self) -> ReadFunction: ...
    @property
    def workflow(self) -> Workflow: ...
    @property
    def granted_object_locations(self) -> Sequence[BucketPrefix]: ...
    @property
    def partials_locations(self) -> Sequence[BucketPrefix]: ...
    @property
    def workflow_results_location(self) -> BucketPrefix: ...
    @property
    def access_logs_bucket(self) -> s3.Bucket | None: ...
    @property
    def owned_alarm_topic(self) -> sns.Topic | None: ...


def add_suppressions(stack: ReviewedStack) -> list[Acknowledged]:
    """Acknowledge the findings this design accepts; the reasons are the review record."""
    log: list[Acknowledged] = []
    reader = stack.read_function
    settings = stack.settings

    # --- the read function -----------------------------------------------------------
    acknowledge(reader.function, "AwsSolutions-L1",
                RUNTIME_REASON.format(version=settings.python_version), log)
    prefix_objects = [
        exact(stack, location.objects_arn) for location in stack.granted_object_locations]
    function_policy = reader.role.node.find_child("DefaultPolicy")
    assert isinstance(function_policy, iam.Policy)
    acknowledge_wildcards(function_policy, [
        WildcardAllowance(
            pattern="|".join(prefix_objects),
            actions=frozenset({"s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload",
                               "s3:DeleteObject"}),
            reason=PREFIX_REASON),
        WildcardAllowance(
            pattern="|".join(exact(stack, location.objects_arn)
                             for location in stack.partials_locations),
            actions=frozenset({"s3:GetObject"}),
            reason=PARTIALS_REASON),
        WildcardAllowance(
            pattern=r"\*",
            actions=frozenset({"xray:PutTraceSegments", "xray:PutTelemetryRecords"}),
            reason=XRAY_REASON),
    ], log)

    # --- the workflow -------------------------------------------------------------------
    acknowledge_workflow(stack.workflow, reader.function, stack.workflow_results_location,
                         log, items=stack.partials_locations)

    # --- CDK's S3 notifications handler (a singleton custom resource) ---------------------
    acknowledge_notifications_handler(stack, log)

    # --- the access-log bucket ------------------------------------------------------------
    if stack.access_logs_bucket is not None:
        acknowledge(
            stack.access_logs_bucket, "AwsSolutions-S1",
            "This bucket receives the data bucket's server access logs; logging the "
            "access-log bucket into itself (or another bucket) would not add an audit "
            "trail worth its cost.", log)

    # --- the alarm topic the stack creates -------------------------------------------------
    if stack.owned_alarm_topic is not None:
        acknowledge(
            stack.owned_alarm_topic, "AwsSolutions-SNS2",
            "The alarm topic carries only CloudWatch alarm state changes (alarm name, "
            "metric, threshold, state reason), never data from the buckets, and encrypting "
            "it would need a customer managed KMS key whose policy lets CloudWatch use it, "
            "a recurring cost for nothing confidential; it still refuses non-TLS "
            "publishers.", log)
    return log
