"""The ``s3slice`` command: query S3 objects, invoke the handler on an event, run the demo.

Exit codes (also in ``s3slice --help``):

0  the response was printed (``"status": "ok"``).
1  an unexpected error, not one of the service's typed errors (a bug, or an environment
   problem such as no AWS credentials): printed as JSON on stdout like a typed error, with
   the exception's class as ``errorType``; no traceback.
2  a typed error (``errorType``, ``errorMessage``, ``retryable`` as JSON on stdout), or a
   command line the command cannot run (the message on stderr, as argparse prints it).

The program ends its process with :func:`os._exit` once its output is flushed, without
finalizing the interpreter: see :func:`_end_process`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from s3slice._errors import S3SliceError
from s3slice._invoke import LambdaContext, StdoutClosed, invoke, print_json

#: The exit codes above.
EXIT_OK, EXIT_UNEXPECTED, EXIT_ERROR = 0, 1, 2

_EXIT_CODES = """exit codes:
  0  the response was printed ("status": "ok")
  1  an unexpected error (not a typed one): its type and message as JSON, no traceback
  2  a typed error (errorType, errorMessage, retryable as JSON on stdout), or a command
     line the command cannot run (the message on stderr)"""


class UsageError(Exception):
    """A command line the command cannot run: reported as argparse reports its own
    errors (usage and message on stderr), exit code 2."""


def query_request(args: argparse.Namespace) -> dict[str, Any]:
    """The JSON request ``s3slice query`` sends; a combination the request cannot express
    is a :class:`UsageError`, never an option silently dropped."""
    if args.sql is not None:
        given = [name for name, value in (("--filter", args.filter), ("--limit", args.limit))
                 if value is not None]
        if given:
            raise UsageError(f"{' and '.join(given)} cannot be combined with --sql: put the "
                             "condition and the limit in the SQL (WHERE ..., LIMIT n), or "
                             "use --columns instead of --sql")
    if args.format is not None and not args.output:
        raise UsageError("--format is the format of the result written to --output; without "
                         "--output nothing is written (the rows come back in the response "
                         "with --return-rows)")
    request: dict[str, Any] = {
        "source": args.source if len(args.source) > 1 else args.source[0]}
    if args.sql is not None:
        request["sql"] = args.sql
    else:
        if args.columns:
            request["columns"] = [c.strip() for c in args.columns.split(",") if c.strip()]
        if args.filter is not None:
            request["filter"] = args.filter
        if args.limit is not None:
            request["limit"] = args.limit
    if args.output:
        request["output"] = {"uri": args.output, "format": args.format or "parquet"}
    if args.return_rows:
        request["return_rows"] = True
    return request


def _cmd_query(args: argparse.Namespace) -> int:
    request = query_request(args)
    if args.endpoint_url:
        os.environ["AWS_ENDPOINT_URL_S3"] = args.endpoint_url
    print_json(invoke(request, LambdaContext()))
    return EXIT_OK


def _read_event(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise UsageError(f"cannot read the event file {path!r}: {reason}") from e
    try:
        return json.loads(text)
    except ValueError as e:
        raise UsageError(f"the event file {path!r} is not JSON: {e}") from e


def _cmd_invoke(args: argparse.Namespace) -> int:
    event = _read_event(args.event)
    if args.endpoint_url:
        os.environ["AWS_ENDPOINT_URL_S3"] = args.endpoint_url
    print_json(invoke(event, LambdaContext(timeout_s=args.timeout)))
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    from s3slice._demo import demo

    return demo(rows=args.rows, row_groups=args.row_groups)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="s3slice", description="Read only what a query needs from objects in S3.",
        epilog=_EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    q = sub.add_parser("query", help="run a query on S3 objects and print the response",
                       epilog=_EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("--source", action="append", required=True, metavar="URI",
                   help="s3://bucket/key, or s3://bucket/prefix/ (repeatable)")
    how = q.add_mutually_exclusive_group(required=True)
    how.add_argument("--sql", help="SELECT ... FROM s3object [WHERE ...]")
    how.add_argument("--columns", help="comma-separated column names")
    q.add_argument("--filter", help="a SQL condition, e.g. \"a <= 1000 AND b = 'x'\" "
                   "(with --columns; with --sql, write WHERE)")
    q.add_argument("--limit", type=int, help="at most this many rows (with --columns; with "
                   "--sql, write LIMIT)")
    q.add_argument("--output", metavar="URI", help="s3://bucket/prefix/ for the result")
    q.add_argument("--format", choices=("parquet", "csv", "json"),
                   help="the format of the result written to --output (default parquet)")
    q.add_argument("--return-rows", action="store_true", help="include the rows in the response")
    q.add_argument("--endpoint-url", help="an S3-compatible endpoint (else AWS_ENDPOINT_URL_S3)")
    q.set_defaults(func=_cmd_query, parser=q)

    i = sub.add_parser("invoke", help="run the Lambda handler on an event file",
                       epilog=_EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    i.add_argument("event", help="a JSON event file (see events/)")
    i.add_argument("--endpoint-url", help="an S3-compatible endpoint (else AWS_ENDPOINT_URL_S3)")
    i.add_argument("--timeout", type=float, default=900.0, help="the function's timeout, s")
    i.set_defaults(func=_cmd_invoke, parser=i)

    d = sub.add_parser("demo", help="the whole path against an embedded local S3")
    d.add_argument("--rows", type=int, default=2_000_000)
    d.add_argument("--row-groups", type=int, default=8)
    d.set_defaults(func=_cmd_demo, parser=d)
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    """The command on ``argv`` (default ``sys.argv[1:]``): its exit code (see the module).

    Only argparse's own errors and ``--help`` raise :class:`SystemExit`, before any work.
    """
    args = build_parser().parse_args(argv)
    try:
        return _run_command(args)
    except StdoutClosed:
        # Later writes and the final flush go nowhere instead of failing again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        print("s3slice: stdout was closed before the response was written", file=sys.stderr)
        return EXIT_UNEXPECTED


def _run_command(args: argparse.Namespace) -> int:
    try:
        code: int = args.func(args)
    except UsageError as e:
        args.parser.print_usage(sys.stderr)
        print(f"{args.parser.prog}: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except S3SliceError as e:
        print_json({"status": "error", **e.to_dict()})
        return EXIT_ERROR
    except StdoutClosed:
        raise
    except Exception as e:  # noqa: BLE001 - reported as JSON with its type, not a traceback
        message = str(e) or type(e).__name__
        print(f"s3slice: unexpected {type(e).__name__}: {message}", file=sys.stderr)
        print_json({"status": "error", "errorType": type(e).__name__, "errorMessage": message,
                "retryable": False})
        return EXIT_UNEXPECTED
    return code


def _end_process(code: int) -> NoReturn:
    """End the process with ``code`` once stdout, stderr and the log handlers are flushed,
    without finalizing the interpreter.

    Why: obstore's tokio threads may call back into Python (a credential provider written
    in Python, from boto3's chain) after the request that started them has returned, and
    its runtime outlives the request. On CPython before
    3.14, a thread that takes the GIL while ``Py_FinalizeEx`` runs is ended with
    ``pthread_exit``, whose forced unwind cannot cross the Rust frames of that thread: the
    process aborts (``Fatal Python error: Aborted``, exit 134, sometimes a bus error in the
    fault handler) after the JSON was printed. Nothing the command needs happens in
    finalization (outputs are written and temporary files removed before the response
    exists; the thread pools are joined by their ``with`` blocks), so it is skipped.
    """
    with contextlib.suppress(Exception):
        logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or EXIT_UNEXPECTED  # the output was not delivered
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """The program (the ``s3slice`` script and ``python -m s3slice``) when ``argv`` is None:
    it does not return but ends the process (see :func:`_end_process`). Given ``argv``, as
    a library call, the command runs in this process and its exit code is returned."""
    if argv is not None:
        return run(argv)
    _end_process(run())


if __name__ == "__main__":
    main()
