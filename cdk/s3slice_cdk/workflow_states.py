"""The workflow's building blocks (:mod:`.workflow` assembles them): the error contract
of every task that invokes the function, the Distributed Maps' shape, and CDK's
ItemReader and ResultWriter without the grants CDK would add (the composing stack grants
exactly the prefixes instead)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from .service_errors import PERMANENT_ERRORS, RETRYABLE_ERRORS

#: Lambda's own transient errors: retried with backoff.
LAMBDA_RETRYABLE_ERRORS = (
    "Lambda.TooManyRequestsException",
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.ClientExecutionTimeoutException",
)
#: The service's throttling error: retried with a longer interval than the other
#: retryable errors (``RETRYABLE_ERRORS``). Every permanent one (``PERMANENT_ERRORS``) is
#: caught and fails the batch at once. Step Functions matches each by its exact name.
THROTTLED_ERROR = "S3SliceThrottledError"
if THROTTLED_ERROR not in RETRYABLE_ERRORS:
    raise ImportError(f"{THROTTLED_ERROR} is no longer one of the function's retryable "
                      f"errors {RETRYABLE_ERRORS}; update the workflow's retries")
#: The other retryable errors (network failures that outlived the function's retries).
TRANSIENT_ERRORS = tuple(e for e in RETRYABLE_ERRORS if e != THROTTLED_ERROR)

#: Step Functions' own transient errors, from the ``DescribeMapRun`` SDK call.
SFN_RETRYABLE_ERRORS = ("Sfn.SfnException", "Sfn.ThrottlingException")


class UngrantedS3ObjectsItemReader(sfn.S3ObjectsItemReader):
    """An ItemReader that grants nothing by itself.

    CDK's reader grants ``s3:ListBucket`` on ``*`` when the bucket comes from the input;
    here the stack grants listing only the configured buckets and prefixes instead.
    """

    def provide_policy_statements(self) -> list[iam.PolicyStatement]:
        return []


class UngrantedS3JsonItemReader(sfn.S3JsonItemReader):
    """A JSON-array ItemReader that grants nothing by itself: the stack grants reading
    the ``_partials/`` folders the planning step writes its items to."""

    def provide_policy_statements(self) -> list[iam.PolicyStatement]:
        return []


class UngrantedResultWriterV2(sfn.ResultWriterV2):
    """A ResultWriter that grants nothing by itself (CDK's grants the whole bucket)."""

    def provide_policy_statements(self) -> list[iam.PolicyStatement]:
        return []


def distributed_map(scope: Construct, name: str, *, comment: str, label: str,
                    item_reader: sfn.IItemReader, batch_input: Mapping[str, str],
                    items_per_batch: int, max_concurrency: int,
                    results_bucket: s3.IBucket, results_prefix: str) -> sfn.DistributedMap:
    """A Distributed Map over ``item_reader``'s items in batches (each with
    ``batch_input``), its Map Run results written under the results prefix and its own
    output at ``$.map``."""
    return sfn.DistributedMap(
        scope, name,
        comment=comment,
        label=label,
        item_reader=item_reader,
        item_batcher=sfn.ItemBatcher(
            max_items_per_batch=items_per_batch,
            # ItemBatcher's BatchInput is rendered as given (no JsonPath tokens)
            batch_input={f"{field}.$": path for field, path in batch_input.items()},
        ),
        max_concurrency=max_concurrency,
        tolerated_failure_percentage_path="$.toleratedFailurePercentage",
        result_writer_v2=UngrantedResultWriterV2(
            bucket=results_bucket,
            prefix=results_prefix,
        ),
        result_path="$.map",
    )


def tolerance(scope: Construct, prefix: str, *, combined: str, combines: str,
              then: sfn.DistributedMap) -> tuple[sfn.Pass, sfn.Choice]:
    """The ``Choice`` of ``then``'s tolerance and its ``Pass`` for a query that combines
    ``combined`` (``combines``: the path of the check's answer): such a query's answer
    needs every batch, so the map fails at its first failed batch; any other query goes
    to the map with the input's ``toleratedFailurePercentage``."""
    no_failed = sfn.Pass(
        scope, f"{prefix}ToleratesNoFailedBatch",
        comment=f"A query that combines {combined}: the map fails at its first failed batch",
        result=sfn.Result.from_number(0),
        result_path="$.toleratedFailurePercentage",
    )
    choice = sfn.Choice(
        scope, f"{prefix}Tolerance",
        comment=f"The map's tolerance: 0 for a query that combines {combined}, else the "
                "input's toleratedFailurePercentage",
    )
    choice.when(sfn.Condition.boolean_equals(combines, True), no_failed.next(then))
    choice.otherwise(then)
    return no_failed, choice


def from_paths(paths: Mapping[str, str]) -> dict[str, Any]:
    """State parameters: each field taken from its path (rendered as ``"field.$": path``)."""
    return {field: sfn.JsonPath.string_at(path) for field, path in paths.items()}


def function_task(scope: Construct, function: lambda_.IFunction, name: str, comment: str, *,
                   failed: tuple[str, str], **options: Any) -> tasks.LambdaInvoke:
    """A task invoking the function (its response is the state's result), with the error
    contract of :func:`retry_and_catch`; a permanent error ends in the Fail state
    ``failed`` (name, comment)."""
    task = tasks.LambdaInvoke(scope, name, comment=comment, lambda_function=function,
                              payload_response_only=True, retry_on_service_exceptions=False,
                              **options)
    fail_name, fail_comment = failed
    retry_and_catch(task, sfn.Fail(scope, fail_name, comment=fail_comment,
                                    error_path="$.failure.Error",
                                    cause_path="$.failure.Cause"))
    return task


def retry_and_catch(task: tasks.LambdaInvoke, permanent: sfn.Fail) -> None:
    """The error contract: Lambda's and the service's transient errors retried with
    backoff (throttling with a longer interval), every permanent one caught and failed."""
    task.add_retry(errors=list(LAMBDA_RETRYABLE_ERRORS), interval=Duration.seconds(2),
                   max_attempts=6, backoff_rate=2, jitter_strategy=sfn.JitterType.FULL)
    task.add_retry(errors=[THROTTLED_ERROR], interval=Duration.seconds(5),
                   max_attempts=6, backoff_rate=2, jitter_strategy=sfn.JitterType.FULL)
    if TRANSIENT_ERRORS:
        task.add_retry(errors=list(TRANSIENT_ERRORS), interval=Duration.seconds(2),
                       max_attempts=3, backoff_rate=2, jitter_strategy=sfn.JitterType.FULL)
    task.add_catch(permanent, errors=list(PERMANENT_ERRORS), result_path="$.failure")
