"""Least-privilege S3 grants scoped to key prefixes (``bucket.grant_read`` grants ``/*``).

Every S3 statement carries an ``s3:ResourceAccount`` condition naming the accounts that may
own the buckets, so a bucket name deleted and re-registered by another account is never
trusted. KMS grants name exact key ARNs and hold only for requests S3 makes in the
stack's region (``kms:ViaService``). Glue grants name exact tables (with their catalog and
databases, which Glue checks too).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from aws_cdk import Aws, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3

#: What writing outputs needs: one PUT, or a multipart upload (and its abort on failure),
#: and deleting what an invocation wrote when a later write of it fails (no partial result).
WRITE_ACTIONS = ("s3:PutObject", "s3:AbortMultipartUpload", "s3:DeleteObject")
#: What a Step Functions ResultWriter needs on its prefix.
RESULT_WRITER_ACTIONS = ("s3:PutObject", "s3:GetObject", "s3:ListMultipartUploadParts",
                         "s3:AbortMultipartUpload")
#: What reading an SSE-KMS object needs of its key.
KMS_READ_ACTIONS = ("kms:Decrypt",)
#: What writing an SSE-KMS object needs (a data key; Decrypt for multipart uploads).
KMS_WRITE_ACTIONS = ("kms:GenerateDataKey", "kms:Decrypt")


@dataclasses.dataclass(frozen=True, kw_only=True)
class BucketPrefix:
    """A bucket construct and a key prefix inside it (``""`` is the whole bucket)."""

    bucket: s3.IBucket
    prefix: str

    @property
    def objects_arn(self) -> str:
        return self.bucket.arn_for_objects(f"{self.prefix}*")

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket.bucket_name}/{self.prefix}"


def owner_condition(accounts: Sequence[str]) -> dict[str, Any]:
    """``s3:ResourceAccount`` is one of ``accounts`` (the buckets' owners)."""
    value: str | list[str] = accounts[0] if len(accounts) == 1 else list(accounts)
    return {"StringEquals": {"s3:ResourceAccount": value}}


def grant_get_objects(grantee: iam.IGrantable, locations: Sequence[BucketPrefix], *,
                      accounts: Sequence[str]) -> None:
    """``s3:GetObject`` on ``bucket/prefix*`` of every location, nothing else."""
    grantee.grant_principal.add_to_principal_policy(iam.PolicyStatement(
        actions=["s3:GetObject"],
        resources=_unique(location.objects_arn for location in locations),
        conditions=owner_condition(accounts),
    ))


def grant_list(grantee: iam.IGrantable, locations: Sequence[BucketPrefix], *,
               accounts: Sequence[str]) -> None:
    """``s3:ListBucket`` on each bucket, for requests whose ``prefix`` is inside a location."""
    by_bucket: dict[str, tuple[s3.IBucket, list[str]]] = {}
    for location in locations:
        key = location.bucket.node.path
        by_bucket.setdefault(key, (location.bucket, []))[1].append(location.prefix)
    for bucket, prefixes in by_bucket.values():
        conditions: dict[str, Mapping[str, Any]] = dict(owner_condition(accounts))
        if "" not in prefixes:
            conditions["StringLike"] = {"s3:prefix": _unique(f"{p}*" for p in prefixes)}
        grantee.grant_principal.add_to_principal_policy(iam.PolicyStatement(
            actions=["s3:ListBucket"],
            resources=[bucket.bucket_arn],
            conditions=conditions,
        ))


def grant_put_objects(grantee: iam.IGrantable, location: BucketPrefix, *,
                      accounts: Sequence[str],
                      actions: Sequence[str] = WRITE_ACTIONS) -> None:
    """``actions`` (by default PUT and abort of multipart uploads) on ``bucket/prefix*``."""
    grantee.grant_principal.add_to_principal_policy(iam.PolicyStatement(
        actions=list(actions),
        resources=[location.objects_arn],
        conditions=owner_condition(accounts),
    ))


def grant_kms(grantee: iam.IGrantable, keys: Sequence[kms.IKey],
              actions: Sequence[str]) -> None:
    """``actions`` on exactly ``keys``, only through S3 in the stack's region."""
    if not keys:
        return
    grantee.grant_principal.add_to_principal_policy(iam.PolicyStatement(
        actions=list(actions),
        resources=_unique(key.key_arn for key in keys),
        conditions={"StringEquals": {"kms:ViaService": f"s3.{Aws.REGION}.amazonaws.com"}},
    ))


def glue_get_tables(stack: Stack, names: Sequence[str]) -> iam.PolicyStatement:
    """``glue:GetTable`` on exactly the Glue Data Catalog tables ``names``
    (``"database.table"``, checked by the caller): Glue checks the caller's access to the
    catalog and the table's database too, so their ARNs are granted with the tables'."""
    def arn(resource: str, name: str | None = None) -> str:
        return stack.format_arn(service="glue", resource=resource, resource_name=name)
    databases = sorted({n.partition(".")[0] for n in names})
    return iam.PolicyStatement(
        actions=["glue:GetTable"],
        resources=[arn("catalog"), *(arn("database", d) for d in databases),
                   *(arn("table", n.replace(".", "/", 1)) for n in _unique(names))])


def grant_glue_get_tables(grantee: iam.IGrantable, stack: Stack,
                          names: Sequence[str]) -> None:
    """``glue:GetTable`` on exactly ``names`` (``glue_get_tables``); nothing for none."""
    if not names:
        return
    grantee.grant_principal.add_to_principal_policy(glue_get_tables(stack, names))


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
