"""The footer cache across warm invocations of the handler, on the local S3 server: a
direct invoke knows no ETag, so it asks S3 whether the object is still the one cached
(``If-None-Match`` on the suffix GET) and reuses the parsed footer when it is."""

from __future__ import annotations

import pytest

from s3slice import FOOTER_CACHE
from s3slice.cli.demo import sample_table
from s3slice.cli.invoke import LambdaContext
from s3slice.handler import lambda_handler
from tests.support import S3Env

pytestmark = pytest.mark.integration

BUCKET, KEY = "footers", "t.parquet"
REQUEST = {"source": f"s3://{BUCKET}/{KEY}", "columns": ["col_1"], "filter": "col_1 < 1000",
           "return_rows": True}


def read() -> dict[str, object]:
    response = lambda_handler(REQUEST, LambdaContext())
    assert isinstance(response, dict)
    return response


def test_a_warm_read_of_an_unchanged_object_reuses_its_footer(s3: S3Env) -> None:
    s3.bucket(BUCKET)
    s3.put_frame(BUCKET, KEY, sample_table(50_000, seed=1), row_group_size=10_000)
    FOOTER_CACHE.clear()
    first = read()
    s3.log.clear()
    second = read()
    assert first["rows"] == second["rows"]
    assert first["stats"]["strategy_inputs"]["footer"] == "suffix GET"  # type: ignore[index]
    assert second["stats"]["strategy_inputs"]["footer"] == "cache (revalidated)"  # type: ignore[index]
    # The footer came back as a 304 with no body: the second read fetched fewer bytes.
    assert (second["stats"]["bytes_fetched"]  # type: ignore[index]
            < first["stats"]["bytes_fetched"])  # type: ignore[index]
    assert s3.log.gets()[0].status == 304

    # Replaced: the same request now reads (and caches) the new object's footer.
    changed = sample_table(20_000, seed=2)
    s3.put_frame(BUCKET, KEY, changed, row_group_size=10_000)
    third = read()
    assert third["stats"]["strategy_inputs"]["footer"] == "suffix GET"  # type: ignore[index]
    assert len(third["rows"]) == changed.filter(  # type: ignore[arg-type]
        changed["col_1"] < 1000).height
