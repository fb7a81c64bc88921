"""The Workflow's partials (``<output uri>_partials/<run>/``) are written and deleted
under the function's output prefix grant only."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infrastructure.workflow_construct import PSEUDO, allows, listed, role_statements

pytestmark = pytest.mark.infrastructure


WRITE = ("s3:PutObject", "s3:AbortMultipartUpload", "s3:DeleteObject")


def test_partials_are_written_and_deleted_under_the_output_prefix_grant_only(
        imported_stack: Any) -> None:
    """The partials (``<output uri>_partials/<run>/``, written by the batches, deleted by
    the reduce) are covered by the function's one write grant, the output prefix
    (``outputBucket=acme-results``, ``outputPrefix=sliced/``), which it needs anyway to
    roll back a failed multi-object request; nothing wider is granted: not the bucket,
    not a ``_partials/`` folder outside the output prefix, not the watched or read
    locations, not the workflow's results. The state machine deletes nothing."""
    from s3slice_cdk.contract import PARTIALS

    stack = imported_stack.stack
    function = role_statements(imported_stack, stack.read_function.function.role)
    owner = {"s3:ResourceAccount": PSEUDO["AWS::AccountId"]}

    def s3(key: str) -> str:
        return f"arn:aws:s3:::{key}"

    written = [f"acme-results/sliced/{PARTIALS}/run-1/batch-0123abcd.parquet",
               f"acme-results/sliced/daily/{PARTIALS}/run-1/batch-0123abcd.parquet",
               "acme-results/sliced/combined.0123abcd.parquet"]
    for key in written:
        for action in WRITE:
            assert allows(function, action, s3(key), owner), (action, key)
    # another account's bucket of the same name: refused
    assert not allows(function, "s3:PutObject", s3(written[0]),
                      {"s3:ResourceAccount": "999999999999"})
    outside = [f"acme-results/{PARTIALS}/run-1/batch.parquet",
               f"acme-results/sliced-old/{PARTIALS}/run-1/batch.parquet",
               "acme-results/runs/manifest.json",
               f"acme-landing/events/{PARTIALS}/run-1/batch.parquet",
               f"acme-reference/dim/{PARTIALS}/run-1/batch.parquet",
               "acme-landing/manual/data.parquet"]
    for key in outside:
        for action in WRITE:
            assert not allows(function, action, s3(key), owner), (action, key)
    # the one statement that writes or deletes: exactly the output prefix
    (write,) = [s for s in function
                if any(a in WRITE or a in {"s3:*", "*"} for a in listed(s["Action"]))]
    assert sorted(listed(write["Action"])) == sorted(WRITE)
    assert listed(write["Resource"]) == [s3("acme-results/sliced/*")]
    # reading back and listing: the partials only, not the output prefix itself
    partial = f"sliced/{PARTIALS}/run-1/"
    assert allows(function, "s3:GetObject", s3(f"acme-results/{partial}batch.parquet"), owner)
    assert not allows(function, "s3:GetObject", s3("acme-results/sliced/combined.x.parquet"),
                      owner)
    assert allows(function, "s3:ListBucket", s3("acme-results"),
                  {**owner, "s3:prefix": partial})
    assert not allows(function, "s3:ListBucket", s3("acme-results"),
                      {**owner, "s3:prefix": "sliced/"})

    machine = role_statements(imported_stack, stack.workflow.state_machine.role)
    for key in [*written, *outside]:
        assert not allows(machine, "s3:DeleteObject", s3(key), owner), key
    assert allows(machine, "s3:PutObject", s3("acme-results/runs/manifest.json"), owner)
    assert not allows(machine, "s3:PutObject", s3(written[0]), owner)
