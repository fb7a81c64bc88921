"""Incomplete multipart uploads under an output prefix: aborted by a lifecycle rule, or
flagged at synth when the bucket is not the app's to change.

The function writes a large answer as a multipart upload and aborts it on every error it
sees; a hard timeout (or an out-of-memory kill) ends it with no chance to, and the parts
already uploaded stay, billed as storage, invisible to a listing, until something aborts
the upload. S3's lifecycle rule ``AbortIncompleteMultipartUpload`` does.

:func:`abort_incomplete_uploads` adds that rule, scoped to the output prefix, to a bucket
this app defines (an ``s3.Bucket``); for a bucket it imports (``from_bucket_name``,
``from_bucket_arn``...) CloudFormation cannot change the bucket's lifecycle, so synth warns
(``s3slice:multipartUploadsUnmanaged``), naming the bucket, the prefix and the rule to add.
"""

from __future__ import annotations

from aws_cdk import Annotations, Duration, Token
from aws_cdk import aws_s3 as s3
from constructs import Construct

#: How long an incomplete upload is left before S3 aborts it: a function runs 15 minutes
#: at most, so a day-old upload is one no invocation will complete.
ABORT_AFTER = Duration.days(1)
#: The warning for an imported output bucket.
UNMANAGED_WARNING = "s3slice:multipartUploadsUnmanaged"

_ATTRIBUTE = "_s3slice_abort_prefixes"


def abort_incomplete_uploads(scope: Construct, bucket: s3.IBucket, prefix: str) -> None:
    """Make sure incomplete multipart uploads under ``bucket``/``prefix`` are aborted after
    :data:`ABORT_AFTER`: a lifecycle rule on a bucket the app defines (once per bucket and
    prefix), a synth warning on ``scope`` for an imported one."""
    if isinstance(bucket, s3.Bucket):
        done: set[str] = getattr(bucket, _ATTRIBUTE, None) or set()
        if prefix in done:
            return
        bucket.add_lifecycle_rule(
            abort_incomplete_multipart_upload_after=ABORT_AFTER,
            prefix=prefix or None)
        done.add(prefix)
        setattr(bucket, _ATTRIBUTE, done)
        return
    name = bucket.bucket_name
    shown = bucket.node.path if Token.is_unresolved(name) else name
    Annotations.of(scope).add_warning_v2(UNMANAGED_WARNING, (
        f"{scope.node.path}: the output bucket {shown} is imported, so this app cannot add "
        "the lifecycle rule that aborts incomplete multipart uploads: a function stopped "
        "by its timeout leaves its upload's parts, billed and unlisted. Add to the "
        f"bucket a lifecycle rule AbortIncompleteMultipartUpload (DaysAfterInitiation "
        f"{ABORT_AFTER.to_days()}) for the prefix '{prefix}' (or the whole bucket)."))
