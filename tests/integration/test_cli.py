"""The command line in real subprocesses against a real S3 server on loopback: the
documented exit code every time, JSON on stdout, no traceback, and no abort after the
JSON was printed."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import polars as pl
import pytest

from s3slice.cli.demo import sample_table
from s3slice.cli.local_s3 import LOCAL_CREDENTIALS, LocalS3

pytestmark = pytest.mark.integration

BUCKET, KEY = "cli-data", "t.parquet"
SOURCE = f"s3://{BUCKET}/{KEY}"
#: The failed-range path, run this many times (it aborted in 4 of 48 runs before the fix).
RUNS = 50
#: Subprocesses at a time: each mostly waits on the client's retry back-off.
PARALLEL = 5
_SPAN = re.compile(r"bytes=\d+-\d+$")


class RangeFaults:
    """WSGI middleware: while ``status`` is set, every GET of an explicit byte span
    (``bytes=a-b``, the column chunks) is answered with it; the footer's suffix GET
    (``bytes=-n``) is served, so a read fails in its ranged phase, with GETs in flight."""

    def __init__(self) -> None:
        self.status: str | None = None
        self.hits = 0
        #: The regions the requests were signed for (SigV4's credential scope).
        self.regions: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, app: Any) -> Any:
        def wrapped(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            scope = re.search(r"Credential=[^/]+/\d+/([^/]+)/s3/",
                              environ.get("HTTP_AUTHORIZATION", ""))
            if scope:
                with self._lock:
                    self.regions.add(scope.group(1))
            status = self.status
            if (status is None or environ["REQUEST_METHOD"] != "GET"
                    or not _SPAN.match(environ.get("HTTP_RANGE") or "")):
                return app(environ, start_response)  # type: ignore[no-any-return]
            with self._lock:
                self.hits += 1
            body = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>InternalError"
                    b"</Code><Message>We encountered an error.</Message></Error>")
            start_response(status, [("Content-Type", "application/xml"),
                                    ("Content-Length", str(len(body)))])
            return [body]
        return wrapped


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return sample_table(100_000)


@pytest.fixture(scope="module")
def server(table: pl.DataFrame) -> Iterator[tuple[str, RangeFaults]]:
    """An S3 server of this module's own (the shared one's faults match by path, and the
    footer and the column chunks share one), with one object of 5 row groups."""
    faults = RangeFaults()
    with LocalS3(middleware=faults) as s3:
        client = boto3.client("s3", endpoint_url=s3.endpoint_url,
                              aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                              region_name=LOCAL_CREDENTIALS["AWS_REGION"])
        client.create_bucket(Bucket=BUCKET)
        buf = io.BytesIO()
        table.write_parquet(buf, row_group_size=20_000)
        client.put_object(Bucket=BUCKET, Key=KEY, Body=buf.getvalue())
        yield s3.endpoint_url, faults
        faults.status = None


@pytest.fixture
def faults(server: tuple[str, RangeFaults]) -> Iterator[RangeFaults]:
    _, rules = server
    rules.status, rules.hits = None, 0
    rules.regions.clear()
    yield rules
    rules.status = None


def cli_run(endpoint: str, *args: str, timeout: float = 120, metrics: bool = False
            ) -> subprocess.CompletedProcess[str]:
    """``python -m s3slice ARGS`` with the local credentials; a native abort would name
    itself on stderr (the fault handler is on)."""
    env = {**os.environ, **LOCAL_CREDENTIALS,
           "S3SLICE_PART_SIZE": str(256 * 1024),  # several ranged GETs in flight
           "S3SLICE_REQUEST_TIMEOUT_S": "2",
           "POWERTOOLS_METRICS_DISABLED": "false" if metrics else "true",
           "PYTHONFAULTHANDLER": "1"}
    env.pop("AWS_ENDPOINT_URL_S3", None)
    return subprocess.run([sys.executable, "-m", "s3slice", *args, "--endpoint-url", endpoint],
                          capture_output=True, text=True, timeout=timeout, env=env, check=False)


def describe(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\nstdout: {proc.stdout[-500:]}\nstderr: {proc.stderr[-1500:]}"


@pytest.mark.slow
def test_a_failed_range_read_exits_3_every_time(server: tuple[str, RangeFaults],
                                                faults: RangeFaults) -> None:
    """Every column-chunk GET fails past the client's retries: each of the runs prints the
    typed error and exits 3. Before the fix some aborted (134) or died of a bus error (135)
    after printing, when obstore's tokio threads called into a finalizing interpreter."""
    endpoint, _ = server
    faults.status = "500 Internal Server Error"
    query = ("query", "--source", SOURCE, "--columns", "col_1,col_2", "--filter", "col_1 <= 20000")
    with ThreadPoolExecutor(PARALLEL) as pool:
        runs = list(pool.map(lambda _: cli_run(endpoint, *query), range(RUNS)))
    assert faults.hits >= RUNS, "the fault was not exercised"
    failed = [p for p in runs if p.returncode != 3 or "Fatal Python error" in p.stderr
              or "Traceback" in p.stderr]
    assert not failed, (f"{len(failed)} of {RUNS} runs did not end as documented; the "
                        f"first:\n{describe(failed[0])}")
    for proc in runs:
        response = json.loads(proc.stdout)
        assert response["status"] == "error"
        assert response["errorType"] == "S3SliceTransientError"
        assert response["retryable"] is True
        assert SOURCE in response["errorMessage"] and "500" in response["errorMessage"]


def test_a_successful_query_exits_0(server: tuple[str, RangeFaults], faults: RangeFaults,
                                    table: pl.DataFrame) -> None:
    endpoint, _ = server
    proc = cli_run(endpoint, "query", "--source", SOURCE, "--columns", "col_1",
                   "--filter", "col_1 <= 50", "--return-rows")
    assert proc.returncode == 0, describe(proc)
    rows = pl.DataFrame(json.loads(proc.stdout)["rows"])
    assert rows.sort("col_1").equals(table.filter(pl.col("col_1") <= 50).select("col_1")
                                     .sort("col_1"))


def test_usage_errors_exit_2_before_any_request(server: tuple[str, RangeFaults],
                                                faults: RangeFaults) -> None:
    endpoint, _ = server
    proc = cli_run(endpoint, "query", "--source", SOURCE, "--sql", "SELECT col_1 FROM s3object",
                   "--filter", "col_1 <= 50", "--limit", "3")
    assert proc.returncode == 2, describe(proc)
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert "s3slice query: error: --filter and --limit cannot be combined with --sql" \
        in proc.stderr


def test_a_closed_stdout_is_reported_not_a_traceback(server: tuple[str, RangeFaults],
                                                     faults: RangeFaults) -> None:
    """``s3slice query ... | head -c 0``: the response cannot be delivered: exit 1, one line
    on stderr."""
    endpoint, _ = server
    env = {**os.environ, **LOCAL_CREDENTIALS, "POWERTOOLS_METRICS_DISABLED": "true"}
    with subprocess.Popen([sys.executable, "-m", "s3slice", "query", "--source", SOURCE,
                           "--columns", "col_1", "--return-rows", "--endpoint-url", endpoint],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        err = proc.stderr.read()
        code = proc.wait(timeout=120)
    assert code == 1, err[-1500:]
    assert "s3slice: stdout was closed before the response was written" in err
    assert "Traceback" not in err


def test_a_huge_limit_is_no_traceback(server: tuple[str, RangeFaults], faults: RangeFaults,
                                      table: pl.DataFrame) -> None:
    """The command line passes the limit to the request as given; the JSON API decides what
    it means (all the rows, as no limit, or a RequestError naming ``limit``), never a raw
    OverflowError."""
    endpoint, _ = server
    limits = [2**32 - 1, 2**32, 2**63, 2**64 + 1]
    with ThreadPoolExecutor(len(limits)) as pool:
        runs = list(pool.map(lambda n: cli_run(endpoint, "query", "--source", SOURCE,
                                               "--columns", "col_1", "--limit", str(n),
                                               "--return-rows"), limits))
    for limit, proc in zip(limits, runs, strict=True):
        assert "Traceback" not in proc.stderr, (limit, describe(proc))
        response = json.loads(proc.stdout)
        if proc.returncode == 0:
            assert len(response["rows"]) == table.height, limit
        else:
            assert proc.returncode == 3, (limit, describe(proc))
            assert response["errorType"] == "RequestError", limit
            assert "limit" in response["errorMessage"], limit


# ------------------------------------------------------------- a command line for people

def test_stdout_holds_only_the_answer_and_stderr_nothing_unless_verbose(
        server: tuple[str, RangeFaults], faults: RangeFaults) -> None:
    endpoint, _ = server
    query = ("query", "--source", SOURCE, "--columns", "col_1", "--filter", "col_1 <= 50")
    quiet = cli_run(endpoint, *query, metrics=True)
    assert quiet.returncode == 0, describe(quiet)
    assert quiet.stderr == ""
    assert json.loads(quiet.stdout)["status"] == "ok"
    failed = cli_run(endpoint, "query", "--source", f"s3://{BUCKET}/missing.parquet",
                     "--columns", "col_1", metrics=True)
    assert failed.returncode == 3, describe(failed)
    assert failed.stderr == ""  # the error once, as JSON on stdout
    assert json.loads(failed.stdout)["errorType"] == "ObjectNotFoundError"
    verbose = cli_run(endpoint, *query, "--verbose", metrics=True)
    assert verbose.returncode == 0, describe(verbose)
    assert json.loads(verbose.stdout)["status"] == "ok"
    lines = [json.loads(line) for line in verbose.stderr.splitlines()]
    assert any(line.get("message") == "request done" for line in lines)  # the logs
    assert any("_aws" in line and "BytesFetched" in line for line in lines)  # EMF


@pytest.mark.parametrize("form", ["table", "csv", "json"])
def test_print_puts_the_rows_on_stdout(server: tuple[str, RangeFaults], faults: RangeFaults,
                                       table: pl.DataFrame, form: str) -> None:
    endpoint, _ = server
    proc = cli_run(endpoint, "query", "--source", SOURCE, "--sql",
                   "SELECT region, COUNT(*) AS n FROM s3object WHERE col_1 <= 300000 "
                   "GROUP BY region ORDER BY region", "--print", form)
    assert proc.returncode == 0, describe(proc)
    assert proc.stderr == ""
    expected = (table.filter(pl.col("col_1") <= 300_000).group_by("region")
                .agg(pl.len().alias("n")).sort("region"))
    if form == "json":
        got = pl.DataFrame([json.loads(line) for line in proc.stdout.splitlines()])
    elif form == "csv":
        got = pl.read_csv(io.StringIO(proc.stdout))
    else:
        lines = proc.stdout.splitlines()
        assert lines[0].split() == ["region", "n"] and set(lines[1]) <= {"-", " "}
        assert lines[-1] == f"({expected.height} rows)"
        got = pl.DataFrame([line.split() for line in lines[2:-1]], schema=["region", "n"],
                           orient="row").with_columns(pl.col("n").cast(pl.Int64))
    assert got.cast({"n": pl.UInt32}).equals(expected.cast({"n": pl.UInt32}))


def test_a_profile_gives_its_credentials_and_its_region(
        server: tuple[str, RangeFaults], faults: RangeFaults, tmp_path: Any) -> None:
    endpoint, _ = server
    (tmp_path / "config").write_text("[profile team]\nregion = eu-central-1\n")
    (tmp_path / "credentials").write_text(
        f"[team]\naws_access_key_id = {LOCAL_CREDENTIALS['AWS_ACCESS_KEY_ID']}\n"
        f"aws_secret_access_key = {LOCAL_CREDENTIALS['AWS_SECRET_ACCESS_KEY']}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_CONFIG_FILE=str(tmp_path / "config"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "credentials"))
    proc = subprocess.run([sys.executable, "-m", "s3slice", "query", "--source", SOURCE,
                           "--columns", "col_1", "--limit", "1", "--profile", "team",
                           "--endpoint-url", endpoint], capture_output=True, text=True,
                          timeout=120, env=env, check=False)
    assert proc.returncode == 0, describe(proc)
    assert faults.regions == {"eu-central-1"}
    faults.regions.clear()
    proc = subprocess.run([sys.executable, "-m", "s3slice", "query", "--source", SOURCE,
                           "--columns", "col_1", "--limit", "1", "--profile", "team",
                           "--region", "ap-south-1", "--endpoint-url", endpoint],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 0, describe(proc)
    assert faults.regions == {"ap-south-1"}


def test_a_csv_source_read_with_the_input_options(server: tuple[str, RangeFaults],
                                                  faults: RangeFaults) -> None:
    endpoint, _ = server
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    client.put_object(Bucket=BUCKET, Key="log.data", Body=gzip.compress(
        b"user;status\nann;500\nbob;200\ncid;500\n"))
    proc = cli_run(endpoint, "query", "--source", f"s3://{BUCKET}/log.data", "--input-format",
                   "csv", "--delimiter", ";", "--compression", "gzip", "--columns", "user",
                   "--filter", "status = 500", "--print", "csv")
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout == "user\nann\ncid\n"


def test_a_csv_key_read_as_parquet_says_how_to_name_its_format(
        server: tuple[str, RangeFaults], faults: RangeFaults) -> None:
    endpoint, _ = server
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    client.put_object(Bucket=BUCKET, Key="export/day.txt", Body=b"a,b\n1,x\n2,y\n")
    proc = cli_run(endpoint, "query", "--source", f"s3://{BUCKET}/export/day.txt",
                   "--columns", "a")
    assert proc.returncode == 3, describe(proc)
    error = json.loads(proc.stdout)
    assert error["errorType"] == "ObjectFormatError"
    assert "not a Parquet object" in error["errorMessage"]
    assert "--input-format csv" in error["errorMessage"]
    assert '"input": "csv"' in error["errorMessage"]
    proc = cli_run(endpoint, "query", "--source", f"s3://{BUCKET}/export/day.txt",
                   "--columns", "a", "--input-format", "csv", "--print", "csv")
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout == "a\n1\n2\n"


def test_a_limit_without_a_filter_reads_only_the_row_groups_it_needs(
        server: tuple[str, RangeFaults], faults: RangeFaults, table: pl.DataFrame) -> None:
    """The object has 5 row groups of 20,000 rows: --limit 1 reads the first, --limit
    30000 the first two, a limit past the rows every group."""
    endpoint, _ = server
    for limit, groups in ((1, 1), (30_000, 2), (20_000, 1), (200_000, 5), (0, 0)):
        proc = cli_run(endpoint, "query", "--source", SOURCE, "--columns", "col_1,region",
                       "--limit", str(limit), "--return-rows")
        assert proc.returncode == 0, describe(proc)
        response = json.loads(proc.stdout)
        assert response["stats"]["row_groups_read"] == groups, limit
        got = pl.DataFrame(response["rows"], schema={"col_1": pl.Int64, "region": pl.String})
        assert got.equals(table.select("col_1", "region").head(limit)), limit


def test_a_sql_error_names_the_construct_not_the_parser(
        server: tuple[str, RangeFaults], faults: RangeFaults) -> None:
    endpoint, _ = server
    proc = cli_run(endpoint, "query", "--source", SOURCE, "--sql",
                   "SELECT col_1 FROM s3object WHERE col_1 >")
    assert proc.returncode == 3, describe(proc)
    error = json.loads(proc.stdout)
    assert error["errorType"] == "FilterSyntaxError"
    assert "ParseExpectedExpression: the operator '>' needs an expression" in \
        error["errorMessage"]
    assert "sqlglot" not in error["errorMessage"] and "<class" not in error["errorMessage"]
    assert faults.hits == 0 and proc.stderr == ""


@pytest.mark.parametrize("argv", [["--help"], ["query", "--help"], ["invoke", "--help"],
                                  ["demo", "--help"], ["--version"]])
def test_help_and_version_in_a_subprocess(argv: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "s3slice", *argv], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stderr == "", describe(proc)
    if argv == ["--version"]:
        assert re.fullmatch(r"s3slice \d+\.\d+\.\d+\S*\n", proc.stdout), proc.stdout
    else:
        assert "examples:\n  s3slice " in proc.stdout
        assert "exit codes:" in proc.stdout or argv == ["demo", "--help"]


def test_a_usage_error_and_a_typed_error_have_their_own_exit_codes(
        server: tuple[str, RangeFaults], faults: RangeFaults) -> None:
    endpoint, _ = server
    usage = cli_run(endpoint, "query", "--source", SOURCE)  # neither --sql nor --columns
    assert usage.returncode == 2 and usage.stdout == "", describe(usage)
    assert "usage: s3slice query" in usage.stderr
    typed = cli_run(endpoint, "query", "--source", SOURCE, "--columns", "nope")
    assert typed.returncode == 3 and typed.stderr == "", describe(typed)
    assert json.loads(typed.stdout)["errorType"] == "UnknownColumnError"


def test_version_imports_no_engine_library() -> None:
    """``s3slice --version`` (and ``import s3slice``) load neither polars, pyarrow, obstore,
    boto3 nor sqlglot: the public names are imported on first use."""
    probe = ("import runpy, sys\n"
             "sys.argv = ['s3slice', '--version']\n"
             "try:\n    runpy.run_module('s3slice', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "heavy = {'polars', 'pyarrow', 'obstore', 'boto3', 'sqlglot', 'numpy'}\n"
             "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, describe(proc)
    version, loaded = proc.stdout.splitlines()
    assert version.startswith("s3slice ") and loaded == "[]", proc.stdout
    # The lazy names still resolve.
    import s3slice

    assert callable(s3slice.read_parquet) and s3slice.Stats.__name__ == "Stats"
