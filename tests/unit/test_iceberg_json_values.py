"""The spec's JSON single-value form (Appendix D), as an ``initial-default`` is read:
each type's value as Arrow builds the column from it, and what is not of the type
refused."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from typing import Any

import pyarrow as pa
import pytest

from s3slice.iceberg import columns as C
from s3slice.iceberg import types as T

STRUCT: dict[str, Any] = {"type": "struct", "fields": [
    {"id": 4, "name": "x", "type": "int", "initial-default": 0},
    {"id": 5, "name": "y", "type": "long", "initial-default": 9},
    {"id": 6, "name": "z", "type": "string"}]}


@pytest.mark.parametrize(("t", "raw", "value"), [
    ("boolean", False, False),
    ("int", 34, 34),
    ("long", -(2**50), -(2**50)),
    ("float", 1, 1.0),
    ("double", 1.5, 1.5),
    ("decimal(4,2)", "14.20", decimal.Decimal("14.20")),
    ("decimal(9,3)", "-1.5", decimal.Decimal("-1.500")),
    ("date", "2017-11-16", dt.date(2017, 11, 16)),
    ("time", "22:31:08.123456", dt.time(22, 31, 8, 123456)),
    ("timestamp", "2017-11-16T22:31:08.123456", dt.datetime(2017, 11, 16, 22, 31, 8, 123456)),
    ("timestamptz", "2017-11-16T22:31:08.123456+00:00",
     dt.datetime(2017, 11, 16, 22, 31, 8, 123456, tzinfo=dt.UTC)),
    ("timestamptz", "2017-11-16T23:31:08+01:00", dt.datetime(2017, 11, 16, 22, 31, 8,
                                                              tzinfo=dt.UTC)),
    ("string", "iceberg", "iceberg"),
    ("uuid", "f79c3e09-677c-4bbd-a479-3f349cb785e7",
     uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7").bytes),
    ("fixed[4]", "000102ff", b"\x00\x01\x02\xff"),
    ("binary", "000102ff", b"\x00\x01\x02\xff"),
    ({"type": "list", "element-id": 3, "element": "int"}, [1, 2, 3], [1, 2, 3]),
    ({"type": "map", "key-id": 3, "key": "string", "value-id": 4, "value": "int"},
     {"keys": ["a", "b"], "values": [1, 2]}, [("a", 1), ("b", 2)]),
    # a struct's default is {} (each field's own default) or gives some fields by id
    (STRUCT, {}, {"x": 0, "y": 9, "z": None}),
    (STRUCT, {"4": 5, "6": "s"}, {"x": 5, "y": 9, "z": "s"}),
    ("int", None, None),
])
def test_each_type_reads_its_json_form(t: T.Type, raw: Any, value: Any) -> None:
    assert T.from_json(t, raw) == value
    array = C.default_array(t, raw, 3, "s3://b/t/metadata/v1.metadata.json")
    assert array.to_pylist() == [value] * 3 and len(array) == 3
    assert array.type == C.arrow_type(t)


@pytest.mark.parametrize(("t", "raw"), [
    ("int", "7"), ("int", True), ("boolean", 1), ("decimal(4,2)", "1.234"),
    ("decimal(3,2)", "14.20"), ("date", "16/11/2017"), ("binary", "zz"), ("string", 5),
    ({"type": "list", "element-id": 3, "element": "int"}, {"a": 1}),
    ({"type": "map", "key-id": 3, "key": "string", "value-id": 4, "value": "int"},
     {"keys": ["a"], "values": []}),
    (STRUCT, [1]),
])
def test_a_value_not_of_its_type_is_refused(t: T.Type, raw: Any) -> None:
    with pytest.raises(ValueError, match="is not a"):
        T.from_json(t, raw)


def test_default_array_builds_polars_types() -> None:
    array = C.default_array("timestamptz", "2017-11-16T22:31:08+00:00", 2, "s3://b/k")
    assert array.type == pa.timestamp("us", tz="UTC")
