"""The app's settings: context parsing, documented defaults, and synth-time validation."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from s3slice_app.settings import StackSettings
from s3slice_cdk.contract import REPO_DIR
from s3slice_cdk.settings import SettingsError
from tests.infrastructure.support import from_context

pytestmark = pytest.mark.infrastructure


def test_documented_defaults() -> None:
    settings = from_context()
    assert settings == StackSettings()
    assert settings.source_bucket is None
    assert settings.source_prefix == "incoming/"
    assert settings.source_suffixes == (".parquet", ".csv", ".json", ".jsonl", ".ndjson")
    assert settings.output.bucket is None  # the same (created) bucket
    assert settings.output_prefix == "results/"
    assert settings.output_format == "parquet"
    assert settings.query == {}
    assert settings.memory_size == 3008
    assert settings.ephemeral_storage_size == 4096
    assert settings.timeout_seconds == 300
    assert settings.architecture == "arm64"
    assert settings.python_version == "3.13"
    assert settings.reserved_concurrency is None
    assert settings.account_concurrency == 1000
    assert settings.event_source_max_concurrency == 10
    assert settings.workflow_max_concurrency is None
    assert settings.workflow_concurrency == 100
    assert settings.workflow_timeout_hours == 24
    assert (settings.read_uris, settings.allow_whole_bucket_reads) == ((), False)
    assert settings.glue_tables == ()
    assert (settings.kms_key_arns, settings.bucket_accounts) == ((), ())
    assert (settings.alarm_topic_arn, settings.alarm_email) == (None, None)
    assert settings.noncurrent_version_days == 30
    assert settings.resolved_layer_dir == REPO_DIR / "layers" / "build" / "arm64"
    assert settings.queue_visibility_timeout_seconds == 6 * 300
    assert settings.nag is True
    assert settings.snap_start is False


def test_command_line_strings_are_parsed() -> None:
    settings = from_context(
        sourceBucket="acme-landing", sourcePrefix="/events/", sourceSuffixes=".parquet, .csv",
        readUris="s3://acme-ref/dim/", outputBucket="acme-out", outputPrefix="sliced",
        query='{"sql": "SELECT a FROM s3object"}', memorySize="1024", ephemeralStorageSize="10240",
        timeoutSeconds="900", architecture="x86_64", pythonVersion="3.12",
        reservedConcurrency="0", workflowToleratedFailurePercentage="2.5", nag="false",
        layerDir="layers/build/custom", maxBatchingWindowSeconds="10")
    assert settings.source_prefix == "events/"
    assert settings.source_suffixes == (".parquet", ".csv")
    assert [(r.bucket, r.prefix) for r in settings.read_uris] == [("acme-ref", "dim/")]
    assert settings.output_prefix == "sliced/"
    assert settings.query == {"sql": "SELECT a FROM s3object"}
    assert (settings.memory_size, settings.ephemeral_storage_size) == (1024, 10240)
    assert settings.timeout_seconds == 900
    assert settings.queue_visibility_timeout_seconds == 6 * 900 + 10
    assert (settings.architecture, settings.python_version) == ("x86_64", "3.12")
    assert settings.reserved_concurrency == 0
    assert settings.workflow_tolerated_failure_percentage == 2.5
    assert settings.nag is False
    assert settings.resolved_layer_dir == REPO_DIR / "layers" / "build" / "custom"
    assert from_context(architecture="x86_64").resolved_layer_dir.name == "x86_64"


def test_typed_cdk_json_values_are_accepted() -> None:
    settings = from_context(sourceSuffixes=[".csv"], query={"columns": ["a"]},
                            memorySize=2048, nag=False)
    assert settings.source_suffixes == (".csv",)
    assert settings.query == {"columns": ["a"]}
    assert settings.memory_size == 2048


def test_empty_values_mean_whole_bucket_and_any_suffix() -> None:
    settings = from_context(sourceBucket="acme-in", sourcePrefix="", sourceSuffixes="",
                            outputBucket="acme-out")
    assert settings.source_prefix == ""
    assert settings.source_suffixes == ()


@pytest.mark.parametrize(("source_prefix", "output_prefix"), [
    ("incoming/", "incoming/results/"),   # output inside the watched prefix
    ("incoming/", "incoming/"),           # the same prefix
    ("", "results/"),                     # the whole bucket is watched
    ("data/in/", "data/"),                # the watched prefix inside the output prefix
    ("incoming", "incoming/results"),     # both made folders: incoming/ and incoming/results/
])
def test_output_inside_watched_prefix_is_rejected(source_prefix: str,
                                                  output_prefix: str) -> None:
    with pytest.raises(SettingsError, match="outputPrefix.*would\\s+trigger the function"):
        from_context(sourcePrefix=source_prefix, outputPrefix=output_prefix)
    # ... also when both settings name the same existing bucket
    with pytest.raises(SettingsError, match="outputPrefix"):
        from_context(sourceBucket="acme", outputBucket="acme",
                     sourcePrefix=source_prefix, outputPrefix=output_prefix)


def test_every_prefix_is_a_folder() -> None:
    """``landing`` would grant (and watch) ``landing*``, ``landing-archive/`` included: every
    prefix setting gets its ``/``, so a sibling prefix is neither watched nor readable."""
    settings = from_context(sourcePrefix="landing", outputPrefix="landing-results",
                            workflowResultsPrefix="/landing-runs",
                            readUris="s3://acme-ref/dim,s3://acme-ref/facts/")
    assert settings.source_prefix == "landing/"
    assert settings.output_prefix == "landing-results/"
    assert settings.workflow_results_prefix == "landing-runs/"
    assert [r.prefix for r in settings.read_uris] == ["dim/", "facts/"]
    assert not settings.output.overlaps(settings.watched)
    # ... and a prefix set without its "/" in code is refused, not silently widened
    for field in ("source_prefix", "output_prefix", "workflow_results_prefix"):
        with pytest.raises(SettingsError, match="must .*end(ing)? with '/'"):
            StackSettings(**{field: "landing"})


def test_overlapping_prefixes_in_different_buckets_are_fine() -> None:
    settings = from_context(sourceBucket="acme-in", outputBucket="acme-out",
                            sourcePrefix="data/", outputPrefix="data/")
    assert settings.output.bucket == "acme-out"


def test_workflow_results_inside_watched_prefix_is_rejected() -> None:
    with pytest.raises(SettingsError, match="workflowResultsPrefix"):
        from_context(workflowResultsPrefix="incoming/runs/")


def test_error_message_says_what_to_do() -> None:
    with pytest.raises(SettingsError) as caught:
        from_context(outputPrefix="incoming/out/")
    message = str(caught.value)
    assert "'incoming/out/'" in message
    assert "'incoming/'" in message
    assert "outputBucket" in message


@pytest.mark.parametrize(("context", "key"), [
    ({"ephemeralStorageSize": "10241"}, "ephemeralStorageSize"),
    ({"ephemeralStorageSize": "511"}, "ephemeralStorageSize"),
    ({"memorySize": "127"}, "memorySize"),
    ({"memorySize": "lots"}, "memorySize"),
    ({"timeoutSeconds": "901"}, "timeoutSeconds"),
    ({"timeoutSeconds": "3"}, "timeoutSeconds"),
    ({"query": "{\"sql\": \"SELECT a FROM s3object WHERE\"}"}, "settings: query"),
    ({"architecture": "arm"}, "architecture"),
    ({"pythonVersion": "3.9"}, "pythonVersion"),
    ({"outputFormat": "xml"}, "outputFormat"),
    ({"query": "{not json"}, "query"),
    ({"query": "[1, 2]"}, "query"),
    ({"query": json.dumps({"colums": ["a"]})}, "query"),
    ({"sourceBucket": "Not_A_Bucket"}, "sourceBucket"),
    ({"readUris": "https://example.com/x"}, "readUris"),
    ({"alarmTopicArn": "ops-alerts"}, "alarmTopicArn"),
    ({"batchSize": "20"}, "batchSize"),
    ({"eventSourceMaxConcurrency": "1"}, "eventSourceMaxConcurrency"),
    ({"eventSourceMaxConcurrency": "1001"}, "eventSourceMaxConcurrency"),
    ({"workflowTimeoutHours": "0"}, "workflowTimeoutHours"),
    ({"workflowTimeoutHours": "8761"}, "workflowTimeoutHours"),
    ({"noncurrentVersionDays": "0"}, "noncurrentVersionDays"),
    ({"accountConcurrency": "9"}, "accountConcurrency"),
    ({"alarmEmail": "ops"}, "alarmEmail"),
    ({"bucketAccounts": "12345"}, "bucketAccounts"),
    ({"kmsKeyArns": "arn:aws:kms:eu-west-1:123456789012:alias/data"}, "kmsKeyArns"),
    ({"kmsKeyArns": "arn:aws:kms:eu-west-1:123456789012:key/*"}, "kmsKeyArns"),
    ({"kmsKeyArns": "1234abcd-12ab-34cd-56ef-1234567890ab"}, "kmsKeyArns"),
    ({"allowWholeBucketReads": "perhaps"}, "allowWholeBucketReads"),
    ({"workflowMaxConcurrency": "10001"}, "workflowMaxConcurrency"),
    ({"workflowToleratedFailurePercentage": "101"}, "workflowToleratedFailurePercentage"),
    ({"nag": "maybe"}, "nag"),
    ({"snapStart": "sometimes"}, "snapStart"),
    ({"sourceSuffixes": "json,.geojson"}, "sourceSuffixes"),
    ({"sourceSuffixes": ".csv,.csv"}, "sourceSuffixes"),
])
def test_invalid_settings_name_their_key(context: dict[str, Any], key: str) -> None:
    with pytest.raises(SettingsError, match=key):
        from_context(**context)


def test_suffixes_overlap_only_as_strings() -> None:
    """S3 compares suffixes as strings: ``.geojson`` does not end with ``.json``, so keys
    ending in one never match the other and both rules can coexist."""
    settings = from_context(sourceSuffixes=".json,.geojson")
    assert settings.source_suffixes == (".json", ".geojson")


def test_largest_values_are_accepted() -> None:
    settings = from_context(ephemeralStorageSize="10240", memorySize="10240",
                            timeoutSeconds="900", workflowMaxConcurrency="10000",
                            eventSourceMaxConcurrency="1000", accountConcurrency="20000",
                            workflowTimeoutHours="8760")
    assert settings.ephemeral_storage_size == 10240
    assert settings.workflow_concurrency == 10000


# ----------------------------------------------------------------------------- wildcards
#: Each grants more than it names: IAM matches * and ? in the ARNs and s3:prefix conditions
#: (landing*/ covers landing/, */ covers every folder), ${...} is a policy variable.
ESCAPES = [
    ({"sourcePrefix": "landing/", "outputPrefix": "landing*/"}, "outputPrefix", "'\\*'"),
    ({"outputPrefix": "*/"}, "outputPrefix", "'\\*'"),
    ({"sourcePrefix": "*", "outputBucket": "acme-out"}, "sourcePrefix", "'\\*'"),
    ({"sourcePrefix": "landing/", "workflowResultsPrefix": "land?ng/"},
     "workflowResultsPrefix", "'\\?'"),
    ({"readUris": "s3://acme-ref/dim*/"}, "readUris", "'\\*'"),
    ({"readUris": "s3://acme-ref/d?m/"}, "readUris", "'\\?'"),
    ({"sourcePrefix": "${aws:username}/"}, "sourcePrefix", "'\\$'"),
    ({"outputPrefix": "out put/"}, "outputPrefix", "' '"),
    ({"outputPrefix": "100%/"}, "outputPrefix", "'%'"),
    ({"sourcePrefix": "a+b/"}, "sourcePrefix", "'\\+'"),
    ({"sourcePrefix": "caf\u00e9/"}, "sourcePrefix", "'\u00e9'"),
    ({"sourceSuffixes": "*.parquet"}, "sourceSuffixes", "'\\*'"),
]


@pytest.mark.parametrize(("context", "key", "character"), ESCAPES)
def test_wildcards_and_special_characters_are_refused(context: dict[str, Any], key: str,
                                                      character: str) -> None:
    with pytest.raises(SettingsError, match=f"^{key}: .* contains {character}"):
        from_context(**context)


def test_safe_punctuation_is_accepted() -> None:
    """Hive-style partitions and S3's safe characters stay usable."""
    settings = from_context(sourcePrefix="landing/year=2024/", outputPrefix="out_(v1)!/",
                            readUris="s3://acme-ref/it's-dim.v2/")
    assert settings.source_prefix == "landing/year=2024/"


# ----------------------------------------------------------------------------- readUris
@pytest.mark.parametrize(("context", "match"), [
    ({"readUris": "s3://acme/results/"}, "overlaps the output location"),
    ({"readUris": "s3://acme/results/2024/"}, "overlaps the output location"),
    ({"readUris": "s3://acme/"}, "overlaps the output location"),
    ({"readUris": "s3://acme-out/sliced/old/", "outputBucket": "acme-out",
      "outputPrefix": "sliced/"}, "overlaps the output location"),
    ({"readUris": "s3://acme-ref"}, "names the whole bucket acme-ref.*allowWholeBucketReads"),
    ({"readUris": "s3://acme-ref/"}, "names the whole bucket"),
])
def test_read_uris_never_overlap_the_output_nor_name_a_whole_bucket(
        context: dict[str, Any], match: str) -> None:
    with pytest.raises(SettingsError, match=f"^readUris: .*{match}"):
        from_context(sourceBucket="acme", **context)


def test_a_whole_bucket_is_readable_only_when_allowed() -> None:
    settings = from_context(sourceBucket="acme", readUris="s3://acme-ref",
                            allowWholeBucketReads="true")
    assert [(r.bucket, r.prefix) for r in settings.read_uris] == [("acme-ref", "")]
    # ... never the output's bucket, allowed or not
    with pytest.raises(SettingsError, match="overlaps the output"):
        from_context(sourceBucket="acme", readUris="s3://acme", allowWholeBucketReads="true")


# ----------------------------------------------------------------------------- concurrency
def test_concurrency_fits_the_account_by_default() -> None:
    """The queue's cap (10) and the map's (100) together stay within Lambda's default
    account quota (1,000); a smaller budget shrinks the map's default to fit."""
    settings = from_context()
    assert settings.event_source_max_concurrency + settings.workflow_concurrency <= 1000
    assert from_context(reservedConcurrency="50").workflow_concurrency == 40
    assert from_context(accountConcurrency="60").workflow_concurrency == 50
    assert from_context(eventSourceMaxConcurrency="30",
                        reservedConcurrency="100").workflow_concurrency == 70


@pytest.mark.parametrize("context", [
    {"workflowMaxConcurrency": "991"},                              # 10 + 991 > 1000
    {"workflowMaxConcurrency": "1000"},
    {"eventSourceMaxConcurrency": "1000", "workflowMaxConcurrency": "1"},
    {"reservedConcurrency": "50", "workflowMaxConcurrency": "41"},  # 10 + 41 > 50
    {"reservedConcurrency": "5"},                                   # 10 alone > 5
    {"accountConcurrency": "10"},
])
def test_concurrency_beyond_the_budget_is_refused(context: dict[str, Any]) -> None:
    with pytest.raises(SettingsError,
                       match="^eventSourceMaxConcurrency \\+ workflowMaxConcurrency: .* exceed"):
        from_context(**context)


def test_reserved_concurrency_leaves_lambdas_unreserved_minimum() -> None:
    with pytest.raises(SettingsError, match="^reservedConcurrency: 901 exceeds"):
        from_context(reservedConcurrency="901")
    assert from_context(reservedConcurrency="900",
                        workflowMaxConcurrency="890").reserved_concurrency == 900
    # 0 switches the function off: nothing runs, so no cap is checked against it
    assert from_context(reservedConcurrency="0").reserved_concurrency == 0


def test_lists_of_keys_and_accounts_are_parsed() -> None:
    keys = ("arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab,"
            "arn:aws-cn:kms:cn-north-1:123456789012:key/mrk-1234abcd12ab34cd56ef1234567890ab")
    settings = from_context(kmsKeyArns=keys, bucketAccounts="210987654321, 111122223333",
                            alarmEmail="ops@acme.example")
    assert settings.kms_key_arns == tuple(keys.split(","))
    assert settings.bucket_accounts == ("210987654321", "111122223333")
    assert settings.alarm_email == "ops@acme.example"


# ----------------------------------------------------------------------------- glueTables
@pytest.mark.parametrize("raw", [
    "sales.orders, ops.run_log-2",            # the command line: comma-separated
    '["sales.orders", "ops.run_log-2"]',     # a JSON list given as a string
    ["sales.orders", " ops.run_log-2 "],     # cdk.json: a typed list
    "sales.orders,,ops.run_log-2,",          # empty items are dropped, as readUris'
])
def test_glue_tables_are_parsed_as_read_uris_are(raw: Any) -> None:
    assert from_context(glueTables=raw).glue_tables == ("sales.orders", "ops.run_log-2")


@pytest.mark.parametrize("raw", ["", " ", [], "[]"])
def test_no_glue_tables_is_the_default(raw: Any) -> None:
    assert from_context(glueTables=raw) == StackSettings()


@pytest.mark.parametrize("name", [
    "orders",              # no database
    "sales.",              # no table
    ".orders",
    "sales.Orders",        # Glue keeps names in lowercase: this one never matches a table
    "sales.orders.v2",     # a '.' in the table's name: not one table ARN
    "sales.ord*",          # IAM wildcards would grant more than the name
    "sales.ord?rs",
    "*.orders",
    "${aws:username}.orders",  # an IAM policy variable
    "sales/orders",
    "sales.or ders",
    "s" * 256 + ".orders",  # longer than Glue allows
])
def test_a_glue_table_that_is_not_database_dot_table_is_refused(name: str) -> None:
    with pytest.raises(SettingsError, match=f"^glueTables: {re.escape(repr(name))} is not "
                                            "'database.table'"):
        from_context(glueTables=f"sales.items,{name}")
    with pytest.raises(SettingsError, match="^glueTables: "):  # ... typed, from cdk.json
        from_context(glueTables=["sales.items", name])


@pytest.mark.parametrize("raw", [3, {"sales": "orders"}, ["sales.orders", 3]])
def test_glue_tables_of_another_type_are_refused(raw: Any) -> None:
    with pytest.raises(SettingsError, match="^glueTables: "):
        from_context(glueTables=raw)


def test_the_longest_glue_names_are_accepted() -> None:
    name = "d" * 255 + "." + "t_-9" * 63 + "t_-"
    assert from_context(glueTables=name).glue_tables == (name,)
