"""The Iceberg planning pieces against pyiceberg's own: the projection of a predicate to
partition values (never ruling out a partition that holds a matching row), manifests
pruned by their partition summaries, the metadata's snapshot selection and the refusal
of format version 3. (Transforms and bounds: ``test_iceberg_transform_values.py``.)"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3slice.core.errors import ObjectFormatError, RequestError
from s3slice.core.model import parse_request
from s3slice.core.table import TableSource
from s3slice.iceberg import manifests as M
from s3slice.iceberg import metadata as meta
from s3slice.iceberg import plan
from s3slice.iceberg import transforms as X
from s3slice.iceberg.metadata import Field, PartitionField, Schema
from s3slice.query.analyzer import analyze
from s3slice.query.pruning import predicate as P

pyiceberg_transforms = pytest.importorskip("pyiceberg.transforms")
pyiceberg_types = pytest.importorskip("pyiceberg.types")
conversions = pytest.importorskip("pyiceberg.conversions")


SCHEMA = Schema(0, (
    Field(1, "id", "long"), Field(2, "ts", "timestamp"), Field(3, "s", "string"),
    Field(4, "d", "date"), Field(5, "tz", "timestamptz"), Field(6, "dec", "decimal(9, 2)"),
    Field(7, "n", "int"), Field(8, "b", "binary"), Field(9, "t", "time")))
SPEC = (PartitionField(1, 1000, "bucket[5]", "b"), PartitionField(2, 1001, "day", "ts_day"),
        PartitionField(3, 1002, "truncate[2]", "s2"), PartitionField(4, 1003, "month", "dm"),
        PartitionField(1, 1004, "truncate[10]", "id10"),
        PartitionField(5, 1005, "hour", "tz_hour"), PartitionField(5, 1006, "bucket[3]", "tzb"),
        PartitionField(5, 1007, "day", "tz_day"), PartitionField(6, 1008, "truncate[50]", "dt"),
        PartitionField(6, 1009, "bucket[4]", "db"), PartitionField(7, 1010, "truncate[7]", "n7"),
        PartitionField(4, 1011, "bucket[4]", "d4"), PartitionField(8, 1012, "truncate[2]", "b2"),
        PartitionField(9, 1013, "bucket[3]", "t3"), PartitionField(3, 1014, "bucket[3]", "s3"),
        PartitionField(7, 1015, "identity", "n"), PartitionField(4, 1016, "year", "dy"))
DTYPES = {f.name: f.dtype for f in SCHEMA.fields}
OPS = ["=", "!=", "<", "<=", ">", ">="]
UTC = dt.UTC


@pytest.mark.parametrize("transform", ["bucket[0]", "bucket[x]", "truncate[-1]", "bucket",
                                       "zorder", "truncate[]"])
def test_a_malformed_or_unknown_transform_is_never_judged(transform: str) -> None:
    pf = PartitionField(1, 1000, transform, "p")
    assert X.apply(transform, "long", 5) is None and X.dtype(transform, "long") is None
    assert X.project(P.Cmp("id", "=", 5, "5"), SCHEMA, (pf,)) == P.TRUE
    assert plan._value_unit(meta.Spec(0, (pf,)), SCHEMA.types_by_id(), [3]) == {}


def _unit(row: dict[str, Any]) -> dict[str, P.ColumnStats]:
    """A data file's unit of partition values, built by the planner from the row's."""
    types = SCHEMA.types_by_id()
    names = {f.id: f.name for f in SCHEMA.fields}
    values = []
    for pf in SPEC:
        v = row[names[pf.source_id]]
        values.append(v if v is None or pf.transform == "identity"
                      else X.apply(pf.transform, types[pf.source_id], v))
    return plan._value_unit(meta.Spec(0, SPEC), types, values)


def _iso(t: dt.datetime) -> str:
    return t.isoformat(" ")


# Small domains, so that a constant often falls in a row's own partition (where a wrong
# projection of < or > would rule the row out). Each column's constants are SQL texts of
# the kinds a query writes (naive and offset texts for timestamptz, decimals with more
# digits than the column's scale, integers with a fraction).
_stamps = st.datetimes(dt.datetime(2023, 12, 30), dt.datetime(2024, 1, 3))
_zones = st.sampled_from([dt.timedelta(0), dt.timedelta(hours=2), -dt.timedelta(hours=5,
                                                                                 minutes=30)])
_decs = st.integers(-200, 200).map(lambda u: decimal.Decimal(u).scaleb(-2))
NEAR = {
    "id": st.integers(-30, 30), "n": st.integers(-30, 30),
    "ts": _stamps, "s": st.text("aé€b", max_size=4),
    "d": st.dates(dt.date(2023, 11, 25), dt.date(2024, 2, 5)),
    "tz": _stamps.map(lambda t: t.replace(tzinfo=UTC)), "dec": _decs,
    "b": st.binary(max_size=3).map(lambda b: bytes(97 + x % 3 for x in b)),
    "t": st.times(dt.time(9), dt.time(11)).map(lambda t: t.replace(second=0, microsecond=0))}
CONSTANTS = {
    "id": st.one_of(st.integers(-30, 30).map(str), st.sampled_from(["2.5", "3.0", "-7.0"])),
    "ts": st.builds(lambda t, f: f.format(_iso(t)), _stamps,
                    st.sampled_from(["TIMESTAMP '{}'", "'{}'"])),
    "s": st.text("aé€b", max_size=4).map(lambda x: f"'{x}'"),
    "d": st.builds(lambda d, f: f.format(d.isoformat()),
                   st.dates(dt.date(2023, 11, 25), dt.date(2024, 2, 5)),
                   st.sampled_from(["DATE '{}'", "'{}'"])),
    "tz": st.builds(lambda t, z, iso: "'" + (t.replace(tzinfo=dt.timezone(z)).isoformat()
                                             if iso else _iso(t)) + "'",
                    _stamps, _zones, st.booleans()),
    "dec": st.one_of(_decs.map(str), st.sampled_from(["1.255", "-0.005", "0.5", "2"])),
    "b": st.text("abc", max_size=3).map(lambda x: f"'{x}'"),
    "t": st.times(dt.time(9), dt.time(11)).map(lambda t: f"'{t.replace(microsecond=0)}'")}
CONSTANTS["n"] = CONSTANTS["id"]
rows = st.fixed_dictionaries({k: st.none() | v for k, v in NEAR.items()})


@st.composite
def wheres(draw: st.DrawFn, depth: int = 2) -> str:
    """A WHERE clause of comparisons, IN, BETWEEN, IS NULL, AND, OR and NOT."""
    if depth == 0 or draw(st.booleans()):
        column = draw(st.sampled_from(sorted(NEAR)))
        constant = draw(CONSTANTS[column])
        kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "in", "between", "null"]))
        if kind == "in":
            return f"{column} IN ({constant}, {draw(CONSTANTS[column])})"
        if kind == "between":
            return f"{column} BETWEEN {constant} AND {draw(CONSTANTS[column])}"
        if kind == "null":
            return f"{column} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
        return f"{column} {draw(st.sampled_from(OPS))} {constant}"
    kind = draw(st.sampled_from(["AND", "OR", "NOT"]))
    if kind == "NOT":
        return f"NOT ({draw(wheres(depth - 1))})"
    return f"({draw(wheres(depth - 1))}) {kind} ({draw(wheres(depth - 1))})"


def _matches(row: dict[str, Any], where: str) -> bool | None:
    """polars' own answer (the filter's): does the row satisfy the WHERE clause? None
    when polars refuses the comparison (the query then fails, typed)."""
    frame = pl.DataFrame([row], schema=DTYPES)
    try:
        return pl.SQLContext(s3object=frame).execute(
            f"SELECT * FROM s3object WHERE {where}", eager=True).height == 1
    except Exception:  # noqa: BLE001 - refused: nothing to keep
        return None


def _predicate(where: str) -> P.Pred:
    request = parse_request({"source": "s3://b/k.parquet",
                             "sql": f"SELECT * FROM s3object WHERE {where}"})
    return analyze(request.query).predicate


@settings(max_examples=250, deadline=None)
@given(where=wheres(), row=rows)
def test_projection_never_rules_out_a_matching_row(where: str, row: dict[str, Any]) -> None:
    if not _matches(row, where):
        return
    projected = X.project(_predicate(where), SCHEMA, SPEC)
    assert P.may_match_each(projected, [_unit(row)]) == [True], (where, projected, row)


def _keeps(where: str, row: dict[str, Any]) -> bool:
    full = dict.fromkeys(NEAR) | row
    return P.may_match_each(X.project(_predicate(where), SCHEMA, SPEC), [_unit(full)])[0]


@pytest.mark.parametrize(("where", "kept", "ruled_out"), [
    # timestamptz: a naive text is UTC, an offset text that instant (hour and day)
    ("tz >= '2024-03-01T02:00:00+02:00'", dt.datetime(2024, 3, 1, 0, 30, tzinfo=UTC),
     dt.datetime(2024, 2, 29, 23, 59, tzinfo=UTC)),
    ("tz < '2024-03-01 00:00:00'", dt.datetime(2024, 2, 29, 23, 59, tzinfo=UTC),
     dt.datetime(2024, 3, 1, 0, 0, tzinfo=UTC)),
    ("tz = '2024-01-01T10:00:00+01:00'", dt.datetime(2024, 1, 1, 9, tzinfo=UTC),
     dt.datetime(2024, 1, 1, 10, tzinfo=UTC)),
    ("tz IN ('2024-01-01 09:00:00', '2024-01-05 09:00:00')",
     dt.datetime(2024, 1, 5, 9, tzinfo=UTC), dt.datetime(2024, 1, 3, 9, tzinfo=UTC)),
    # decimal: truncate[50] keeps [0.50, 0.99] for < 1.00, a bucket only its constant's
    ("dec < 1.00", decimal.Decimal("0.99"), decimal.Decimal("1.00")),
    ("dec >= 1.255", decimal.Decimal("1.26"), decimal.Decimal("0.99")),
    ("dec IN (1.25, 3.5)", decimal.Decimal("3.50"), decimal.Decimal("2.00")),
    # negative integers: truncate[7] of -3 is -7 (floor)
    ("n >= -3", -3, -8), ("n < -7", -8, -7),
    # a date through bucket, month and year; a time through bucket
    ("d = '2024-01-01'", dt.date(2024, 1, 1), dt.date(2023, 1, 1)),
    ("t = '10:00:00'", dt.time(10), dt.time(10, 1)),
    # a string truncated by code points (multi-byte UTF-8), and through bucket
    ("s = 'é€x'", "é€x", "éa"), ("s < 'é€'", "é", "€"),
    ("id = 34", 34, 35),
])
def test_projection_prunes_what_it_can(where: str, kept: Any, ruled_out: Any) -> None:
    column = next(c for c in NEAR if where.startswith(c + " "))
    assert _matches(dict.fromkeys(NEAR) | {column: kept}, where)
    assert _keeps(where, {column: kept})
    assert not _matches(dict.fromkeys(NEAR) | {column: ruled_out}, where)
    assert not _keeps(where, {column: ruled_out}), (where, ruled_out)


def test_a_date_constant_without_text_is_judged_against_month_and_year_partitions() -> None:
    # (a comparison built without SQL text is judged in Python: a date's range is
    # dates, never days, so it compares)
    for d, kept in ((dt.date(2023, 12, 31), True), (dt.date(2024, 1, 1), False)):
        where = P.Cmp("d", "<", dt.date(2024, 1, 1))
        unit = _unit(dict.fromkeys(NEAR) | {"d": d})
        assert P.may_match_each(X.project(where, SCHEMA, SPEC), [unit]) == [kept]


SUMMARIES = [  # (partition field, their partition type, low, high, WHERE kept, ruled out)
    (PartitionField(5, 1005, "hour", "h"), pyiceberg_types.IntegerType(), 473352, 473375,
     "tz >= '2024-01-01T23:00:00+01:00'", "tz < '2024-01-01T01:00:00+01:00'"),
    (PartitionField(6, 1008, "truncate[50]", "dt"), pyiceberg_types.DecimalType(9, 2),
     decimal.Decimal("-1.00"), decimal.Decimal("0.50"), "dec < -0.505", "dec >= 1.00"),
    (PartitionField(4, 1016, "year", "dy"), pyiceberg_types.IntegerType(), 53, 54,
     "d BETWEEN '2024-12-31' AND '2030-01-01'", "d < DATE '2023-01-01'"),
    (PartitionField(3, 1002, "truncate[2]", "s2"), pyiceberg_types.StringType(), "ab", "é€",
     "s = 'éa'", "s > 'ê'"),
]


@pytest.mark.parametrize(("pf", "ptype", "low", "high", "kept", "ruled_out"), SUMMARIES,
                         ids=[s[0].transform for s in SUMMARIES])
def test_a_manifest_is_pruned_by_its_partition_summary(
        pf: PartitionField, ptype: Any, low: Any, high: Any, kept: str, ruled_out: str
        ) -> None:
    summary = M.FieldSummary(False, conversions.to_bytes(ptype, low),
                             conversions.to_bytes(ptype, high))
    unit = plan._summary_units(meta.Spec(0, (pf,)), SCHEMA.types_by_id(), [summary])
    for where, want in ((kept, True), (ruled_out, False)):
        projected = X.project(_predicate(where), SCHEMA, (pf,))
        assert P.may_match_each(projected, [unit]) == [want], where


def test_a_timestamp_literal_against_timestamptz_is_utc() -> None:
    # polars alone refuses to compare a timestamptz column with a naive TIMESTAMP; the
    # service reads a zone-less literal as UTC (docs/sql.md), so the partitions prune by
    # that instant.
    where = "tz >= TIMESTAMP '2024-03-01 00:00:00'"
    assert _matches(dict.fromkeys(NEAR) | {"tz": dt.datetime(2024, 1, 1, tzinfo=UTC)},
                    where) is None
    assert not _keeps(where, {"tz": dt.datetime(2024, 2, 29, 23, 30, tzinfo=UTC)})
    assert _keeps(where, {"tz": dt.datetime(2024, 3, 1, 0, 0, tzinfo=UTC)})


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
