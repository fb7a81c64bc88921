"""The pure parts of ``tests/benchmark/rie.py``: reading the Runtime Interface Emulator's
output, the events and answers of the two functions, and the table of medians. The
sample is what aws-lambda-rie (v0.0.0-20261030222936-bef5c4ba774d) printed for s3slice's
cold and warm invoke on 2026-11-27, the function's JSON log lines cut short."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmark.rie import COLUMNS, event, lambda_env, parse_log, rows_of, table
from tests.benchmark.rie_build import Function

SAMPLE = """\
27 Nov 2026 19:54:08,396 [INFO] (rapid) exec '/root/.pyenv/versions/3.13.0/bin/python3.13' \
(cwd=/var/task, handler=s3slice.handler.lambda_handler)
START RequestId: 4679e578-a5ab-4d14-bd6a-f0382c6fc897 Version: $LATEST
27 Nov 2026 19:54:08,415 [INFO] (rapid) INIT START(type: on-demand, phase: init)
27 Nov 2026 19:54:10,084 [INFO] (rapid) INIT RTDONE(status: success)
27 Nov 2026 19:54:10,084 [INFO] (rapid) INIT REPORT(durationMs: 1668.811000)
27 Nov 2026 19:54:10,084 [INFO] (rapid) INVOKE START(\
requestId: 4679e578-a5ab-4d14-bd6a-f0382c6fc897)
{"level":"INFO","location":"_direct:108","message":"request done","cold_start":true}
27 Nov 2026 19:54:12,314 [INFO] (rapid) INVOKE RTDONE(status: success, produced bytes: 0, \
duration: 2229.906000ms)
END RequestId: 4679e578-a5ab-4d14-bd6a-f0382c6fc897
REPORT RequestId: 4679e578-a5ab-4d14-bd6a-f0382c6fc897\tInit Duration: 0.05 ms\t\
Duration: 3899.13 ms\tBilled Duration: 3900 ms\tMemory Size: 512 MB\tMax Memory Used: 512 MB\t
START RequestId: a3668514-edfb-4d32-94a6-5869911c2691 Version: $LATEST
27 Nov 2026 19:54:12,318 [INFO] (rapid) INVOKE START(\
requestId: a3668514-edfb-4d32-94a6-5869911c2691)
27 Nov 2026 19:54:13,748 [INFO] (rapid) INVOKE RTDONE(status: success, produced bytes: 0, \
duration: 1429.641000ms)
END RequestId: a3668514-edfb-4d32-94a6-5869911c2691
REPORT RequestId: a3668514-edfb-4d32-94a6-5869911c2691\tDuration: 1429.85 ms\t\
Billed Duration: 1430 ms\tMemory Size: 512 MB\tMax Memory Used: 512 MB\t
27 Nov 2026 19:54:13,751 [INFO] (rapid) Received signal signal=terminated
"""

S3SLICE = Function("s3slice", Path("/l"), Path("/t"), "s3slice.handler.lambda_handler")
POLARS = Function("polars", Path("/l"), Path("/t"), "polars_fn.handler")


def test_init_and_invokes_come_from_rapid_not_from_reports_init_duration() -> None:
    log = parse_log(SAMPLE)
    assert log.init_ms is not None
    assert log.init_ms == pytest.approx(1668.811)
    assert log.invokes_ms == pytest.approx([2229.906, 1429.641])
    assert log.invoke_status == ["success", "success"]
    # The REPORT's "Init Duration" is the emulator's asynchronous Init call, not the init;
    # the first REPORT's Duration holds init + invoke.
    first, second = log.reports
    assert first.request_id == "4679e578-a5ab-4d14-bd6a-f0382c6fc897"
    assert first.init_ms == pytest.approx(0.05)
    assert second.init_ms is None
    assert first.duration_ms == pytest.approx(log.init_ms + log.invokes_ms[0], abs=1.0)
    assert second.duration_ms == pytest.approx(1429.85)


def test_a_failed_invoke_and_a_runtime_that_never_started_are_visible() -> None:
    failed = SAMPLE.replace("INVOKE RTDONE(status: success, produced bytes: 0, duration: 1429",
                            "INVOKE RTDONE(status: failure, produced bytes: 0, duration: 1429")
    assert parse_log(failed).invoke_status == ["success", "failure"]
    no_init = parse_log("\n".join(ln for ln in SAMPLE.splitlines() if "INIT REPORT" not in ln))
    assert no_init.init_ms is None
    assert parse_log("").reports == []


def test_each_function_gets_seed_004_and_its_answer_is_read() -> None:
    ev = event(S3SLICE, "s3://b/data.parquet", "s3://b/out/0")
    assert ev == {"source": "s3://b/data.parquet", "columns": ["col_1", "col_2"],
                  "filter": "col_1 <= 1000", "output": {"uri": "s3://b/out/0/"}}
    ev = event(POLARS, "s3://b/data.parquet", "s3://b/out/0")
    assert ev["max_col_1"] == 1000 and ev["output"] == "s3://b/out/0.parquet"
    assert rows_of(S3SLICE, {"outputs": [{"rows": 10_000}]}) == 10_000
    assert rows_of(POLARS, {"rows": 9_999}) == 9_999
    with pytest.raises(RuntimeError, match="polars failed: OSError: no such object"):
        rows_of(POLARS, {"errorType": "OSError", "errorMessage": "no such object"})


def test_lambda_env_lays_out_lambdas_paths_and_passes_the_endpoint() -> None:
    env = lambda_env(S3SLICE, 512, "http://127.0.0.1:9200", ("k", "s"))
    assert env["PYTHONPATH"].split(":")[0] == "/var/task"
    assert env["_HANDLER"] == "s3slice.handler.lambda_handler"
    assert env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "512"
    assert env["AWS_ENDPOINT_URL_S3"] == "http://127.0.0.1:9200"
    assert "POWERTOOLS_SERVICE_NAME" in env
    assert "POWERTOOLS_SERVICE_NAME" not in lambda_env(POLARS, 512, "e", ("k", "s"))


def test_table_gives_medians_and_the_ratio() -> None:
    def run(fn: str, base: float) -> dict[str, object]:
        return {"function": fn, **{key: base for key, _, _ in COLUMNS}}

    runs = [run("s3slice", 3.0), run("polars", 2.0), run("s3slice", 5.0), run("polars", 2.0),
            run("s3slice", 100.0)]
    runs[1]["peak_mb"] = None  # a figure one run lacks is left out of its median
    lines = table(runs).splitlines()
    s3slice = lines[2].split("|")
    assert s3slice[1].strip() == "s3slice" and s3slice[2].strip() == "3"
    assert s3slice[3].strip() == "5"  # median of 3, 5, 100
    ratio = lines[4].split("|")
    assert ratio[1].strip() == "s3slice / polars" and ratio[3].strip() == "2.50"
