"""Parquet files written by other tools (tests/data/world: parquet-testing's files from
parquet-mr, Impala, Arrow C++ and Rust, fuzzers; MinIO's; old pyarrow), read through
``lambda_handler`` on the local S3 server along every path (the ranged read, the whole
object, the chunk copy, the hand-off to polars' reader): each answer equals polars' in-memory
evaluation or DuckDB's on the same file, or is a typed refusal where a reference refuses
too. Nothing the suite wrote itself."""

from __future__ import annotations

import decimal
import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from s3slice import S3SliceError
from tests.fuzz import compare, references, service
from tests.support import S3Env

pytestmark = pytest.mark.integration

WORLD = Path(__file__).resolve().parents[1] / "data" / "world"
FILES = sorted(p.name for p in WORLD.glob("*.parquet"))


def literal(value: Any) -> str | None:
    """``value`` as a constant of the service's dialect, or None where it has none."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | decimal.Decimal):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return None


def quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def queries(frame: pl.DataFrame) -> list[tuple[dict[str, Any], str, list[str]]]:
    """(request, the references' SQL, the paths to take) for the file's columns."""
    every = ["s3-auto", "s3-ranges"]
    found: list[tuple[dict[str, Any], str, list[str]]] = [
        ({}, "SELECT * FROM s3object", [*every, "s3-copy"])]
    if frame.width > 1:
        chosen = frame.columns[::-1][:3]
        found.append(({"columns": chosen},
                      f"SELECT {', '.join(map(quoted, chosen))} FROM s3object",
                      [*every, "s3-copy"]))
    for kind in (pl.Int64, pl.String):
        for name, dtype in frame.schema.items():
            flat = dtype.is_numeric() if kind == pl.Int64 else dtype == pl.String
            values = frame[name].drop_nulls().sort() if flat else None
            if values is None or values.is_empty():
                continue
            constant = literal(values[values.len() // 2])
            if constant is None:
                continue
            op = ">=" if kind == pl.Int64 else "="
            condition = f"{quoted(name)} {op} {constant}"
            found.append(({"filter": condition}, f"SELECT * FROM s3object WHERE {condition}",
                          [*every, "s3-handoff"]))
            break
    found.append(({"sql": "SELECT COUNT(*) AS n FROM s3object"},
                  "SELECT COUNT(*) AS n FROM s3object", every))
    return found


@pytest.mark.parametrize("name", FILES)
def test_a_file_from_another_writer_answers_as_a_reference(s3: S3Env, name: str) -> None:
    path = WORLD / name
    data = path.read_bytes()
    try:
        frame: pl.DataFrame | None = references.decoded(path)
    except references.ReferenceError_:
        frame = None  # no reference reads it: the service must refuse it, typed
    problems: list[str] = []
    for request, sql, paths in (queries(frame) if frame is not None
                                else [({}, "SELECT * FROM s3object", ["s3-auto"])]):
        want: dict[str, pl.DataFrame] = {}
        refusals: list[str] = []
        if frame is not None:
            for ref in ("polars", "duckdb"):
                try:
                    want[ref] = (references.polars_answer(frame, sql) if ref == "polars"
                                 else references.duckdb_answer(path, sql))
                except references.ReferenceError_ as e:
                    refusals.append(str(e))
        for config in paths:
            try:
                got = service.s3_answer(s3.client, data, request, config, name).frame
            except S3SliceError as e:
                if want and not refusals:
                    problems.append(f"{config} {request}: refused ({type(e).__name__}: {e}) "
                                    "where every reference answers")
                continue
            differences = {ref: compare.difference(got, w, ordered=False, aggregate=False,
                                                   loose=ref == "duckdb")
                           for ref, w in want.items()}
            if all(d is not None for d in differences.values()):
                problems.append(f"{config} {request}: differs from every reference "
                                f"{differences or '(none reads the file)'}")
    assert not problems, "\n".join(problems)
