"""The README's commands, extracted from it and run as a newcomer would: ``make demo``, the
command-line examples and the Python snippet against a local S3 server holding the
buckets they name. Commands that need an AWS account (deploying, ``aws lambda invoke``)
are named here, each with the test that covers it instead; a command in the README that
is neither run nor named fails the test."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from s3slice.cli.local_s3 import LOCAL_CREDENTIALS
from tests.support import S3Env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

#: Commands that need an AWS account or are the test suite itself: covered elsewhere.
NOT_RUN_HERE = {
    "make test": "this suite",
    "make setup": "make test runs it first",
    "npm ci": "make test runs it (make tools)",
    "export": "shell set-up",
    "cdk ": "an AWS account; the stack is synthesized by tests/infrastructure/",
    "python layers/build.py": "tests/infrastructure/test_layer.py builds the layer",
    "aws ": "an AWS account; the payload is the JSON contract tested through the handler",
    "--context": "continues cdk deploy",
    "--payload": "continues aws lambda invoke",
    "\"filter\"": "continues aws lambda invoke",
}


def commands(language: str) -> list[str]:
    """The README's code blocks in ``language``: shell lines joined at their
    continuations and stripped of comments; Python blocks whole."""
    blocks = re.findall(rf"```{language}\n(.*?)```", README.read_text(), re.S)
    if language == "python":
        return blocks
    lines: list[str] = []
    for block in blocks:
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def test_the_first_two_commands_are_the_demo_and_the_tests() -> None:
    assert commands("bash")[:2] == ["make demo", "make test"]


def test_make_demo_runs_and_its_answer_is_equal_to_polars() -> None:
    done = subprocess.run(["make", "demo"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "result equals a local polars read of the same table: True" in done.stdout


@pytest.fixture
def buckets(s3: S3Env) -> S3Env:
    """The buckets and objects the README's examples name."""
    trips = pl.DataFrame({"a": range(5_000), "b": [i % 7 for i in range(5_000)],
                          "amount": [i % 300 for i in range(5_000)],
                          "region": [("north", "south", "east")[i % 3] for i in range(5_000)]})
    for name in ("my-data", "my-results", "example-data", "example-results"):
        s3.bucket(name)
    s3.put_frame("my-data", "landing/trips.parquet", trips)
    from s3slice.cli.demo import sample_table

    s3.put_frame("example-data", "sales/2024/orders.parquet", sample_table(20_000))
    return s3


def test_every_shell_command_runs_or_is_named(buckets: S3Env) -> None:
    env = {**os.environ, **LOCAL_CREDENTIALS, "AWS_ENDPOINT_URL_S3": buckets.endpoint_url}
    ran = 0
    for line in commands("bash")[2:]:
        if any(line.startswith(prefix) for prefix in NOT_RUN_HERE):
            continue
        argv = shlex.split(line)
        assert argv[0] == ".venv/bin/s3slice", f"a README command neither run nor named: {line}"
        done = subprocess.run([sys.executable, "-m", "s3slice", *argv[1:]], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, f"{line}\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}"
        assert done.stderr == "", line
        ran += 1
    assert ran >= 3
    assert buckets.keys("my-results", "sliced/")  # the first example wrote its result


def test_the_python_snippet_runs(buckets: S3Env) -> None:
    [snippet] = commands("python")
    env = {**os.environ, **LOCAL_CREDENTIALS, "AWS_ENDPOINT_URL_S3": buckets.endpoint_url}
    done = subprocess.run([sys.executable, "-c", snippet], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-1500:]
    assert "row_groups_read" in done.stdout  # the stats printed with the frame
