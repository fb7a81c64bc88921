"""Columns added to an Iceberg table with a default, through the real handler: the rows of
data files written before a column was added read its ``initial-default`` (the spec's
column projection), of every type the spec's JSON single-value form encodes, at the top
level and inside a struct; its ``write-default`` is never read. Every answer equals
pyiceberg's scan of the same snapshot and polars' ``scan_iceberg``; a default that is not
a value of its type is refused by name."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

from s3slice.answer.textual import textual
from tests.integration.test_iceberg_tables import (
    Warehouse,
    fails,
    put,
    pyiceberg_rows,
    query,
    same,
    warehouse,  # noqa: F401 - the module's fixture
)
from tests.support import S3Env

pytestmark = pytest.mark.integration

#: (name, pyiceberg type, default): one column of each type added with a default.
ADDED: list[tuple[str, str, Any]] = [
    ("i", "IntegerType", 7),
    ("l", "LongType", -(2**40)),
    ("f", "FloatType", 1.5),
    ("d", "DoubleType", -2.25),
    ("b", "BooleanType", True),
    ("s", "StringType", "fallback"),
    ("dt", "DateType", dt.date(2017, 11, 16)),
    ("ts", "TimestampType", dt.datetime(2017, 11, 16, 22, 31, 8, 123456)),
    ("tz", "TimestamptzType", dt.datetime(2017, 11, 16, 22, 31, 8, 1, tzinfo=dt.UTC)),
    ("dec", "DecimalType", decimal.Decimal("14.20")),
    ("bin", "BinaryType", b"\x00\x01\x02\xff"),
    ("none", "StringType", None),
]


def oracle(table: Any) -> pl.DataFrame:
    """pyiceberg's scan, binary as the service's inline rows give it (base64 text)."""
    return textual(pyiceberg_rows(table))


def first_rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "st": pa.array([{"x": i} for i in ids], pa.struct([("x", pa.int64())]))})


@pytest.fixture(scope="module")
def defaults(warehouse: Warehouse) -> Any:  # noqa: F811
    """A table whose first two files predate every added column; the third holds them."""
    from pyiceberg import types as it

    table = warehouse.catalog.create_table("db.defaults", schema=first_rows(0, 1).schema)
    table.append(first_rows(0, 40))
    table.append(first_rows(40, 30))
    with table.update_schema() as schema:
        for name, kind, default in ADDED:
            t = it.DecimalType(9, 2) if kind == "DecimalType" else getattr(it, kind)()
            schema.add_column(name, t, default_value=default)
        schema.add_column(("st", "y"), it.IntegerType(), default_value=-3)
        schema.add_column(("st", "z"), it.StringType())
    table = warehouse.catalog.load_table("db.defaults")
    arrow = table.schema().as_arrow()
    later = [{"id": 100 + i, "st": {"x": i, "y": i, "z": "z"}, "i": i, "l": i, "f": 0.5,
              "d": 0.25, "b": False, "s": f"s{i}", "dt": dt.date(2024, 1, 1),
              "ts": dt.datetime(2024, 1, 1), "tz": dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
              "dec": decimal.Decimal("1.00"), "bin": b"b", "none": "set"} for i in range(10)]
    table.append(pa.Table.from_pylist(later, schema=arrow))
    return warehouse.catalog.load_table("db.defaults")


def test_columns_added_with_defaults_read_them_in_older_files(
        s3: S3Env, defaults: Any) -> None:
    want = oracle(defaults)
    old = want.filter(pl.col("id") < 100)
    # the oracle itself reads the defaults (not nulls) in the older files' 70 rows
    assert old.height == 70 and old["i"].unique().to_list() == [7]
    assert old["dec"].unique().to_list() == [decimal.Decimal("14.20")]
    assert old["bin"].unique().to_list() == ["AAEC/w=="]  # 000102ff
    assert old["st"].struct.field("y").unique().to_list() == [-3]
    assert old["none"].null_count() == 70
    got, _ = query(defaults, "SELECT * FROM s3object")
    same(got, want, ordered=False)


def test_polars_scan_iceberg_agrees(s3: S3Env, defaults: Any) -> None:
    got, _ = query(defaults, "SELECT * FROM s3object")
    theirs = textual(pl.scan_iceberg(defaults, reader_override="native").collect())
    same(got, theirs, ordered=False)


@pytest.mark.parametrize("sql", [
    "SELECT id, i FROM s3object WHERE i = 7",
    "SELECT id FROM s3object WHERE s = 'fallback' AND b",
    "SELECT COUNT(*) AS n FROM s3object WHERE dt = DATE '2017-11-16'",
    "SELECT id, dec FROM s3object WHERE dec > 10",
    "SELECT id FROM s3object WHERE none IS NULL",
])
def test_a_filter_on_a_defaulted_column_keeps_the_older_files_rows(
        s3: S3Env, defaults: Any, sql: str) -> None:
    """The older files lack the column: no statistic of theirs may prune its default."""
    got, _ = query(defaults, sql)
    want = pl.SQLContext(s3object=oracle(defaults)).execute(sql, eager=True)
    assert want.height > 0
    same(got, want, ordered=False)


def _edited(env: S3Env, table: Any, key: str, edit: Any) -> str:
    raw = json.loads(env.get(table.metadata_location))
    for schema in raw["schemas"]:
        for field in schema["fields"]:
            edit(field)
    return put(env, key, json.dumps(raw).encode())


def test_the_write_default_is_never_read(s3: S3Env, warehouse: Warehouse,  # noqa: F811
                                         defaults: Any) -> None:
    def changed(field: dict[str, Any]) -> None:
        if field["name"] == "i":  # ALTER COLUMN i SET DEFAULT 99: for writers only
            assert field["write-default"] == field["initial-default"] == 7
            field["write-default"] = 99
        if field["name"] == "s":
            field["write-default"] = "other"
    uri = _edited(s3, defaults, "write-default/metadata/v1.metadata.json", changed)
    want = oracle(warehouse.static(uri))
    assert 99 not in want["i"].to_list() and "other" not in want["s"].to_list()
    got, _ = query(uri, "SELECT * FROM s3object")
    same(got, want, ordered=False)


@pytest.mark.parametrize(("column", "bad"), [("i", "seven"), ("dec", "1.234"),
                                             ("dt", "16/11/2017"), ("bin", "zz")])
def test_a_default_that_is_not_of_its_type_is_refused_by_name(
        s3: S3Env, defaults: Any, column: str, bad: str) -> None:
    def broken(field: dict[str, Any]) -> None:
        if field["name"] == column:
            field["initial-default"] = bad
    uri = _edited(s3, defaults, f"bad-default-{column}/metadata/v1.metadata.json", broken)
    error = fails({"source": {"iceberg": uri}, "sql": "SELECT * FROM s3object"})
    assert type(error).__name__ == "ObjectFormatError", error
    assert uri in str(error) and repr(column) in str(error) and "initial-default" in str(error)
