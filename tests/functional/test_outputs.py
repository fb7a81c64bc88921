"""Outputs. Inline rows stay under Lambda's response limit: beyond it, a clear error, or (when an
output is given) the rows are only in the output and the response says so."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import s3slice.answer.run as run_module
import s3slice.answer.textual as textual_module
import s3slice.answer.write as output_module
from s3slice import (
    Engine,
    FooterCache,
    LocalFetcher,
    ResultTooLargeError,
    Settings,
    parse_request,
)
from s3slice.core.model import ObjectRef, OutputSpec, Query, Request

BUCKET = "data"


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Engine:
    (tmp_path / BUCKET).mkdir()
    (tmp_path / "out").mkdir()
    pl.DataFrame({"a": list(range(5_000))}).write_parquet(tmp_path / BUCKET / "t.parquet")
    monkeypatch.setattr(output_module, "MAX_INLINE_BYTES", 10_000)
    return Engine(Settings(memory_mb=1024), fetcher=LocalFetcher(tmp_path),
                  footer_cache=FooterCache(1 << 20))


def respond(request: dict[str, Any], *, engine: Engine) -> dict[str, Any]:
    """The service's JSON response to a request given as JSON."""
    return run_module.run(parse_request(request), engine=engine).to_dict()


def test_small_results_come_back_inline(engine: Engine) -> None:
    response = respond({"source": f"s3://{BUCKET}/t.parquet", "filter": "a < 3"},
                                 engine=engine)
    assert response["rows"] == [{"a": 0}, {"a": 1}, {"a": 2}]


def test_too_many_rows_without_an_output_is_a_clear_error(engine: Engine) -> None:
    with pytest.raises(ResultTooLargeError) as info:
        respond({"source": f"s3://{BUCKET}/t.parquet"}, engine=engine)
    assert info.value.field == "return_rows"
    assert "5000 rows" in str(info.value) and "output location" in str(info.value)


def test_too_many_rows_with_an_output_spill_to_it(engine: Engine, tmp_path: Path) -> None:
    response = respond({"source": f"s3://{BUCKET}/t.parquet", "return_rows": True,
                                  "output": {"uri": "s3://out/r/", "format": "csv"}},
                                 engine=engine)
    assert "rows" not in response
    assert "5000 rows" in response["rows_spilled"]
    (written,) = response["outputs"]
    path = tmp_path / written["uri"].removeprefix("s3://")
    assert pl.read_csv(io.BytesIO(path.read_bytes()))["a"].to_list() == list(range(5_000))


def test_nested_columns_go_to_csv_as_their_json_text(tmp_path: Path) -> None:
    """A CSV field holds a nested value's compact JSON text (non-ASCII as is, a null an
    empty field), the text its NDJSON output holds for it."""
    (tmp_path / BUCKET).mkdir()
    frame = pl.DataFrame({"id": [1, 2], "tags": [["a", "é"], None],
                          "point": [{"x": 1, "s": "Zürich"}, {"x": None, "s": None}]})
    frame.write_parquet(tmp_path / BUCKET / "n.parquet")
    engine = Engine(Settings(memory_mb=1024), fetcher=LocalFetcher(tmp_path))
    (tmp_path / "out").mkdir()
    request = {"source": f"s3://{BUCKET}/n.parquet"}
    texts = {}
    for fmt in ("csv", "json"):
        response = respond({**request, "output": {"uri": f"s3://out/{fmt}/", "format": fmt}},
                           engine=engine)
        [out] = response["outputs"]
        texts[fmt] = (tmp_path / "out" / out["uri"].removeprefix("s3://out/")).read_text()
    got = pl.read_csv(io.StringIO(texts["csv"]), schema_overrides={"tags": pl.String,
                                                                  "point": pl.String})
    assert got["tags"].to_list() == ['["a","é"]', None]
    assert got["point"].to_list() == ['{"x":1,"s":"Zürich"}', '{"x":null,"s":null}']
    records = [json.loads(line) for line in texts["json"].splitlines()]
    assert [json.loads(t) if t else None for t in got["tags"]] == [r["tags"] for r in records]
    assert [json.loads(t) for t in got["point"]] == [r["point"] for r in records]


# ---------------------------------------------------------------- output keys

_segment = st.text(alphabet="ab./-_ =%", min_size=0, max_size=6)
_source = st.builds(lambda bucket, parts: ObjectRef(bucket=bucket, key="/".join(parts)),
                    st.sampled_from(["a", "b", "data"]),
                    st.lists(_segment, min_size=1, max_size=4))


@settings(max_examples=400, derandomize=True, database=None)
@given(sources=st.lists(_source, min_size=1, max_size=12),
       fmt=st.sampled_from(["parquet", "csv", "json"]))
def test_distinct_sources_always_get_distinct_deterministic_output_keys(
        sources: list[ObjectRef], fmt: str) -> None:
    out = OutputSpec(uri="s3://out/p/", format=fmt,  # type: ignore[arg-type]
                     compression="zstd" if fmt == "parquet" else "none")
    request = Request(sources=tuple(sources), query=Query(columns=("a",)), output=out)
    keys = {s: output_module.output_key(out, request, s) for s in sources}
    assert len(set(keys.values())) == len(set(sources))
    # Deterministic: the key of a source does not depend on the other sources named.
    for source, key in keys.items():
        alone = Request(sources=(source,), query=request.query, output=out)
        assert output_module.output_key(out, alone, source) == key


# ------------------------------------------------------------ JSON records, exactly

FLOAT_VALUES = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(FLOAT_VALUES, st.text(max_size=5), FLOAT_VALUES), max_size=12))
def test_json_records_keep_every_value_apart(rows: list[tuple[Any, str, Any]]) -> None:
    """Each record parses back (strict JSON) to the row: NaN and infinities as their
    strings, null as null, text exactly (U+2028 and the like do not split a record)."""
    import json
    import math
    frame = pl.DataFrame({"x": [r[0] for r in rows], "s": [r[1] for r in rows],
                          "l": [[r[2], 1.0] for r in rows]},
                         schema={"x": pl.Float64, "s": pl.String, "l": pl.List(pl.Float64)})

    def back(value: Any) -> Any:
        return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(
            value, value) if isinstance(value, str) else value

    def same(a: Any, b: Any) -> bool:
        return (a is None and b is None) or (a is not None and b is not None and (
            (math.isnan(a) and math.isnan(b)) or a == b))

    def strict(constant: str) -> Any:
        raise AssertionError(constant)
    lines = textual_module.json_records(frame)
    inline = output_module.inline_rows(frame)
    assert len(lines) == len(inline) == len(rows)
    for line, row, raw in zip(lines, inline, rows, strict=True):
        for record in (json.loads(line, parse_constant=strict), row):
            assert same(back(record["x"]), raw[0])
            assert record["s"] == raw[1]
            assert same(back(record["l"][0]), raw[2])


def test_a_patched_record_keeps_its_other_numbers_digit_for_digit() -> None:
    from decimal import Decimal
    frame = pl.DataFrame({"x": [float("nan"), 0.1], "d": [Decimal("12345678901234567.89")] * 2,
                          "big": [2**63 - 1] * 2, "f": [1e-300, 1e300]})
    lines = textual_module.json_records(frame)
    plain = frame.write_ndjson().split("\n")
    assert lines[0] == plain[0].replace('"x":null', '"x":"NaN"')
    assert lines[1] == plain[1]
