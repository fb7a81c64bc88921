"""The ``s3slice`` command: query S3 objects, invoke the handler on an event, run the demo."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

from ._errors import S3SliceError


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


def _invoke(event: Any, context: LambdaContext) -> Any:
    """The handler, with anything it prints (EMF metrics) sent to stderr: stdout carries
    only the response."""
    from .handler import lambda_handler

    with contextlib.redirect_stdout(sys.stderr):
        return lambda_handler(event, context)


def _print(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def _cmd_query(args: argparse.Namespace) -> int:
    if args.endpoint_url:
        os.environ["AWS_ENDPOINT_URL_S3"] = args.endpoint_url
    request: dict[str, Any] = {
        "source": args.source if len(args.source) > 1 else args.source[0]}
    if args.sql is not None:
        request["sql"] = args.sql
    else:
        if args.columns:
            request["columns"] = [c.strip() for c in args.columns.split(",") if c.strip()]
        if args.filter:
            request["filter"] = args.filter
        if args.limit is not None:
            request["limit"] = args.limit
    if args.output:
        request["output"] = {"uri": args.output, "format": args.format}
    if args.return_rows:
        request["return_rows"] = True
    _print(_invoke(request, LambdaContext()))
    return 0


def _cmd_invoke(args: argparse.Namespace) -> int:
    if args.endpoint_url:
        os.environ["AWS_ENDPOINT_URL_S3"] = args.endpoint_url
    with open(args.event, encoding="utf-8") as f:
        event = json.load(f)
    _print(_invoke(event, LambdaContext(timeout_s=args.timeout)))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from ._demo import demo

    return demo(rows=args.rows, row_groups=args.row_groups)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="s3slice", description="Read only what a query needs from objects in S3.")
    sub = parser.add_subparsers(dest="command", required=True)

    q = sub.add_parser("query", help="run a query on S3 objects and print the response")
    q.add_argument("--source", action="append", required=True, metavar="URI",
                   help="s3://bucket/key, or s3://bucket/prefix/ (repeatable)")
    how = q.add_mutually_exclusive_group(required=True)
    how.add_argument("--sql", help="SELECT ... FROM s3object [WHERE ...]")
    how.add_argument("--columns", help="comma-separated column names")
    q.add_argument("--filter", help="a SQL condition, e.g. \"a <= 1000 AND b = 'x'\"")
    q.add_argument("--limit", type=int)
    q.add_argument("--output", metavar="URI", help="s3://bucket/prefix/ for the result")
    q.add_argument("--format", choices=("parquet", "csv", "json"), default="parquet")
    q.add_argument("--return-rows", action="store_true", help="include the rows in the response")
    q.add_argument("--endpoint-url", help="an S3-compatible endpoint (else AWS_ENDPOINT_URL_S3)")
    q.set_defaults(func=_cmd_query)

    i = sub.add_parser("invoke", help="run the Lambda handler on an event file")
    i.add_argument("event", help="a JSON event file (see events/)")
    i.add_argument("--endpoint-url", help="an S3-compatible endpoint (else AWS_ENDPOINT_URL_S3)")
    i.add_argument("--timeout", type=float, default=900.0, help="the function's timeout, s")
    i.set_defaults(func=_cmd_invoke)

    d = sub.add_parser("demo", help="the whole path against an embedded local S3")
    d.add_argument("--rows", type=int, default=2_000_000)
    d.add_argument("--row-groups", type=int, default=8)
    d.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except S3SliceError as e:
        _print({"status": "error", **e.to_dict()})
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
