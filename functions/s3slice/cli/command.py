"""The ``s3slice`` command: query S3 objects, invoke the handler on an event, run the demo.

Exit codes (also in ``s3slice --help``):

0  the response was printed (``"status": "ok"``).
1  an unexpected error, not one of the service's typed errors (a bug, or an environment
   problem): printed as JSON on stdout like a typed error, with the exception's class as
   ``errorType``; no traceback.
2  a command line the command cannot run: the usage and the reason on stderr, as argparse
   prints them; nothing was sent.
3  a typed error of the service (``errorType``, ``errorMessage``, ``retryable`` as JSON on
   stdout).

stdout carries only the answer (the JSON response, or with ``--print`` the rows). Logs and
metrics stay off the terminal unless ``--verbose`` is given; then they go to stderr.

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

from s3slice.cli.invoke import LambdaContext, StdoutClosed, invoke, print_json, print_rows
from s3slice.cli.query import UsageError, query_request
from s3slice.core.errors import S3SliceError
from s3slice.core.model import COMPRESSIONS

#: The exit codes above.
EXIT_OK, EXIT_UNEXPECTED, EXIT_USAGE, EXIT_ERROR = 0, 1, 2, 3

_EXIT_CODES = """exit codes:
  0  the response was printed ("status": "ok")
  1  an unexpected error (not a typed one): its type and message as JSON, no traceback
  2  a command line that cannot run: the reason on stderr, nothing sent
  3  a typed error of the service: errorType, errorMessage, retryable as JSON on stdout"""

_QUERY_EXAMPLES = """examples:
  s3slice query --source s3://my-bucket/data/part-0.parquet \\
      --columns col_1,col_2 --filter "col_1 <= 1000" --output s3://my-bucket/results/
  s3slice query --source s3://my-bucket/data/ --print table \\
      --sql "SELECT region, COUNT(*) AS n FROM s3object GROUP BY region"
  s3slice query --source s3://my-bucket/logs/day.csv.gz --input-format csv \\
      --delimiter ";" --columns user,status --filter "status = '500'" --print csv
  s3slice query --source s3://my-bucket/data/part-0.parquet --columns a,b \\
      --output s3://my-bucket/out/part-0-ab.parquet     # exactly that key
"""

_INVOKE_EXAMPLES = """examples:
  s3slice invoke events/direct-invoke.json
  s3slice invoke events/s3-put.json --endpoint-url http://127.0.0.1:9000 --verbose
"""

_DEMO_EXAMPLES = """examples:
  s3slice demo
  s3slice demo --rows 200000 --row-groups 4
"""

_TOP_EXAMPLES = """examples:
  s3slice demo                     # the whole path on an embedded local S3, no AWS account
  s3slice query --source s3://b/data/ --sql "SELECT COUNT(*) AS n FROM s3object" --print table
  s3slice invoke events/direct-invoke.json
  s3slice query --help             # every option of a query, with examples

"""


def _aws_environment(args: argparse.Namespace) -> dict[str, str]:
    """The endpoint, profile, region and memory size a command names, as the variables the
    function reads (on Lambda, Lambda sets them)."""
    env: dict[str, str] = {}
    if args.endpoint_url:
        env["AWS_ENDPOINT_URL_S3"] = args.endpoint_url
    if args.profile:
        _check_profile(args.profile)
        env["AWS_PROFILE"] = args.profile
    if args.region:
        env["AWS_REGION"] = args.region
    elif not (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")):
        # The profile's region (or the default profile's), as the AWS CLI reads it.
        import botocore.session

        region = botocore.session.Session(profile=args.profile).get_config_variable("region")
        if region:
            env["AWS_REGION"] = region
    if args.memory_mb is not None:
        env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] = str(args.memory_mb)
    return env


def _check_profile(name: str) -> None:
    """A profile the AWS configuration files do not define is a usage error (the SDK would
    only fail later, inside the request)."""
    import botocore.session

    known = botocore.session.Session().available_profiles
    if name not in known:
        raise UsageError(f"the profile {name!r} is not defined in the AWS config or "
                         f"credentials files (known: {', '.join(sorted(known)) or 'none'})")


def _cmd_query(args: argparse.Namespace) -> int:
    request = query_request(args)
    response = invoke(request, LambdaContext(), environment=_aws_environment(args),
                      verbose=args.verbose)
    if args.print:
        print_rows(response.get("rows", []), args.print, response.get("columns"))
    else:
        print_json(response)
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
    environment = _aws_environment(args)
    event = _read_event(args.event)
    print_json(invoke(event, LambdaContext(timeout_s=args.timeout),
                      environment=environment, verbose=args.verbose))
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    from s3slice.cli.demo import demo

    return demo(rows=args.rows, row_groups=args.row_groups)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("s3slice")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _aws_options() -> argparse.ArgumentParser:
    """The options every command that talks to S3 takes."""
    aws = argparse.ArgumentParser(add_help=False)
    group = aws.add_argument_group("AWS")
    group.add_argument("--endpoint-url", help="an S3-compatible endpoint (else "
                       "AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL)")
    group.add_argument("--profile", help="a named profile of ~/.aws/config: its credentials "
                       "and its region")
    group.add_argument("--region", help="the AWS region (else AWS_REGION, the profile's, "
                       "or us-east-1)")
    group.add_argument("--memory-mb", type=_positive, metavar="MB", help="price stats.cost "
                       "and plan memory as a function of this size (outside Lambda the "
                       "cost is otherwise unknown)")
    group.add_argument("-v", "--verbose", action="store_true",
                       help="logs and EMF metrics on stderr, as the function writes them")
    return aws


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="s3slice", description="Read only what a query needs from objects in S3: "
        "Parquet, CSV and JSON, by columns and rows, written back to S3 or printed.",
        epilog=_TOP_EXAMPLES + _EXIT_CODES, formatter_class=_formatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    aws = _aws_options()

    q = sub.add_parser(
        "query", parents=[aws], help="run a query on S3 objects",
        description="Run a query on one object, a list, a prefix or a glob, as the function "
        "does: only the bytes the query needs are fetched. The result is written to --output, "
        "printed with --print, or both; the JSON response (with its stats) is printed "
        "otherwise.", epilog=_QUERY_EXAMPLES + "\n" + _EXIT_CODES, formatter_class=_formatter)
    q.add_argument("--source", action="append", required=True, metavar="URI",
                   help="s3://bucket/key, s3://bucket/prefix/ or a glob such as "
                   "s3://b/year=*/part-*.parquet (repeatable)")
    how = q.add_mutually_exclusive_group(required=True)
    how.add_argument("--sql", help="SELECT ... FROM s3object [WHERE ...] [GROUP BY ...] "
                     "[LIMIT n], in S3 Select's dialect")
    how.add_argument("--columns", help="comma-separated column names")
    q.add_argument("--filter", help="a SQL condition, e.g. \"a <= 1000 AND b = 'x'\" "
                   "(with --columns; with --sql, write WHERE)")
    q.add_argument("--limit", type=int, help="at most this many rows (with --columns; with "
                   "--sql, write LIMIT)")
    q.add_argument("--output", metavar="URI", help="s3://bucket/prefix/ (one result per "
                   "object), or s3://bucket/key.parquet for exactly that key (a single "
                   "result only)")
    q.add_argument("--format", choices=("parquet", "csv", "json"),
                   help="the format of the result written to --output (default parquet)")
    q.add_argument("--output-compression", choices=("none", "gzip"),
                   help="compress a CSV or JSON result written to --output (default none)")
    q.add_argument("--parquet-codec", choices=COMPRESSIONS["parquet"],
                   help="the codec of a Parquet result written to --output (default zstd; a "
                   "result copied without decoding keeps the source's unless one is given)")
    q.add_argument("--print", choices=("table", "csv", "json"), help="print the rows on "
                   "stdout in this form instead of the JSON response")
    q.add_argument("--return-rows", action="store_true",
                   help="include the rows in the JSON response")
    source = q.add_argument_group("source format (default: from the key's extension, else "
                                  "Parquet)")
    source.add_argument("--input-format", choices=("parquet", "csv", "json"),
                        help="read every source as this format")
    source.add_argument("--delimiter", help="a CSV source's field delimiter (default ,)")
    source.add_argument("--header", choices=("use", "ignore", "none"),
                        help="a CSV source's first line: use it as the column names "
                        "(default), ignore it, or none (a record); without one the columns "
                        "are _1, _2, ... (S3 Select's FileHeaderInfo)")
    source.add_argument("--quote", metavar="CHAR", help="a CSV source's quote character "
                        "(default \"; S3 Select's QuoteCharacter)")
    source.add_argument("--compression", choices=("auto", "none", "gzip", "bzip2", "zstd"),
                        help="a CSV or JSON source's compression (default auto: from its "
                        "bytes)")
    q.set_defaults(func=_cmd_query, parser=q)

    i = sub.add_parser(
        "invoke", parents=[aws], help="run the Lambda handler on an event file",
        description="Run the function's handler on this machine on a JSON event, exactly as "
        "Lambda would (any entry point: a direct request, an S3 or EventBridge event, SQS, a "
        "Step Functions item, an S3 Select request).",
        epilog=_INVOKE_EXAMPLES + "\n" + _EXIT_CODES, formatter_class=_formatter)
    i.add_argument("event", help="a JSON event file (samples in events/)")
    i.add_argument("--timeout", type=float, default=900.0, help="the function's timeout, s")
    i.set_defaults(func=_cmd_invoke, parser=i)

    d = sub.add_parser(
        "demo", help="the whole path against an embedded local S3",
        description="Start an S3 server on 127.0.0.1, upload a generated table, run a query "
        "through the handler and compare its result with a plain local polars read. Needs "
        "no AWS account.", epilog=_DEMO_EXAMPLES, formatter_class=_formatter)
    d.add_argument("--rows", type=_positive, default=2_000_000, help="rows of the table")
    d.add_argument("--row-groups", type=_positive, default=8, help="its row groups")
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
        return EXIT_USAGE
    except S3SliceError as e:
        print_json({"status": "error", **e.to_dict()})
        return EXIT_ERROR
    except StdoutClosed:
        raise
    except Exception as e:  # noqa: BLE001 - reported as JSON with its type, not a traceback
        message = str(e) or type(e).__name__
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
