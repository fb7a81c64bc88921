"""The app's settings: context parsing, documented defaults, and synth-time validation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from s3slice_cdk.settings import REPO_DIR, SettingsError, StackSettings

pytestmark = pytest.mark.infrastructure


def from_context(**context: Any) -> StackSettings:
    return StackSettings.from_context(context.get)


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
    assert settings.resolved_layer_dir == REPO_DIR / "layers" / "build" / "arm64"
    assert settings.queue_visibility_timeout_seconds == 6 * 300
    assert settings.nag is True


def test_command_line_strings_are_parsed() -> None:
    settings = from_context(
        sourceBucket="acme-landing", sourcePrefix="/events/", sourceSuffixes=".parquet, .csv",
        readUris="s3://acme-ref/dim/", outputBucket="acme-out", outputPrefix="sliced",
        query='{"sql": "SELECT a FROM t"}', memorySize="1024", ephemeralStorageSize="10240",
        timeoutSeconds="900", architecture="x86_64", pythonVersion="3.12",
        reservedConcurrency="0", workflowToleratedFailurePercentage="2.5", nag="false",
        layerDir="layers/build/custom", maxBatchingWindowSeconds="10")
    assert settings.source_prefix == "events/"
    assert settings.source_suffixes == (".parquet", ".csv")
    assert [(r.bucket, r.prefix) for r in settings.read_uris] == [("acme-ref", "dim/")]
    assert settings.output_prefix == "sliced/"
    assert settings.query == {"sql": "SELECT a FROM t"}
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
    ("incoming", "incoming-results/"),    # a prefix is not a folder: "incoming" matches
])
def test_output_inside_watched_prefix_is_rejected(source_prefix: str,
                                                  output_prefix: str) -> None:
    with pytest.raises(SettingsError, match="outputPrefix.*would\\s+trigger the function"):
        from_context(sourcePrefix=source_prefix, outputPrefix=output_prefix)
    # ... also when both settings name the same existing bucket
    with pytest.raises(SettingsError, match="outputPrefix"):
        from_context(sourceBucket="acme", outputBucket="acme",
                     sourcePrefix=source_prefix, outputPrefix=output_prefix)


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
    ({"workflowMaxConcurrency": "10001"}, "workflowMaxConcurrency"),
    ({"workflowToleratedFailurePercentage": "101"}, "workflowToleratedFailurePercentage"),
    ({"nag": "maybe"}, "nag"),
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
                            timeoutSeconds="900", workflowMaxConcurrency="10000")
    assert settings.ephemeral_storage_size == 10240
