"""The command line in-process: what it sends, what it refuses before sending anything, and
how a failure becomes an exit code (the subprocess runs are in tests/integration/test_cli.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from s3slice import RequestError
from s3slice.cli import command as cli

SOURCE = "s3://b/k.parquet"


def request_of(*args: str) -> dict[str, Any]:
    return cli.query_request(cli.build_parser().parse_args(["query", "--source", SOURCE, *args]))


def test_the_request_carries_every_option_given() -> None:
    assert request_of("--columns", "a, b", "--filter", "a <= 1", "--limit", "0") == {
        "source": SOURCE, "columns": ["a", "b"], "filter": "a <= 1", "limit": 0}
    assert request_of("--sql", "SELECT a FROM s3object", "--output", "s3://o/p/",
                      "--format", "csv", "--return-rows") == {
        "source": SOURCE, "sql": "SELECT a FROM s3object",
        "output": {"uri": "s3://o/p/", "format": "csv"}, "return_rows": True}
    assert request_of("--columns", "a", "--output", "s3://o/p/")["output"] == {
        "uri": "s3://o/p/", "format": "parquet"}
    assert request_of("--columns", "a", "--input-format", "csv", "--delimiter", ";",
                      "--compression", "gzip", "--print", "csv") == {
        "source": SOURCE, "columns": ["a"], "return_rows": True,
        "input": {"format": "csv", "delimiter": ";", "compression": "gzip"}}


def test_a_source_option_without_the_source_format_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, "query", "--source", SOURCE, "--columns", "a", "--delimiter", ";")
    assert "give --input-format csv (or json)" in err


def test_every_help_has_examples_and_query_a_description(
        capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["query", "--help"], ["invoke", "--help"], ["demo", "--help"]):
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
        assert exited.value.code == 0
        out = capsys.readouterr().out
        assert "examples:\n  s3slice " in out, argv
    with pytest.raises(SystemExit):
        cli.main(["query", "--help"])
    assert "only the bytes the query needs are fetched" in capsys.readouterr().out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"s3slice {version('s3slice')}\n"


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Runs ``argv``, which must be refused: exit 2, nothing on stdout, the reason on stderr
    in argparse's form; returns stderr."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert code == cli.EXIT_USAGE == 2
    assert out == ""
    assert "usage: s3slice" in err and "Traceback" not in err
    return err


@pytest.mark.parametrize(("extra", "named"), [
    (["--filter", "a <= 1"], "--filter cannot"),
    (["--limit", "5"], "--limit cannot"),
    (["--filter", "a <= 1", "--limit", "5"], "--filter and --limit cannot"),
    (["--limit", "0"], "--limit cannot"),
    (["--filter", ""], "--filter cannot"),
])
def test_sql_with_filter_or_limit_is_refused_not_dropped(
        capsys: pytest.CaptureFixture[str], extra: list[str], named: str) -> None:
    err = refused(capsys, "query", "--source", SOURCE, "--sql", "SELECT a FROM s3object",
                  *extra)
    assert f"s3slice query: error: {named} be combined with --sql" in err
    assert "WHERE" in err and "LIMIT" in err


def test_format_without_output_is_refused_not_ignored(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, "query", "--source", SOURCE, "--columns", "a", "--format", "csv")
    assert "s3slice query: error: --format is the format of the result written to --output" \
        in err


def test_invoke_on_a_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    err = refused(capsys, "invoke", str(missing))
    assert f"s3slice invoke: error: cannot read the event file {str(missing)!r}: " \
        "No such file or directory" in err


def test_invoke_on_a_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = refused(capsys, "invoke", str(tmp_path))
    assert "cannot read the event file" in err and "Is a directory" in err


@pytest.mark.parametrize(("content", "reason"), [
    (b"{nope", "is not JSON: Expecting property name"),
    (b"", "is not JSON: Expecting value"),
    (b'{"source": "s3://b/k"', "is not JSON: Expecting ',' delimiter"),
    (b"\xff\xfe{}", "cannot read the event file"),
], ids=["malformed", "empty", "truncated", "not UTF-8"])
def test_invoke_on_a_file_that_is_not_json(capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path, content: bytes, reason: str) -> None:
    event = tmp_path / "event.json"
    event.write_bytes(content)
    err = refused(capsys, "invoke", str(event))
    assert "s3slice invoke: error: " in err and str(event) in err and reason in err


def test_a_typed_error_is_json_and_exit_3(capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def invoke(event: Any, context: Any, **_: Any) -> Any:
        raise RequestError("must not be negative, got -1", field="limit")
    monkeypatch.setattr(cli, "invoke", invoke)
    assert cli.main(["query", "--source", SOURCE, "--columns", "a"]) == cli.EXIT_ERROR == 3
    out, err = capsys.readouterr()
    assert json.loads(out) == {"status": "error", "errorType": "RequestError",
                               "errorMessage": "limit: must not be negative, got -1",
                               "retryable": False}
    assert "Traceback" not in err


@pytest.mark.parametrize("error", [OverflowError("Python int too large to convert to C long"),
                                   ValueError("Received None from session.get_credentials"),
                                   KeyError("x"), RuntimeError()],
                         ids=lambda e: type(e).__name__)
def test_an_unexpected_error_is_json_and_exit_1_without_a_traceback(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        error: Exception) -> None:
    def invoke(event: Any, context: Any, **_: Any) -> Any:
        raise error
    monkeypatch.setattr(cli, "invoke", invoke)
    assert cli.main(["query", "--source", SOURCE, "--columns", "a"]) == cli.EXIT_UNEXPECTED == 1
    out, err = capsys.readouterr()
    response = json.loads(out)
    message = str(error) or type(error).__name__
    assert response == {"status": "error", "errorType": type(error).__name__,
                        "errorMessage": message, "retryable": False}
    assert err == ""  # stdout alone carries the error, once


def test_the_exit_codes_are_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["query", "--help"], ["invoke", "--help"]):
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
        assert exited.value.code == 0
        out = capsys.readouterr().out
        assert "exit codes:" in out and "  3  a typed error" in out and "  1  an unexpected" in out
        assert "  2  a command line that cannot run" in out


def test_output_compression_and_parquet_codec_go_to_the_output() -> None:
    assert request_of("--columns", "a", "--output", "s3://o/p/", "--format", "json",
                      "--output-compression", "gzip")["output"] == {
        "uri": "s3://o/p/", "format": "json", "compression": "gzip"}
    assert request_of("--columns", "a", "--output", "s3://o/p/",
                      "--parquet-codec", "snappy")["output"] == {
        "uri": "s3://o/p/", "format": "parquet", "compression": "snappy"}
    # A URI naming one object says its format by its extension.
    assert request_of("--columns", "a", "--output", "s3://o/r.csv.gz",
                      "--output-compression", "gzip")["output"] == {
        "uri": "s3://o/r.csv.gz", "format": "csv", "compression": "gzip"}


@pytest.mark.parametrize(("argv", "says"), [
    (["--output", "s3://o/p/", "--output-compression", "gzip"], "a Parquet result takes "
     "--parquet-codec"),
    (["--output", "s3://o/p/", "--format", "csv", "--parquet-codec", "zstd"],
     "a csv result takes --output-compression"),
    (["--parquet-codec", "zstd"], "without --output nothing is written"),
    (["--output-compression", "gzip", "--print", "csv"], "without --output nothing is written"),
])
def test_a_compression_that_does_not_fit_the_output_is_refused(
        capsys: pytest.CaptureFixture[str], argv: list[str], says: str) -> None:
    err = refused(capsys, "query", "--source", SOURCE, "--columns", "a", *argv)
    assert says in err


def test_csv_options_need_no_input_format_when_the_key_says_csv() -> None:
    def request(source: str, *args: str) -> dict[str, Any]:
        return cli.query_request(cli.build_parser().parse_args(
            ["query", "--source", source, "--columns", "a", *args]))
    assert request("s3://b/day.csv", "--delimiter", ";", "--header", "none",
                   "--quote", "'")["input"] == {
        "format": "csv", "delimiter": ";", "header": "none", "quote": "'"}
    assert request("s3://b/day.csv.gz", "--delimiter", ";")["input"] == {
        "format": "csv", "delimiter": ";"}
    # A .tsv key keeps its tab when another CSV option is given.
    assert request("s3://b/day.tsv", "--header", "ignore")["input"] == {
        "format": "csv", "header": "ignore", "delimiter": "\t"}
    assert request("s3://b/x.ndjson", "--compression", "gzip")["input"] == {
        "format": "json", "compression": "gzip"}
    assert request("s3://b/a.csv", "--input-format", "csv", "--header", "use")["input"] == {
        "format": "csv", "header": "use"}


@pytest.mark.parametrize("source", ["s3://b/k.parquet", "s3://b/prefix/", "s3://b/x.json"])
def test_csv_options_on_a_key_that_is_not_csv_are_refused(
        capsys: pytest.CaptureFixture[str], source: str) -> None:
    err = refused(capsys, "query", "--source", source, "--columns", "a", "--quote", "'")
    assert "--quote describes a CSV source" in err and "--input-format csv" in err


def test_csv_options_on_keys_of_two_formats_are_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, "query", "--source", "s3://b/a.csv", "--source", "s3://b/b.parquet",
                  "--columns", "a", "--delimiter", ";")
    assert "give --input-format csv" in err


def test_an_unknown_profile_is_a_usage_error(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("[profile dev]\nregion = eu-west-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    for argv in (["query", "--source", SOURCE, "--columns", "a"], ["invoke", "event.json"]):
        err = refused(capsys, *argv, "--profile", "nosuch")
        assert "the profile 'nosuch' is not defined" in err and "known: dev" in err
