"""A data file's rows by field id, its row groups pruned by statistics with positions kept
as the file's, and deletes applied (position, and equality with null equal to null)."""

from __future__ import annotations

import datetime as dt
import io
import json

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3slice.core.errors import ObjectFormatError
from s3slice.iceberg import columns as C
from s3slice.iceberg import datafile as D
from s3slice.iceberg.metadata import Field, Schema
from s3slice.query.pruning import predicate as P


def _file() -> bytes:
    ids = {b"PARQUET:field_id": b"1"}
    table = pa.table([pa.array(range(50), pa.int32()), pa.array([f"s{i}" for i in range(50)])],
                     schema=pa.schema([pa.field("old_id", pa.int32(), metadata=ids),
                                       pa.field("s", pa.string(),
                                                metadata={b"PARQUET:field_id": b"2"})]))
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=10)
    return buf.getvalue()


SCHEMA = Schema(1, (Field(1, "id", "long"), Field(2, "s", "string"), Field(3, "new", "double")))


def test_rows_by_field_id_promoted_renamed_and_added() -> None:
    frame, groups, read = D.read_rows(_file(), "s3://b/f", SCHEMA, ["id", "s", "new"])
    assert (groups, read) == (5, 5)
    assert frame.schema["id"] == pl.Int64 and frame.schema["new"] == pl.Float64
    assert frame["id"].to_list() == list(range(50)) and frame["new"].null_count() == 50


def test_pruned_row_groups_keep_the_files_positions() -> None:
    frame, groups, read = D.read_rows(_file(), "s3://b/f", SCHEMA, ["id"],
                                      predicate=P.Cmp("id", ">=", 35))
    assert (groups, read) == (5, 2)
    deleted = [pl.Series([31, 36, 49], dtype=pl.Int64)]
    kept = D.apply_deletes(frame, deleted, [])
    assert kept["id"].to_list() == [i for i in range(30, 50) if i not in (31, 36, 49)]
    # a column the file lacks is null in all of it: equality with a constant rules it out
    _, _, read = D.read_rows(_file(), "s3://b/f", SCHEMA, ["id"],
                             predicate=P.Cmp("new", "=", 1.0))
    assert read == 0


def test_equality_deletes_match_null_to_null() -> None:
    frame = pl.DataFrame({"id": [1, 2, 3], "__eq2": ["a", None, "c"],
                          "__s3slice_pos": [0, 1, 2]})
    deletes = pl.DataFrame({"__eq2": [None, "c"]}, schema={"__eq2": pl.String})
    assert D.apply_deletes(frame, [], [deletes])["id"].to_list() == [1]


# -- nested fields by id, and files without ids through the name mapping ---------------

def _ided(name: str, type_: pa.DataType, fid: int | None) -> pa.Field:
    return pa.field(name, type_, metadata=None if fid is None else {
        b"PARQUET:field_id": str(fid).encode()})


def _parquet(table: pa.Table, row_group_size: int = 3) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=row_group_size)
    return buf.getvalue()


def _nested_file(*, ids: bool = True) -> bytes:
    """``s`` (id 2: a int id 3, b string id 4), ``l`` (id 5: list of int, element id 6)
    and ``m`` (id 7: map string id 8 to float id 9), over 10 rows in row groups of 3."""
    def i(n: int) -> int | None:
        return n if ids else None
    s_type = pa.struct([_ided("a", pa.int32(), i(3)), _ided("b", pa.string(), i(4))])
    l_type = pa.list_(_ided("element", pa.int32(), i(6)))
    m_type = pa.map_(_ided("key", pa.string(), i(8)).with_nullable(False),
                     _ided("value", pa.float32(), i(9)))
    rows = range(10)
    schema = pa.schema([_ided("id", pa.int64(), i(1)), _ided("s", s_type, i(2)),
                        _ided("l", l_type, i(5)), _ided("m", m_type, i(7))])
    return _parquet(pa.table([
        pa.array(rows, pa.int64()),
        pa.array([None if r == 4 else {"a": r, "b": f"b{r}"} for r in rows], s_type),
        pa.array([None if r == 5 else [r, None][: r % 3] for r in rows], l_type),
        pa.array([None if r == 6 else [("k", r / 2)][: r % 2] for r in rows], m_type),
    ], schema=schema))


def _struct(*fields: tuple[int, str, object]) -> dict[str, object]:
    return {"type": "struct", "fields": [{"id": i, "name": n, "required": False, "type": t}
                                         for i, n, t in fields]}


EVOLVED = Schema(2, (
    Field(1, "id", "long"),
    # b renamed, a promoted and moved after it, c added (null in the file)
    Field(2, "s", _struct((4, "bee", "string"), (3, "a", "long"), (10, "c", "double"))),
    Field(5, "l", {"type": "list", "element-id": 6, "element": "long",
                   "element-required": False}),
    Field(7, "m", {"type": "map", "key-id": 8, "key": "string", "value-id": 9,
                   "value": "double", "value-required": False}),
    Field(11, "t", _struct((12, "x", "int"))),  # a struct added later: null
))


def _want() -> pl.DataFrame:
    rows = range(10)
    return pl.DataFrame({
        "id": list(rows),
        "s": [None if r == 4 else {"bee": f"b{r}", "a": r, "c": None} for r in rows],
        "l": [None if r == 5 else [r, None][: r % 3] for r in rows],
        "t": [None] * 10,
    }, schema={"id": pl.Int64, "s": EVOLVED.by_name()["s"].dtype,
               "l": pl.List(pl.Int64), "t": EVOLVED.by_name()["t"].dtype})


def _check(frame: pl.DataFrame) -> None:
    want = _want()
    assert frame.schema == {**EVOLVED.polars()}
    for name in ("id", "s", "l", "t"):
        assert frame[name].to_list() == want[name].to_list(), name
    assert frame["m"].to_list() == [None if r == 6 else ({"k": r / 2} if r % 2 else {})
                                    for r in range(10)]


def test_nested_fields_by_id_renamed_promoted_added_over_row_groups() -> None:
    frame, groups, _ = D.read_rows(_nested_file(), "s3://b/f", EVOLVED, ["id", "s", "l", "m", "t"])
    assert groups == 4
    _check(frame.drop("__s3slice_pos"))


def test_pruned_row_groups_project_nested_columns_of_the_groups_kept() -> None:
    frame, _, read = D.read_rows(_nested_file(), "s3://b/f", EVOLVED, ["id", "s", "l", "m"],
                                 predicate=P.Cmp("id", ">=", 7))
    assert read == 2  # the groups of rows 6-8 and 9 (positions kept, rows not filtered)
    assert frame["__s3slice_pos"].to_list() == [6, 7, 8, 9]
    assert frame["s"].to_list() == [{"bee": f"b{r}", "a": r, "c": None} for r in (6, 7, 8, 9)]
    assert frame["m"].to_list() == [None, {"k": 3.5}, {}, {"k": 4.5}]


MAPPING = C.parse_mapping(json.dumps([
    {"field-id": 1, "names": ["id"]},
    {"field-id": 2, "names": ["s"], "fields": [{"field-id": 3, "names": ["a"]},
                                               {"field-id": 4, "names": ["b", "bee"]}]},
    {"field-id": 5, "names": ["l"], "fields": [{"field-id": 6, "names": ["element"]}]},
    {"field-id": 7, "names": ["m"], "fields": [{"field-id": 8, "names": ["key"]},
                                               {"field-id": 9, "names": ["value"]}]}]))


def test_a_file_without_ids_is_read_through_the_name_mapping() -> None:
    frame, _, _ = D.read_rows(_nested_file(ids=False), "s3://b/f", EVOLVED,
                              ["id", "s", "l", "m", "t"], mapping=MAPPING)
    _check(frame.drop("__s3slice_pos"))


def test_ids_in_the_file_win_over_the_name_mapping() -> None:
    swapped = C.parse_mapping(json.dumps([{"field-id": 1, "names": ["s"]},
                                          {"field-id": 2, "names": ["id"]}]))
    frame, _, _ = D.read_rows(_nested_file(), "s3://b/f", EVOLVED, ["id", "s"],
                              mapping=swapped)
    assert frame["id"].to_list() == list(range(10))


def test_a_field_the_mapping_does_not_name_is_null() -> None:
    partial = C.parse_mapping(json.dumps([{"field-id": 1, "names": ["id"]},
                                          {"field-id": 2, "names": ["s"], "fields": [
                                              {"field-id": 3, "names": ["a"]}]}]))
    frame, _, _ = D.read_rows(_nested_file(ids=False), "s3://b/f", EVOLVED, ["s", "l"],
                              mapping=partial)
    assert frame["l"].null_count() == 10
    assert frame["s"].to_list()[:2] == [{"bee": None, "a": 0, "c": None},
                                        {"bee": None, "a": 1, "c": None}]


def test_no_ids_and_no_mapping_or_only_some_ids_is_refused_by_name() -> None:
    with pytest.raises(ObjectFormatError, match="name mapping") as info:
        D.read_rows(_nested_file(ids=False), "s3://b/no-ids", EVOLVED, ["id"])
    assert "s3://b/no-ids" in str(info.value)
    some = pa.table([pa.array([1], pa.int64()), pa.array(["x"])], schema=pa.schema(
        [_ided("id", pa.int64(), 1), _ided("s", pa.string(), None)]))
    with pytest.raises(ObjectFormatError, match="field ids"):
        D.read_rows(_parquet(some), "s3://b/some", SCHEMA, ["id"])


def test_a_file_whose_shape_is_not_the_tables_is_refused_by_name() -> None:
    wrong = Schema(3, (Field(2, "s", "string"),))
    with pytest.raises(ObjectFormatError, match="'s'") as info:
        D.read_rows(_nested_file(), "s3://b/shape", wrong, ["s"])
    assert "s3://b/shape" in str(info.value)
    element = Schema(3, (Field(5, "l", {"type": "list", "element-id": 99, "element": "int",
                                        "element-required": False}),))
    with pytest.raises(ObjectFormatError, match="field id 6"):
        D.read_rows(_nested_file(), "s3://b/shape", element, ["l"])
    text = Schema(3, (Field(4, "b", "int"),))
    plain = pa.table([pa.array(["x"])], schema=pa.schema([_ided("b", pa.string(), 4)]))
    with pytest.raises(ObjectFormatError, match="cannot be read as"):
        D.read_rows(_parquet(plain), "s3://b/text", text, ["b"])


def test_projection_of_sliced_nested_arrays_keeps_their_rows() -> None:
    node = C.Node(1, "x", (C.Node(2, "l", (C.Node(3, "element"),)),))
    t = _struct((2, "l", {"type": "list", "element-id": 3, "element": "long",
                          "element-required": False}))
    rows = [None if r % 4 == 0 else {"l": None if r % 3 == 0 else list(range(r % 5))}
            for r in range(20)]
    array = pa.array(rows, pa.struct([("l", pa.list_(pa.int32()))]))
    for start in (0, 1, 5, 13):
        got = C.project(t, node, array.slice(start, 6), "s3://b/f")
        assert got.to_pylist() == rows[start:start + 6]


MALFORMED = ["{}", '[{"names": 7}]', '[{"names": ["a"], "field-id": "1"}]',
             '[{"fields": {"a": 1}}]', "not json"]


@pytest.mark.parametrize("text", MALFORMED)
def test_a_malformed_name_mapping_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match=r"name mapping|Expecting value"):
        C.parse_mapping(text)


def test_a_column_the_file_lacks_is_its_identity_partition_value_and_not_pruned() -> None:
    schema = Schema(1, (Field(1, "id", "long"), Field(7, "cat", "string"),
                        Field(8, "day", "date")))
    constants = {7: "west", 8: dt.date(2024, 5, 1)}
    frame, groups, read = D.read_rows(_file(), "s3://b/f", schema, ["id", "cat", "day"],
                                      predicate=P.Cmp("cat", "=", "west"), constants=constants)
    assert (groups, read) == (5, 5)  # no statistic of the file says the column is null
    assert frame["cat"].to_list() == ["west"] * 50
    assert frame["day"].to_list() == [dt.date(2024, 5, 1)] * 50
    _, _, read = D.read_rows(_file(), "s3://b/f", schema, ["id"],
                             predicate=P.Cmp("cat", "=", "west"))
    assert read == 0  # without the partition value, the column is null throughout
    with pytest.raises(ObjectFormatError, match="partition value") as info:
        D.read_rows(_file(), "s3://b/bad", schema, ["day"], constants={8: "not a date"})
    assert "s3://b/bad" in str(info.value)


def test_equality_deletes_by_a_nested_field_are_refused_by_name() -> None:
    from s3slice.iceberg import manifests as M

    def delete_file(*ids: int) -> M.DataFile:
        return M.DataFile(2, "s3://b/eq", "PARQUET", (), 1, 1, 0, 1, {}, {}, {}, ids)
    data = _parquet(pa.table([pa.array([1], pa.int64())],
                             schema=pa.schema([_ided("id", pa.int64(), 1)])))
    fields = EVOLVED.by_id()
    assert D.equality_rows(data, "s3://b/eq", delete_file(1), fields)["__eq1"].to_list() == [1]
    with pytest.raises(ObjectFormatError, match=r"field ids \[3\].*nested") as info:
        D.equality_rows(data, "s3://b/eq", delete_file(1, 3), fields)
    assert "s3://b/eq" in str(info.value)
    with pytest.raises(ObjectFormatError, match=r"lacks field ids \[2\]"):
        D.equality_rows(data, "s3://b/eq", delete_file(2), fields)


def test_some_ids_with_a_mapping_read_by_the_mapping_and_a_dotted_name_is_literal() -> None:
    """A file where only some fields carry ids is read through the mapping (as pyiceberg
    reads it); a mapped name with a dot names a column so called, not a nested field."""
    some = pa.table([pa.array([1, 2], pa.int64()), pa.array(["x", "y"]),
                     pa.array([{"c": 5}, {"c": 6}], pa.struct([("c", pa.int32())]))],
                    schema=pa.schema([_ided("id", pa.int64(), 7), _ided("a.b", pa.string(), None),
                                      _ided("a", pa.struct([("c", pa.int32())]), 9)]))
    mapping = C.parse_mapping(json.dumps([
        {"field-id": 1, "names": ["id"]}, {"field-id": 2, "names": ["a.b"]},
        {"field-id": 3, "names": ["a"], "fields": [{"field-id": 4, "names": ["c"]}]}]))
    schema = Schema(1, (Field(1, "id", "long"), Field(2, "ab", "string"),
                        Field(3, "a", _struct((4, "c", "long")))))
    frame, _, _ = D.read_rows(_parquet(some), "s3://b/f", schema, ["id", "ab", "a"],
                              mapping=mapping)
    assert frame.drop("__s3slice_pos").to_dicts() == [
        {"id": 1, "ab": "x", "a": {"c": 5}}, {"id": 2, "ab": "y", "a": {"c": 6}}]
