"""``s3slice demo`` as a newcomer runs it: a subprocess on an embedded S3, its outputs in
order with no log line between them, a request that can be pasted into ``aws lambda
invoke``, pruning that shows, and figures that agree with the response."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_the_demo_says_what_it_did_truthfully() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "POWERTOOLS_"))}
    done = subprocess.run([sys.executable, "-m", "s3slice", "demo", "--rows", "400000"],
                          capture_output=True, text=True, timeout=300, env=env, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stderr == ""
    out = done.stdout
    # No log or metric line anywhere: every line is the demo's own or the response's.
    assert '"level"' not in out and '"_aws"' not in out

    # The request, pasteable: the command's --payload is the JSON request.
    command = re.search(r"aws lambda invoke (.+?) response\.json", out.replace("\\\n", " "),
                        re.S)
    assert command is not None, out
    words = shlex.split(command.group(1))
    request = json.loads(words[words.index("--payload") + 1])
    assert request["source"] == "s3://s3slice-demo/sales/2024/orders.parquet"
    # Valid shell: the query's own quotes survive the pasting.
    assert "region = 'north'" in request["sql"]
    assert "--cli-binary-format" in words

    response = json.loads(out[out.index("response:\n") + len("response:\n"):
                              out.index("\n}\n") + 2])
    stats = response["stats"]
    # Clustered data: pruning shows.
    assert stats["row_groups_read"] < stats["row_groups"] == 8
    assert f"read {stats['row_groups_read']} of 8 row groups" in out
    # The printed time is the response's own.
    assert f"; {stats['timings_ms']['total']:.0f} ms (timings_ms.total)" in out
    rows = stats["rows_out"]
    assert f"first {min(8, rows)} of {rows:,} rows:" in out
    assert out.rstrip().endswith("result equals a local polars read of the same table: True")
