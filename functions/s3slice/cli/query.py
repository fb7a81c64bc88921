"""The JSON request ``s3slice query`` sends, from its command line (:mod:`s3slice.cli.command`
parses it): every option given goes into the request, and a combination the request
cannot express is a :class:`UsageError`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from s3slice.core.contract import file_format, source_format


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
                         "--output nothing is written (print the rows with --print)")
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
    read_as = {name: value for name, value in (
        ("format", args.input_format), ("delimiter", args.delimiter),
        ("header", args.header), ("quote", args.quote), ("compression", args.compression))
        if value is not None}
    if read_as:
        if "format" not in read_as:
            read_as = {"format": _format_of_keys(args.source, read_as), **read_as}
        request["input"] = read_as
    if args.output:
        # A URI naming one object (s3://b/r.csv.gz) says its format by its extension.
        named = file_format(args.output.removeprefix("s3://").partition("/")[2])
        output: dict[str, Any] = {"uri": args.output, "format": args.format or (
            named[0] if named else "parquet")}
        compression = _output_compression(args, output["format"])
        if compression is not None:
            output["compression"] = compression
        request["output"] = output
    elif args.output_compression or args.parquet_codec:
        raise UsageError("--output-compression and --parquet-codec describe the result "
                         "written to --output; without --output nothing is written")
    if args.return_rows or args.print:
        request["return_rows"] = True
    return request


#: The options that describe how a CSV (or JSON) source is read.
_TEXT_OPTIONS = {"delimiter": "--delimiter", "header": "--header", "quote": "--quote",
                 "compression": "--compression"}


def _format_of_keys(sources: Sequence[str], read_as: dict[str, str]) -> str:
    """The format every source's key names by its extension (``.csv``, ``.tsv``,
    ``.json``, ..., compressed too), when the CSV or JSON options given fit it: such a key
    needs no ``--input-format``."""
    given = [_TEXT_OPTIONS[name] for name in read_as]
    named = [source_format(uri.removeprefix("s3://").partition("/")[2]) for uri in sources]
    formats = {fmt for fmt, _ in named}
    fmt = formats.pop() if len(formats) == 1 else None
    csv_only = any(name != "compression" for name in read_as)
    if fmt is None or fmt == "parquet" or (csv_only and fmt != "csv"):
        kind = "a CSV source" if csv_only else "a CSV or JSON source"
        verb = "describe" if len(given) > 1 else "describes"
        raise UsageError(f"{' and '.join(given)} {verb} {kind}, and the key's extension "
                         "does not say it is one: give --input-format csv (or json) with them")
    if "delimiter" not in read_as and all(name.endswith(".tsv") for _, name in named):
        read_as["delimiter"] = "\t"  # as a .tsv key is read without options
    return fmt


def _output_compression(args: argparse.Namespace, fmt: str) -> str | None:
    """The output's compression: ``--output-compression`` for CSV and JSON results,
    ``--parquet-codec`` for Parquet ones; the other is a usage error, never dropped."""
    if args.output_compression and fmt == "parquet":
        raise UsageError("--output-compression compresses a CSV or JSON result (--format "
                         "csv or json); a Parquet result takes --parquet-codec")
    if args.parquet_codec and fmt != "parquet":
        raise UsageError(f"--parquet-codec is the codec of a Parquet result; a {fmt} result "
                         "takes --output-compression")
    compression: str | None = args.output_compression or args.parquet_codec
    return compression
