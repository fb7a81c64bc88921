"""The stack-wide checks every pipeline passes: no output can trigger any pipeline, and
no two pipelines' grants overlap.

Each :class:`~s3slice_cdk.pipeline.Pipeline` (and the app's ``S3SliceStack``) registers
what it watches, reads and writes with its stack's one :class:`PipelineGuard` (a construct
without resources), which refuses, before anything is added to the stack, a location
that would let:

- an output (a pipeline's, or the workflow's results) lie inside, or contain, a location
  any pipeline of the stack watches: every result written there would trigger it again;
- a pipeline read what any pipeline writes (its watched or other readable locations
  overlap an output);
- two pipelines write into overlapping prefixes (their write grants would overlap, and
  one's outputs could be taken for the other's).

Buckets are told apart by name, or, for a bucket whose name is a token (one the stack
creates), by the construct.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

from aws_cdk import Stack, Token
from aws_cdk import aws_s3 as s3
from constructs import Construct

from .settings import SettingsError

GUARD_ID = "S3SliceGuard"

Role = Literal["watched", "read", "output"]


class PipelineConflictError(SettingsError):
    """Two pipelines of one stack (or a pipeline and itself) would loop or share grants."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class GuardedLocation:
    """A bucket and a key prefix, what a pipeline does there and which pipeline it is."""

    bucket: str  #: the name, or ``<construct path>`` for a bucket named by a token
    prefix: str
    role: Role
    owner: str  #: the registering construct's path
    label: str  #: how messages name the location, e.g. ``s3://name/prefix/``

    def overlaps(self, other: GuardedLocation) -> bool:
        return self.bucket == other.bucket and (
            self.prefix.startswith(other.prefix) or other.prefix.startswith(self.prefix))


def bucket_identity(bucket: s3.IBucket) -> str:
    """A bucket's name when known at synth, else ``<its construct path>``."""
    name = bucket.bucket_name
    return f"<{bucket.node.path}>" if Token.is_unresolved(name) else name


def location(bucket: s3.IBucket, prefix: str, role: Role, owner: str) -> GuardedLocation:
    """One location of ``owner`` (a construct path) in the guard's terms."""
    identity = bucket_identity(bucket)
    return GuardedLocation(bucket=identity, prefix=prefix, role=role, owner=owner,
                           label=f"s3://{identity}/{prefix}")


class PipelineGuard(Construct):
    """The registry of one stack's locations; see the module docstring."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.locations: list[GuardedLocation] = []

    @classmethod
    def of(cls, scope: Construct) -> PipelineGuard:
        """The guard of ``scope``'s stack, created on first use."""
        stack = Stack.of(scope)
        found = stack.node.try_find_child(GUARD_ID)
        if isinstance(found, PipelineGuard):
            return found
        return cls(stack, GUARD_ID)

    def register(self, locations: Sequence[GuardedLocation]) -> None:
        """Add ``locations`` (one pipeline's), or raise :class:`PipelineConflictError`."""
        candidates = [*self.locations, *locations]
        for new in locations:
            for other in candidates:
                if other is new:
                    continue
                problem = _conflict(new, other)
                if problem is not None:
                    raise PipelineConflictError(problem)
        self.locations.extend(locations)


def _conflict(a: GuardedLocation, b: GuardedLocation) -> str | None:
    if not a.overlaps(b):
        return None
    roles = {a.role, b.role}
    if roles == {"output"}:
        if a.owner == b.owner:
            return None  # one pipeline's output and its own results folder, say
        return (f"{a.owner}'s output {a.label} overlaps {b.owner}'s output {b.label}: two "
                "pipelines would write (and be granted to write and delete) the same keys. "
                "Give each pipeline its own output prefix.")
    if "output" not in roles:
        return None  # reading the same place twice is harmless
    out, other = (a, b) if a.role == "output" else (b, a)
    if other.role == "watched":
        return (f"{out.owner}'s output {out.label} overlaps the location {other.label} that "
                f"{other.owner} watches: every result written there would trigger it again. "
                "Choose an output prefix outside every watched prefix of the stack, or "
                "another bucket.")
    return (f"{out.owner}'s output {out.label} overlaps the location {other.label} that "
            f"{other.owner} reads: it could read what is written there. Choose an output "
            "prefix outside every readable location of the stack.")
