"""Iceberg tables written by real Spark (tests/spark/spark_iceberg_writer.py: v1 and v2, every
partition transform, partition and schema evolution, merge-on-read position deletes and
copy-on-write rewrites from DELETE/UPDATE/MERGE, nested types, odd names, gzip metadata,
object-storage paths, small row groups, several snapshots), read through the real handler
on the local S3 server: every answer equals pyiceberg's scan of the same snapshot or
polars.scan_iceberg's, evaluated in memory by polars' SQL; a typed refusal is only right
where a reference refuses too.

``make test`` runs a slice of the tables (SPARK_CI_TABLES in the Makefile, passed as
S3SLICE_SPARK_TABLES); ``make test-spark`` runs them all. The first run on a machine builds
Spark's venv and writes the tables (about ten minutes for all on a 2-core machine, see
tests/spark/spark_iceberg.py), and each table's comparisons take tens of seconds; later
runs reuse the tables. Without a JDK or Maven the module is skipped, except under CI,
where that is a failure."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from s3slice import S3SliceError
from s3slice.answer.textual import textual as _jsonable  # binary as base64, as the rows give it
from s3slice.cli.local_s3 import LOCAL_CREDENTIALS
from tests.spark.spark_iceberg import BUCKET, SparkTable, SparkUnavailable, load_tables, tables_tree
from tests.spark.spark_iceberg import upload as upload_tree
from tests.support import S3Env, invoke

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PRIMITIVE_QUERIES = [
    "SELECT * FROM s3object",
    "SELECT id, s, b FROM s3object WHERE s = 's5' OR s IS NULL",
    "SELECT id, ts, ntz FROM s3object WHERE ts >= '2024-01-10 00:00:00' "
    "AND ts < '2024-03-01 12:00:00'",
    "SELECT id, ntz FROM s3object WHERE ntz < TIMESTAMP '2023-09-01 05:00:00'",
    "SELECT id, day FROM s3object WHERE day BETWEEN DATE '2024-02-01' AND DATE '2024-02-20'",
    "SELECT id, dec, big FROM s3object WHERE dec > 5.5 AND id < 3000",
    "SELECT id, i, f FROM s3object WHERE i > 100 AND i <= 300 OR f < 2",
    "SELECT id FROM s3object WHERE id IN (3, 5, 7, 1000, 1499, 3001, 5002)",
    "SELECT flag, COUNT(*) AS n, SUM(i) AS si, MIN(ts) AS mn, MAX(d) AS mx, "
    "SUM(dec) AS sd FROM s3object GROUP BY flag",
    "SELECT COUNT(*) AS n, COUNT(s) AS ns FROM s3object WHERE s LIKE 's1%'",
]

QUERIES: dict[str, list[str]] = {
    "schema_evolution": [
        "SELECT * FROM s3object",
        "SELECT id, extra, count_n, x, amount FROM s3object WHERE count_n > 250",
        "SELECT id, category, note, old FROM s3object WHERE category = 'c1' AND note IS NULL",
        "SELECT id FROM s3object WHERE x > 90.5 AND amount < 250",
        "SELECT category, COUNT(*) AS n, SUM(count_n) AS s, SUM(amount) AS a "
        "FROM s3object GROUP BY category",
    ],
    "nested": [
        "SELECT * FROM s3object",
        "SELECT id, st, arr FROM s3object WHERE cat = 'g1' AND id > 100",
        "SELECT id, m, m_arr, arr_st FROM s3object WHERE id < 20 OR id > 990",
        "SELECT cat, COUNT(*) AS n FROM s3object GROUP BY cat",
    ],
    "odd_names": [
        "SELECT * FROM s3object",
        'SELECT "Upper Case", "ünï" FROM s3object WHERE "dash-col" = 1',
        'SELECT "dash-col", SUM("dot.col") AS s FROM s3object GROUP BY "dash-col"',
    ],
    "snapshots": [
        "SELECT * FROM s3object",
        "SELECT id, w FROM s3object WHERE w IS NULL AND id > 200",
        "SELECT COUNT(*) AS n FROM s3object",
    ],
}


def _props(env: S3Env) -> dict[str, str]:
    return {"s3.endpoint": env.endpoint_url,
            "s3.access-key-id": LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "s3.secret-access-key": LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            "s3.region": LOCAL_CREDENTIALS["AWS_REGION"]}


@pytest.fixture(scope="module")
def spark_tables(s3_server: S3Env) -> dict[str, SparkTable]:
    try:
        tree = tables_tree()
    except SparkUnavailable as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(e))
    s3_server.empty_bucket(BUCKET)
    upload_tree(tree, s3_server.client)
    return {t.name: t for t in load_tables(tree)}


def _names() -> list[str]:
    from tests.spark.spark_iceberg_writer import chosen

    return list(chosen())


Reference = Callable[[], pl.DataFrame]


def _pyiceberg(env: S3Env, table: SparkTable, snapshot: int | None) -> pl.DataFrame:
    from pyiceberg.table import StaticTable

    static = StaticTable.from_metadata(table.metadata, properties=_props(env))
    frame = pl.from_arrow(static.scan(snapshot_id=snapshot).to_arrow())
    assert isinstance(frame, pl.DataFrame)
    return frame


def _polars(env: S3Env, table: SparkTable, snapshot: int | None) -> pl.DataFrame:
    return pl.scan_iceberg(table.metadata, snapshot_id=snapshot,
                           storage_options=_props(env)).collect()


def _evaluate(base: Reference, sql: str) -> pl.DataFrame | Exception:
    try:
        return pl.SQLContext(s3object=base().rechunk()).execute(sql, eager=True)
    except Exception as e:  # noqa: BLE001 - a reference that refuses: any error counts
        return e


def _service(table: SparkTable, sql: str, snapshot: int | None) -> pl.DataFrame | S3SliceError:
    source: dict[str, Any] = {"iceberg": table.metadata}
    if snapshot is not None:
        source["snapshot_id"] = snapshot
    try:
        response = invoke({"source": source, "sql": sql, "return_rows": True})
    except S3SliceError as e:
        return e
    assert response["status"] == "ok", response
    return pl.DataFrame(response["rows"], infer_schema_length=None)


def _equal(got: pl.DataFrame, want: pl.DataFrame) -> str | None:
    """None when the rows are the same (in any order), else what differs."""
    if got.height == want.height == 0:  # (no rows: the inline answer names no columns)
        return None
    if got.columns != want.columns:
        return f"columns {got.columns} != {want.columns}"
    try:
        # as the inline rows show it (JSON), then in one order
        want = pl.DataFrame(json.loads(_jsonable(want).rechunk().write_json()),
                            infer_schema_length=None)
        got = got.cast(want.schema)  # type: ignore[arg-type]
        got = got.sort(got.columns, nulls_last=True)
        want = want.sort(want.columns, nulls_last=True)
        assert_frame_equal(got, want, check_exact=False, rel_tol=1e-9)
    except Exception as e:  # noqa: BLE001 - any difference, as text
        return str(e)[:600]
    return None


def check(env: S3Env, table: SparkTable, sql: str, snapshot: int | None = None) -> None:
    got = _service(table, sql, snapshot)
    references = {"pyiceberg": _evaluate(lambda: _pyiceberg(env, table, snapshot), sql),
                  "polars.scan_iceberg": _evaluate(lambda: _polars(env, table, snapshot), sql)}
    where = f"{table.name} (snapshot {snapshot or 'current'}): {sql}"
    if isinstance(got, S3SliceError):
        refused = {k: v for k, v in references.items() if isinstance(v, Exception)}
        assert refused, f"{where}: the service refused ({type(got).__name__}: {got}) " \
                        "where every reference answers"
        return
    differences = {}
    for name, want in references.items():
        if isinstance(want, Exception):
            differences[name] = f"refused: {type(want).__name__}: {str(want)[:300]}"
            continue
        difference = _equal(got, want)
        if difference is None:
            return
        differences[name] = difference
    pytest.fail(f"{where}: the service's answer differs from every reference: {differences}")


@pytest.mark.parametrize("name", _names())
def test_spark_table_answers_as_pyiceberg_or_polars(s3: S3Env, spark_tables: dict[str, SparkTable],
                                                     name: str) -> None:
    table = spark_tables[name]
    for sql in QUERIES.get(name, PRIMITIVE_QUERIES):
        check(s3, table, sql)


def test_every_snapshot_of_a_spark_table_by_id(s3: S3Env,
                                                spark_tables: dict[str, SparkTable]) -> None:
    names = [name for name in ("snapshots", "schema_evolution", "mor_merge",
                               "partition_evolution_v1") if name in spark_tables]
    assert names, "the tables written hold none with several snapshots"
    for name in names:
        table = spark_tables[name]
        assert len(table.snapshots) >= 2, table
        for snapshot in table.snapshots:
            check(s3, table, "SELECT * FROM s3object", snapshot)
