"""The function's configuration: read from the environment, checked at cold start, and the
recursion guard between its output and the sources its triggers watch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from s3slice import AccessDeniedError, ConfigurationError, RequestError
from s3slice.core.model import ObjectRef, Query
from s3slice.entry.config import Config, parse_query_config, refuse_unwatched, watched


def test_configuration_is_read_and_checked() -> None:
    cfg = Config.from_env({"S3SLICE_QUERY": '{"columns": ["a"], "filter": "a > 1"}',
                           "S3SLICE_OUTPUT_URI": "s3://out/results/",
                           "S3SLICE_OUTPUT_FORMAT": "csv",
                           "S3SLICE_SOURCE_URIS": "s3://in/incoming/, s3://in2/"})
    assert cfg.query is not None
    assert cfg.query.columns == ("a",)
    assert cfg.output is not None
    assert cfg.output.format == "csv"
    assert cfg.sources == (("in", "incoming/"), ("in2", ""))
    assert cfg.is_output(ObjectRef(bucket="out", key="results/x.csv"))
    assert not cfg.is_output(ObjectRef(bucket="out", key="other/x.csv"))


def test_plain_sql_is_accepted_as_the_configured_query() -> None:
    cfg = Config.from_env({"S3SLICE_QUERY": "SELECT a FROM s3object WHERE a > 1"})
    assert cfg.query is not None
    assert cfg.query.sql == "SELECT a FROM s3object WHERE a > 1"


@pytest.mark.parametrize(("env", "variable"), [
    ({"S3SLICE_QUERY": '{"sql": "SELECT * FROM read_csv(\'/etc/passwd\')"}'}, "S3SLICE_QUERY"),
    ({"S3SLICE_QUERY": "[1, 2]"}, "S3SLICE_QUERY"),
    ({"S3SLICE_QUERY": '{"filter": "a >"}'}, "S3SLICE_QUERY"),
    ({"S3SLICE_OUTPUT_URI": "results/"}, "S3SLICE_OUTPUT_URI"),
    ({"S3SLICE_OUTPUT_URI": "s3://o/r/", "S3SLICE_OUTPUT_FORMAT": "xml"}, "S3SLICE_OUTPUT_URI"),
    ({"S3SLICE_SOURCE_URIS": "s3://ok/, nope"}, "S3SLICE_SOURCE_URIS"),
    ({"S3SLICE_FOOTER_SIZE": "abc"}, "S3SLICE_FOOTER_SIZE"),
    ({"S3SLICE_STRATEGY": "fast"}, "S3SLICE_STRATEGY"),
])
def test_bad_configuration_names_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigurationError, match=variable):
        Config.from_env(env)


@pytest.mark.parametrize(("output", "sources"), [
    ("s3://data/incoming/results/", "s3://data/incoming/"),   # output inside a source
    ("s3://data/", "s3://data/incoming/"),                    # a source inside the output
    ("s3://data/incoming/", "s3://other/, s3://data/incoming/"),
])
def test_output_that_would_trigger_the_function_again_is_refused(output: str,
                                                                  sources: str) -> None:
    with pytest.raises(ConfigurationError, match="trigger the function again"):
        Config.from_env({"S3SLICE_OUTPUT_URI": output, "S3SLICE_SOURCE_URIS": sources})


def test_disjoint_output_and_sources_are_accepted() -> None:
    config = Config.from_env({"S3SLICE_OUTPUT_URI": "s3://data/results/",
                              "S3SLICE_SOURCE_URIS": "s3://data/incoming/"})
    assert config.sources == (("data", "incoming/"),)
    assert config.output is not None and config.output.uri == "s3://data/results/"
    assert config.is_output(ObjectRef(bucket="data", key="results/x.parquet"))
    assert not config.is_output(ObjectRef(bucket="data", key="incoming/x.parquet"))


def test_a_step_functions_input_missing_its_query_names_the_field() -> None:
    with pytest.raises(RequestError, match="BatchInput.query or configure") as info:
        Config().require(what="a Step Functions input", given_in="BatchInput")
    assert info.value.field == "BatchInput.query"


def test_triggered_runs_need_query_and_output() -> None:
    with pytest.raises(ConfigurationError, match="S3SLICE_QUERY"):
        Config().require(what="an s3 event")


def test_a_query_given_as_an_object_is_parsed_as_json_text_is() -> None:
    given = {"columns": ["a"], "filter": "a > 1", "limit": 3}
    expected = Query(columns=("a",), filter="a > 1", limit=3)
    assert parse_query_config(given, variable="V") == expected
    assert parse_query_config('{"columns": ["a"], "filter": "a > 1", "limit": 3}',
                              variable="V") == expected


@pytest.mark.parametrize(("raw", "needle"), [
    ({"colums": ["a"]}, "unknown field(s) ['colums']"),
    ('"SELECT 1"', "expected a JSON object"),
    ({"limit": -1}, "limit: must not be negative"),
    ({"sql": "SELECT nope("}, "cannot parse"),
])
def test_a_bad_configured_query_names_the_variable_it_came_from(raw: object,
                                                                 needle: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_query_config(raw, variable="MY_QUERY")  # type: ignore[arg-type]
    assert info.value.variable == "MY_QUERY"
    assert needle in str(info.value)


@pytest.mark.parametrize(("variable", "value"), [("S3SLICE_FOOTER_SIZE", "abc"),
                                                 ("S3SLICE_STRATEGY", "fast")])
def test_a_bad_tuning_variable_fails_the_init(variable: str, value: str) -> None:
    """Lambda imports the handler at init: a bad variable must fail there, as a
    ConfigurationError, not as a RequestError on every invoke (which a Step Functions
    Catch would blame on the caller)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("S3SLICE_")}
    env[variable] = value
    done = subprocess.run([sys.executable, "-c", "import s3slice.handler"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("s3slice.core.errors.ConfigurationError: " + variable), done.stderr


@pytest.mark.parametrize(("bucket", "key", "source", "inside"), [
    ("b", "landing/x", ("b", "landing/"), True),
    ("b", "landing/deep/x", ("b", "landing/"), True),
    ("b", "landing2/x", ("b", "landing/"), False),
    ("b", "landing", ("b", "landing/"), False),
    ("b", "Landing/x", ("b", "landing/"), False),
    ("b2", "landing/x", ("b", "landing/"), False),
    ("bb", "landing/x", ("b", "landing/"), False),
    ("b", "landing/x", ("bb", "landing/"), False),
    # A prefix written without its '/' is a folder too: never landing2/x.
    ("b", "landing/x", ("b", "landing"), True),
    ("b", "landing", ("b", "landing"), True),
    ("b", "landing2/x", ("b", "landing"), False),
    ("b", "landingx", ("b", "landing"), False),
    # An empty prefix is the whole bucket, and only that bucket.
    ("b", "anything/at/all", ("b", ""), True),
    ("c", "anything", ("b", ""), False),
])
def test_a_watched_source_is_a_bucket_and_a_folder(bucket: str, key: str,
                                                   source: tuple[str, str],
                                                   inside: bool) -> None:
    assert watched(bucket, key, source) is inside


def test_an_unwatched_object_is_refused_naming_it_and_every_source() -> None:
    sources = (("in", "landing/"), ("in2", ""))
    assert refuse_unwatched(ObjectRef(bucket="in2", key="x"), sources, named_by="N") is None
    assert refuse_unwatched(ObjectRef(bucket="out", key="x"), (), named_by="N") is None
    error = refuse_unwatched(ObjectRef(bucket="in", key="landing2/x"), sources, named_by="N")
    assert isinstance(error, AccessDeniedError)
    assert not error.retryable
    assert error.uri == "s3://in/landing2/x"
    assert error.message.startswith("s3://in/landing2/x: outside the watched sources "
                                    "s3://in/landing/, s3://in2/ (N)")
