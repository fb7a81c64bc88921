from __future__ import annotations

import pytest

from s3slice import ConfigurationError, RequestError, Settings


def test_environment_then_explicit_arguments() -> None:
    env = {"AWS_ENDPOINT_URL": "http://generic:1", "AWS_ENDPOINT_URL_S3": "http://s3:2",
           "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024", "S3SLICE_STRATEGY": "ranges",
           "AWS_REGION": "eu-west-1"}
    s = Settings.from_env(env)
    assert s.endpoint_url == "http://s3:2"
    assert (s.memory_mb, s.strategy, s.region) == (1024, "ranges", "eu-west-1")
    assert s.memory_budget_bytes == int(1024 * 0.6 * 1024 * 1024)
    assert Settings.from_env(env, strategy="whole").strategy == "whole"


def test_generic_endpoint_is_used_without_the_s3_one() -> None:
    assert Settings.from_env({"AWS_ENDPOINT_URL": "http://x:9"}).endpoint_url == "http://x:9"


def test_concurrency_scales_with_memory() -> None:
    small = Settings.from_env({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "128"})
    big = Settings.from_env({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "10240"})
    assert 8 == small.max_concurrency < big.max_concurrency == 64


@pytest.mark.parametrize(("env", "variable"), [
    ({"S3SLICE_STRATEGY": "fastest"}, "S3SLICE_STRATEGY"),
    ({"S3SLICE_STRATEGY": "fast"}, "S3SLICE_STRATEGY"),
    ({"S3SLICE_FOOTER_SIZE": "abc"}, "S3SLICE_FOOTER_SIZE"),
    ({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "lots"}, "AWS_LAMBDA_FUNCTION_MEMORY_SIZE"),
    ({"S3SLICE_PART_SIZE": "0"}, "S3SLICE_PART_SIZE"),
    ({"S3SLICE_UPLOAD_PART_SIZE": str(5 * 1024 * 1024 - 1)}, "S3SLICE_UPLOAD_PART_SIZE"),
])
def test_a_bad_variable_is_a_configuration_error_naming_it(env: dict[str, str],
                                                           variable: str) -> None:
    with pytest.raises(ConfigurationError, match=variable) as info:
        Settings.from_env(env)
    assert info.value.variable == variable


def test_a_bad_explicit_argument_is_the_callers_request_error() -> None:
    with pytest.raises(RequestError, match="strategy") as info:
        Settings.from_env({}, strategy="fast")
    assert not isinstance(info.value, ConfigurationError)


@pytest.mark.parametrize(("memory_mb", "in_flight"), [(128, 1), (512, 2), (1024, 4), (10240, 12)])
def test_upload_parts_in_flight_stay_within_a_quarter_of_the_budget(memory_mb: int,
                                                                    in_flight: int) -> None:
    s = Settings.from_env({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(memory_mb)})
    assert s.upload_concurrency == in_flight
    assert in_flight == 1 or in_flight * s.upload_part_size <= s.memory_budget_bytes // 4
