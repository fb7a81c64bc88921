"""Iceberg's value functions against pyiceberg's own: partition transforms (bucket by
murmur3, truncate, year, month, day, hour) with the spec's hash vectors, the source
values a partition value spans, and bounds in the single-value binary form. (The
projection of predicates to partitions and snapshot selection: ``test_iceberg_plan.py``.)"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3slice.iceberg import transforms as X
from s3slice.iceberg import types as T

pyiceberg_transforms = pytest.importorskip("pyiceberg.transforms")
pyiceberg_types = pytest.importorskip("pyiceberg.types")
conversions = pytest.importorskip("pyiceberg.conversions")

ICEBERG_TYPES: dict[str, Any] = {
    "int": pyiceberg_types.IntegerType(), "long": pyiceberg_types.LongType(),
    "string": pyiceberg_types.StringType(), "date": pyiceberg_types.DateType(),
    "timestamp": pyiceberg_types.TimestampType(), "binary": pyiceberg_types.BinaryType(),
    "timestamptz": pyiceberg_types.TimestamptzType(), "time": pyiceberg_types.TimeType(),
    "decimal(9, 2)": pyiceberg_types.DecimalType(9, 2),
    "decimal(38, 10)": pyiceberg_types.DecimalType(38, 10),
    "uuid": pyiceberg_types.UUIDType(), "fixed[5]": pyiceberg_types.FixedType(5)}


def _physical(source: str, value: Any) -> Any:
    """What pyiceberg's transforms take: days, microseconds, or the value itself."""
    if source == "date":
        return (value - T.EPOCH).days
    if source == "timestamp":
        return (value - T.EPOCH_TS) // dt.timedelta(microseconds=1)
    if source == "timestamptz":  # the instant, whatever the offset
        return (value - T.EPOCH_TS.replace(tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    if source == "time":
        return (dt.datetime.combine(T.EPOCH, value) - T.EPOCH_TS) // dt.timedelta(
            microseconds=1)
    return value


def _theirs_of(transform: str, source: str, physical: Any) -> Any:
    kind, _, arg = transform.partition("[")
    n = int(arg.rstrip("]")) if arg else 0
    made = {"bucket": lambda: pyiceberg_transforms.BucketTransform(n),
            "truncate": lambda: pyiceberg_transforms.TruncateTransform(n),
            "year": pyiceberg_transforms.YearTransform,
            "month": pyiceberg_transforms.MonthTransform,
            "day": pyiceberg_transforms.DayTransform,
            "hour": pyiceberg_transforms.HourTransform}[kind]()
    out = made.transform(ICEBERG_TYPES[source])(physical)
    return (out - T.EPOCH).days if isinstance(out, dt.date) else out


def _theirs(transform: str, source: str, value: Any) -> Any:
    return _theirs_of(transform, source, _physical(source, value))


ints = st.integers(-(1 << 31), (1 << 31) - 1)
longs = st.integers(-(1 << 63), (1 << 63) - 1)
dates = st.dates(dt.date(1900, 1, 1), dt.date(2200, 1, 1))
stamps = st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1))
offsets = st.integers(-14 * 60, 14 * 60).map(lambda m: dt.timezone(dt.timedelta(minutes=m)))
texts = st.text(max_size=12)  # any code point: multi-byte UTF-8 too


def _decimals(precision: int, scale: int) -> st.SearchStrategy[decimal.Decimal]:
    top = 10 ** precision - 1
    return st.integers(-top, top).map(lambda u: decimal.Decimal(f"{u}E-{scale}"))


VALUES = {"int": ints, "long": longs, "string": texts, "date": dates, "timestamp": stamps,
          "binary": st.binary(max_size=12), "timestamptz": st.builds(
              lambda t, z: t.replace(tzinfo=dt.UTC).astimezone(z), stamps, offsets),
          "time": st.times(), "decimal(9, 2)": _decimals(9, 2),
          "decimal(38, 10)": _decimals(38, 10), "uuid": st.uuids(),
          "fixed[5]": st.binary(min_size=5, max_size=5)}
TEMPORAL = ("date", "timestamp", "timestamptz")
CASES = [("bucket[7]", s) for s in VALUES] + [("bucket[1000]", "decimal(38, 10)")] + [
    ("truncate[10]", "int"), ("truncate[100]", "long"), ("truncate[3]", "string"),
    ("truncate[2]", "binary"), ("truncate[50]", "decimal(9, 2)"), ("truncate[7]", "int"),
    ("truncate[1000]", "decimal(38, 10)")] + [
    (k, s) for k in ("year", "month", "day", "hour") for s in TEMPORAL
    if not (k == "hour" and s == "date")]


@pytest.mark.parametrize(("transform", "source"), CASES)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_transforms_agree_with_pyiceberg(transform: str, source: str, data: st.DataObject
                                         ) -> None:
    value = data.draw(VALUES[source])
    assert X.apply(transform, source, value) == _theirs(transform, source, value)


@pytest.mark.parametrize(("transform", "source", "value", "want"), [
    ("truncate[10]", "int", -1, -10), ("truncate[10]", "long", -10, -10),
    ("truncate[10]", "decimal(9, 2)", decimal.Decimal("-0.05"), decimal.Decimal("-0.10")),
    ("truncate[50]", "decimal(9, 2)", decimal.Decimal("12.34"), decimal.Decimal("12.00")),
    ("truncate[3]", "string", "ééé€x", "ééé"), ("truncate[2]", "string", "€", "€"),
    ("day", "timestamptz", dt.datetime(2024, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(
        hours=2))), (dt.date(2023, 12, 31) - T.EPOCH).days),
    ("bucket[4]", "timestamp", dt.datetime(1970, 1, 1), 0),
])
def test_truncate_floors_and_counts_code_points(transform: str, source: str, value: Any,
                                                want: Any) -> None:
    assert X.apply(transform, source, value) == want == _theirs(transform, source, value)


def test_spec_hash_vectors_for_decimal_uuid_time_and_timestamptz() -> None:
    # The Iceberg spec's "Appendix B" hash values of each type.
    def hashed(source: str, value: Any) -> int:
        data = X._hash_bytes(source, value)
        assert data is not None
        return X.murmur3_32(data)
    assert hashed("decimal(4, 2)", decimal.Decimal("14.20")) == -500754589
    assert hashed("date", dt.date(2017, 11, 16)) == -653330422
    assert hashed("time", dt.time(22, 31, 8)) == -662762989
    assert hashed("timestamp", dt.datetime(2017, 11, 16, 22, 31, 8)) == -2047944441
    assert hashed("timestamptz", dt.datetime(2017, 11, 16, 14, 31, 8, tzinfo=dt.timezone(
        -dt.timedelta(hours=8)))) == -2047944441
    assert hashed("uuid", uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7")) == 1488055340
    assert hashed("fixed[4]", bytes([0, 1, 2, 3])) == -188683207
    for v in ("timestamp_ns", "timestamptz_ns"):  # v3 types are not transformed
        assert X.apply("bucket[4]", v, 1) is None and X.apply("day", v, 1) is None


RANGES = [c for c in CASES if X.is_range(*c)] + [("identity", s) for s in VALUES]


def _step(source: str, physical: Any, by: int = 1) -> Any:
    """The value of the type ``by`` steps above a physical value (exactly)."""
    if (d := T.decimal_of(source)) is not None:
        return physical.fma(1, decimal.Decimal(f"{by}E-{d[1]}"), EXACT)
    return physical + by


EXACT = decimal.Context(prec=200)


@pytest.mark.parametrize(("transform", "source"), RANGES)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_partition_value_spans_exactly_the_source_values_pyiceberg_puts_in_it(
        transform: str, source: str, data: st.DataObject) -> None:
    value = data.draw(VALUES[source])
    part = X.apply(transform, source, value) if transform != "identity" else value
    found = X.span(transform, source, part)
    assert found is not None
    lo, hi = (_physical(source, v) for v in found) if source == "date" else found
    physical = _physical(source, value) if source in TEMPORAL else value
    if source == "uuid":
        physical = value
    assert lo <= physical <= hi
    if transform == "identity":
        return
    assert _theirs_of(transform, source, lo) == part == _theirs_of(transform, source, hi)
    # and no further: the values just outside are in other partitions (within the type)
    low = {"int": -(1 << 31), "long": -(1 << 63), "date": -(1 << 31)}.get(source)
    if low is None or lo > low:
        below = _step(source, lo, -1)
        assert _theirs_of(transform, source, below) != part
    d = T.decimal_of(source)
    highest = (decimal.Decimal(f"{10 ** d[0] - 1}E-{d[1]}") if d is not None else
               {"int": (1 << 31) - 1, "date": (1 << 31) - 1}.get(source, (1 << 63) - 1))
    if hi < highest:
        assert _theirs_of(transform, source, _step(source, hi)) != part


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
