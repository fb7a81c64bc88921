"""The Iceberg planning pieces against pyiceberg's own: partition transforms (bucket by
murmur3, truncate, year, month, day, hour), bounds in the single-value binary form, the
projection of a predicate to partition values (never ruling out a partition that holds a
matching row), the metadata's snapshot selection and the refusal of format version 3."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3slice._errors import ObjectFormatError, RequestError
from s3slice._model import parse_request
from s3slice._table import TableSource
from s3slice.iceberg import metadata as meta
from s3slice.iceberg import transforms as X
from s3slice.iceberg import types as T
from s3slice.iceberg.metadata import Field, PartitionField, Schema
from s3slice.query import predicate as P

pyiceberg_transforms = pytest.importorskip("pyiceberg.transforms")
pyiceberg_types = pytest.importorskip("pyiceberg.types")
conversions = pytest.importorskip("pyiceberg.conversions")

ICEBERG_TYPES: dict[str, Any] = {
    "int": pyiceberg_types.IntegerType(), "long": pyiceberg_types.LongType(),
    "string": pyiceberg_types.StringType(), "date": pyiceberg_types.DateType(),
    "timestamp": pyiceberg_types.TimestampType(), "binary": pyiceberg_types.BinaryType()}


def _physical(source: str, value: Any) -> Any:
    """What pyiceberg's transforms take: days, microseconds, or the value itself."""
    if source == "date":
        return (value - T.EPOCH).days
    if source == "timestamp":
        return (value - T.EPOCH_TS) // dt.timedelta(microseconds=1)
    return value


def _theirs(transform: str, source: str, value: Any) -> Any:
    kind, _, arg = transform.partition("[")
    n = int(arg.rstrip("]")) if arg else 0
    made = {"bucket": lambda: pyiceberg_transforms.BucketTransform(n),
            "truncate": lambda: pyiceberg_transforms.TruncateTransform(n),
            "year": pyiceberg_transforms.YearTransform,
            "month": pyiceberg_transforms.MonthTransform,
            "day": pyiceberg_transforms.DayTransform,
            "hour": pyiceberg_transforms.HourTransform}[kind]()
    out = made.transform(ICEBERG_TYPES[source])(_physical(source, value))
    return (out - T.EPOCH).days if isinstance(out, dt.date) else out


ints = st.integers(-(1 << 31), (1 << 31) - 1)
longs = st.integers(-(1 << 63), (1 << 63) - 1)
dates = st.dates(dt.date(1900, 1, 1), dt.date(2200, 1, 1))
stamps = st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1))
texts = st.text(max_size=12)
VALUES = {"int": ints, "long": longs, "string": texts, "date": dates, "timestamp": stamps,
          "binary": st.binary(max_size=12)}
CASES = [("bucket[7]", s) for s in ("int", "long", "string", "date", "timestamp", "binary")] + [
    ("truncate[10]", "int"), ("truncate[100]", "long"), ("truncate[3]", "string"),
    ("truncate[2]", "binary")] + [
    (k, s) for k in ("year", "month", "day", "hour") for s in ("date", "timestamp")
    if not (k == "hour" and s == "date")]


@pytest.mark.parametrize(("transform", "source"), CASES)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_transforms_agree_with_pyiceberg(transform: str, source: str, data: st.DataObject
                                         ) -> None:
    value = data.draw(VALUES[source])
    assert X.apply(transform, source, value) == _theirs(transform, source, value)


def test_murmur3_known_values() -> None:
    # The Iceberg spec's test vectors for bucket hashing.
    assert X.murmur3_32((34).to_bytes(8, "little")) == 2017239379
    assert X.murmur3_32(b"iceberg") == 1210000089
    assert X.murmur3_32(bytes(range(4))) == -188683207


BOUNDS: list[tuple[str, Any, Any]] = [
    ("boolean", True, pyiceberg_types.BooleanType()),
    ("int", -5, pyiceberg_types.IntegerType()), ("long", 1 << 40, pyiceberg_types.LongType()),
    ("float", 1.5, pyiceberg_types.FloatType()), ("double", -2.25, pyiceberg_types.DoubleType()),
    ("string", "héllo", pyiceberg_types.StringType()),
    ("date", dt.date(2024, 2, 29), pyiceberg_types.DateType()),
    ("timestamp", dt.datetime(2024, 2, 29, 1, 2, 3, 4), pyiceberg_types.TimestampType()),
    ("decimal(10, 2)", decimal.Decimal("-12.34"), pyiceberg_types.DecimalType(10, 2)),
    ("binary", b"\x00\x01", pyiceberg_types.BinaryType())]


@pytest.mark.parametrize(("type_", "value", "theirs"), BOUNDS, ids=[b[0] for b in BOUNDS])
def test_bounds_decode_what_pyiceberg_encodes(type_: str, value: Any, theirs: Any) -> None:
    physical = _physical(type_, value) if type_ in ("date", "timestamp") else value
    assert T.from_bytes(type_, conversions.to_bytes(theirs, physical)) == value


def test_promoted_bounds_read_by_their_length() -> None:
    assert T.from_bytes("long", conversions.to_bytes(pyiceberg_types.IntegerType(), -7)) == -7
    assert T.from_bytes("double", conversions.to_bytes(pyiceberg_types.FloatType(), 0.5)) == 0.5


SCHEMA = Schema(0, (Field(1, "id", "long"), Field(2, "ts", "timestamp"), Field(3, "s", "string"),
                    Field(4, "d", "date")))
SPEC = (PartitionField(1, 1000, "bucket[5]", "b"), PartitionField(2, 1001, "day", "ts_day"),
        PartitionField(3, 1002, "truncate[2]", "s2"), PartitionField(4, 1003, "month", "dm"),
        PartitionField(1, 1004, "truncate[10]", "id10"))
OPS = ["=", "!=", "<", "<=", ">", ">="]


def _truth(value: Any, op: str, constant: Any) -> bool:
    if value is None:
        return False
    return {"=": value == constant, "!=": value != constant, "<": value < constant,
            "<=": value <= constant, ">": value > constant, ">=": value >= constant}[op]


def _unit(row: dict[str, Any]) -> dict[str, P.ColumnStats]:
    types = SCHEMA.types_by_id()
    unit = {}
    for pf in SPEC:
        source = types[pf.source_id]
        name = next(f.name for f in SCHEMA.fields if f.id == pf.source_id)
        v = row[name]
        part = None if v is None else X.apply(pf.transform, source, v)
        unit[X.key(pf)] = P.ColumnStats(num_rows=1, min=part, max=part,
                                        null_count=int(part is None),
                                        dtype=X.partition_dtype(pf.transform, source))
    return unit


# Small domains, so that a constant often falls in a row's own partition (where a wrong
# projection of < or > would rule the row out).
near = {"id": st.integers(-30, 30),
        "ts": st.datetimes(dt.datetime(2023, 12, 30), dt.datetime(2024, 1, 3)),
        "s": st.text("ab", max_size=4),
        "d": st.dates(dt.date(2023, 11, 25), dt.date(2024, 2, 5))}
rows = st.fixed_dictionaries({k: st.none() | v for k, v in near.items()})


@st.composite
def predicates(draw: st.DrawFn, depth: int = 2) -> tuple[P.Pred, Any]:
    """A predicate and a Python function judging it (true only) on a row."""
    if depth == 0 or draw(st.booleans()):
        column = draw(st.sampled_from(["id", "ts", "s", "d"]))
        op = draw(st.sampled_from(OPS))
        constant = draw(near[column])
        return P.Cmp(column, op, constant), (  # type: ignore[arg-type]
            lambda r, c=column, o=op, k=constant: _truth(r[c], o, k))
    kind = draw(st.sampled_from(["and", "or", "not"]))
    a, fa = draw(predicates(depth - 1))
    if kind == "not":  # true when the item is false (not null)
        if not isinstance(a, P.Cmp):
            return a, fa
        column = a.column
        return P.Not(a), lambda r, f=fa, c=column: r[c] is not None and not f(r)
    b, fb = draw(predicates(depth - 1))
    if kind == "and":
        return P.And((a, b)), lambda r: fa(r) and fb(r)
    return P.Or((a, b)), lambda r: fa(r) or fb(r)


@settings(max_examples=300, deadline=None)
@given(pred=predicates(), row=rows)
def test_projection_never_rules_out_a_matching_row(pred: tuple[P.Pred, Any],
                                                   row: dict[str, Any]) -> None:
    predicate, holds = pred
    if not holds(row):
        return
    projected = X.project(predicate, SCHEMA, SPEC)
    assert P.may_match_each(projected, [_unit(row)]) == [True], (predicate, projected, row)


def test_projection_prunes_what_it_can() -> None:
    p = X.project(P.Cmp("ts", ">=", dt.datetime(2024, 3, 1)), SCHEMA, SPEC)
    day = (dt.date(2024, 2, 28) - T.EPOCH).days
    unit = {X.key(SPEC[1]): P.ColumnStats(num_rows=1, min=day, max=day, null_count=0,
                                          dtype=pl.Int32())}
    assert P.may_match_each(p, [unit]) == [False]
    p = X.project(P.Cmp("id", "=", 34), SCHEMA, SPEC)
    other = (X.apply("bucket[5]", "long", 34) + 1) % 5
    unit = {X.key(SPEC[0]): P.ColumnStats(num_rows=1, min=other, max=other, null_count=0,
                                          dtype=pl.Int32())}
    assert P.may_match_each(p, [unit]) == [False]


def _metadata(**changes: Any) -> bytes:
    raw: dict[str, Any] = {
        "format-version": 2, "location": "s3://b/t", "current-schema-id": 1,
        "schemas": [{"schema-id": 0, "fields": [{"id": 1, "name": "a", "type": "int"}]},
                    {"schema-id": 1, "fields": [{"id": 1, "name": "b", "type": "long"}]}],
        "partition-specs": [{"spec-id": 0, "fields": []}], "current-snapshot-id": 2,
        "snapshots": [{"snapshot-id": 1, "sequence-number": 1, "timestamp-ms": 1000,
                       "manifest-list": "s3://b/1.avro", "schema-id": 0},
                      {"snapshot-id": 2, "sequence-number": 2, "timestamp-ms": 2000,
                       "manifest-list": "s3://b/2.avro", "schema-id": 1}],
        "snapshot-log": [{"snapshot-id": 1, "timestamp-ms": 1000},
                         {"snapshot-id": 2, "timestamp-ms": 2000}]}
    raw.update(changes)
    return json.dumps(raw).encode()


def test_snapshot_selection_current_by_id_and_as_of() -> None:
    table = meta.parse_metadata(_metadata(), "s3://b/m.json")
    snap, schema = meta.select(table, snapshot_id=None, as_of_ms=None)
    assert snap is not None and snap.snapshot_id == 2 and schema.fields[0].name == "b"
    snap, schema = meta.select(table, snapshot_id=1, as_of_ms=None)
    assert snap is not None and snap.snapshot_id == 1 and schema.fields[0].name == "a"
    snap, _ = meta.select(table, snapshot_id=None, as_of_ms=1999)
    assert snap is not None and snap.snapshot_id == 1
    with pytest.raises(RequestError, match="no snapshot at or before 999"):
        meta.select(table, snapshot_id=None, as_of_ms=999)
    with pytest.raises(RequestError, match="no snapshot 9"):
        meta.select(table, snapshot_id=9, as_of_ms=None)


@pytest.mark.parametrize(("changes", "match"), [
    ({"format-version": 3}, "format version 3 is not supported"),
    ({"schemas": [{"schema-id": 1, "fields": [{"id": 1, "name": "v", "type": "variant"}]}]},
     "variant"),
    ({"schemas": [{"schema-id": 1, "fields": [{"id": 1, "name": "t",
                                               "type": "timestamp_ns"}]}]}, "timestamp_ns"),
    ({"current-schema-id": 7}, "corrupt"),
])
def test_refused_metadata_names_the_file_and_the_reason(changes: dict[str, Any], match: str
                                                        ) -> None:
    with pytest.raises(ObjectFormatError, match=match) as info:
        meta.parse_metadata(_metadata(**changes), "s3://b/m.json")
    assert info.value.uri == "s3://b/m.json"


def test_table_source_is_parsed_with_its_snapshot() -> None:
    request = parse_request({"source": {"iceberg": {"glue": "db.t"}, "snapshot_id": 5},
                             "sql": "SELECT * FROM s3object"})
    assert request.sources == (TableSource(glue="db.t", snapshot_id=5),)
    for bad in ({"iceberg": "s3://b/k"}, {"iceberg": {"glue": "t"}},
                {"iceberg": "s3://b/m.json", "as_of": "yesterday"},
                {"iceberg": "s3://b/m.json", "snapshot_id": 1, "as_of": 5},
                {"iceberg": "s3://b/m.json", "branch": "x"}):
        with pytest.raises(RequestError):
            parse_request({"source": bad, "sql": "SELECT * FROM s3object"})
