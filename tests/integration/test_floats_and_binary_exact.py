"""Floats and binary values written exactly, through the real handler on the local S3
server: NaN and infinities are never confused with null in JSON answers (inline and
NDJSON outputs), binary values are base64 text, and NDJSON records are split only at
``\n``. (INT96 timestamps read exactly: ``test_values_exact.py``.)"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

from tests import malformed
from tests.integration import test_values_exact as values
from tests.support import S3Env, invoke

pytestmark = pytest.mark.integration

# The lake (a fixture) and its buckets, as test_values_exact.py has them.
DATA, RESULTS, lake, put = values.DATA, values.RESULTS, values.lake, values.put


# ------------------------------------------------------------------ NaN and infinities

FLOATS = [1.5, math.nan, None, math.inf, -math.inf, -0.0, 1e300, 5e-324]
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def float_of(value: Any) -> float | None:
    if isinstance(value, str):
        return NON_FINITE[value]
    return None if value is None else float(value)


def same(got: list[Any], want: list[Any]) -> bool:
    def key(v: Any) -> Any:
        if isinstance(v, float) and math.isnan(v):
            return "nan"
        if isinstance(v, float):
            return (v, math.copysign(1, v))
        return v
    return [key(g) for g in got] == [key(w) for w in want]


def not_json(constant: str) -> Any:
    """json.loads' hook for NaN and Infinity, which JSON does not have."""
    raise AssertionError(f"not JSON: {constant}")


def float_table() -> pa.Table:
    return pa.table({
        "id": pa.array(range(len(FLOATS)), pa.int64()),
        "x": pa.array(FLOATS, pa.float64()),
        "f": pa.array([*FLOATS[:-1], 0.25], pa.float32()),
        "l": pa.array([[v, 2.0] for v in FLOATS], pa.list_(pa.float64())),
        "s": pa.array([{"v": v, "t": "a\u2028b"} for v in FLOATS],
                      pa.struct([("v", pa.float64()), ("t", pa.string())]))})


def check_float_records(records: list[dict[str, Any]], table: pa.Table) -> None:
    want = table.to_pydict()
    assert [r["id"] for r in records] == want["id"]
    for name in ("x", "f"):
        assert same([float_of(r[name]) for r in records], want[name])
    for r, w in zip(records, want["l"], strict=True):
        assert same([float_of(v) for v in r["l"]], w)
    for r, w in zip(records, want["s"], strict=True):
        assert same([float_of(r["s"]["v"])], [w["v"]])
        assert r["s"]["t"] == w["t"]
    # Only a real null is null.
    assert [r["x"] is None for r in records] == [v is None for v in want["x"]]


def test_nan_and_infinities_returned_inline_stay_apart_from_null(lake: S3Env) -> None:
    table = float_table()
    uri = put(lake, "floats/x.parquet", malformed.write(table))
    response = invoke({"source": uri, "return_rows": True})
    check_float_records(response["rows"], table)


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_nan_and_infinities_in_ndjson_outputs_stay_apart_from_null(
        lake: S3Env, compression: str) -> None:
    import gzip
    table = float_table()
    uri = put(lake, "floats/x.parquet", malformed.write(table))
    response = invoke({"source": uri, "output": {"uri": f"s3://{RESULTS}/out/",
                                                 "format": "json",
                                                 "compression": compression}})
    body = lake.get(response["outputs"][0]["uri"])
    text = (gzip.decompress(body) if compression == "gzip" else body).decode()
    assert text.endswith("\n")
    check_float_records([json.loads(line, parse_constant=not_json)
                         for line in text.split("\n")[:-1]], table)


# ------------------------------------------------------------------ binary values

BLOBS = [b"\x00\xff\xfe", None, b"", b"plain", bytes(range(256))]


def blob_table() -> pa.Table:
    return pa.table({"id": pa.array(range(len(BLOBS)), pa.int64()),
                     "b": pa.array(BLOBS, pa.binary()),
                     "lb": pa.array([None if b is None else [b, b"x"] for b in BLOBS],
                                    pa.list_(pa.binary()))})


def unbase64(value: str | None) -> bytes | None:
    return None if value is None else base64.b64decode(value, validate=True)


def test_binary_returned_inline_is_base64(lake: S3Env) -> None:
    uri = put(lake, "blobs/x.parquet", malformed.write(blob_table()))
    rows = invoke({"source": uri, "return_rows": True})["rows"]
    assert [unbase64(r["b"]) for r in rows] == BLOBS
    assert [None if r["lb"] is None else [unbase64(v) for v in r["lb"]] for r in rows] == (
        blob_table()["lb"].to_pylist())


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_binary_in_text_outputs_is_base64(lake: S3Env, fmt: str) -> None:
    uri = put(lake, "blobs/x.parquet", malformed.write(blob_table()))
    response = invoke({"source": uri, "columns": ["id", "b"],
                       "output": {"uri": f"s3://{RESULTS}/out/", "format": fmt}})
    body = lake.get(response["outputs"][0]["uri"]).decode()
    if fmt == "json":
        got = [unbase64(json.loads(line)["b"]) for line in body.split("\n")[:-1]]
    else:
        frame = pl.read_csv(body.encode(), infer_schema=False)
        got = [None if v is None else base64.b64decode(v) for v in frame["b"].to_list()]
        got[2] = b"" if got[2] is None else got[2]  # CSV writes "" and null alike
    assert got == BLOBS
