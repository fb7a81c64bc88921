"""Invoking the handler on this machine, as the command line and the demo do: a stand-in
for Lambda's context, and the response printed as JSON on stdout."""

from __future__ import annotations

import contextlib
import json
import sys
import time
import uuid
from typing import Any


class LambdaContext:
    """What Lambda hands the handler, as far as the handler looks at it."""

    def __init__(self, *, timeout_s: float = 900.0, memory_mb: int = 3008) -> None:
        self.function_name = "s3slice-local"
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = memory_mb
        self.aws_request_id = str(uuid.uuid4())
        self.invoked_function_arn = (
            "arn:aws:lambda:us-east-1:000000000000:function:s3slice-local")
        self.log_group_name = "/aws/lambda/s3slice-local"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def invoke(event: Any, context: LambdaContext) -> Any:
    """The handler, with anything it prints (EMF metrics) sent to stderr: stdout carries
    only the response."""
    from s3slice.handler import lambda_handler

    with contextlib.redirect_stdout(sys.stderr):
        return lambda_handler(event, context)


class StdoutClosed(Exception):
    """Nobody reads stdout any more (``s3slice ... | head``): the response is undelivered."""


def print_json(obj: Any) -> None:
    try:
        json.dump(obj, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError as e:
        raise StdoutClosed from e
