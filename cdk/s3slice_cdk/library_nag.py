"""cdk-nag acknowledgments for a function that pipelines use, with ``nag``'s own reasons.

A :class:`~s3slice_cdk.pipeline.Pipeline` records the locations it grants its function
and, for the first pipeline of a function, adds :class:`PipelineFunctionAcknowledgments`
as an aspect: when the app synthesizes, once every pipeline has added its grants, it
acknowledges exactly the findings the repository's stack acknowledges for its function
(``nag.add_suppressions``): the runtime (AwsSolutions-L1), the ``bucket/prefix*`` object
grants of these locations, and X-Ray's ``*``. Any other wildcard stays a finding.
"""

from __future__ import annotations

import re

import jsii
from aws_cdk import IAspect, Stack
from aws_cdk import aws_iam as iam
from constructs import IConstruct

from .function import ReadFunction
from .grants import BucketPrefix
from .nag import (
    PARTIALS_REASON,
    PREFIX_REASON,
    RUNTIME_REASON,
    XRAY_REASON,
    Acknowledged,
    WildcardAllowance,
    acknowledge,
    acknowledge_notifications_handler,
    acknowledge_wildcards,
    nag_rendering,
)


@jsii.implements(IAspect)
class PipelineFunctionAcknowledgments:
    """Acknowledges a pipeline function's findings once, at synth (see the module)."""

    def __init__(self, reader: ReadFunction, python_version: str) -> None:
        self.reader = reader
        self.python_version = python_version
        #: Where the pipelines granted the function objects (appended by each pipeline).
        self.locations: list[BucketPrefix] = []
        #: The ``_partials/`` folders their workflows read back (``add_workflow``).
        self.partials: list[BucketPrefix] = []
        #: What was acknowledged, for review and tests.
        self.log: list[Acknowledged] = []
        self.done = False

    def visit(self, node: IConstruct) -> None:
        if node is not self.reader or self.done:
            return
        self.done = True
        stack = Stack.of(self.reader)
        acknowledge(self.reader.function, "AwsSolutions-L1",
                    RUNTIME_REASON.format(version=self.python_version), self.log)
        policy = self.reader.role.node.find_child("DefaultPolicy")
        assert isinstance(policy, iam.Policy)
        objects = "|".join(re.escape(nag_rendering(stack.resolve(location.objects_arn)))
                           for location in self.locations)
        acknowledge_wildcards(policy, [
            WildcardAllowance(
                pattern=objects,
                actions=frozenset({"s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload",
                                   "s3:DeleteObject"}),
                reason=PREFIX_REASON),
            WildcardAllowance(
                pattern="|".join(re.escape(nag_rendering(stack.resolve(p.objects_arn)))
                                 for p in self.partials) or "(?!)",
                actions=frozenset({"s3:GetObject"}),
                reason=PARTIALS_REASON),
            WildcardAllowance(
                pattern=r"\*",
                actions=frozenset({"xray:PutTraceSegments", "xray:PutTelemetryRecords"}),
                reason=XRAY_REASON),
        ], self.log)
        acknowledge_notifications_handler(stack, self.log)
