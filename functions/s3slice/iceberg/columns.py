"""A data file's columns in the table's schema by field id, at every depth (Iceberg spec,
"Column Projection"): a struct's fields, a list's element and a map's key and value are
matched by id too, so a nested field renamed keeps its values, one added later is its
``initial-default`` (else null) in older files, one dropped is not read, and a promoted
one (``int`` to ``long``, ``float`` to ``double``, a wider decimal) is cast by the caller
in polars.

The ids come from the Parquet schema when every field of it has one; otherwise from the
table's name mapping (``schema.name-mapping.default``), a file column no mapping names
being no column of the table; a file with neither is refused by name, as pyiceberg
refuses it, since reading it by position or by today's names could be wrong."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from s3slice.core.errors import ObjectFormatError
from s3slice.iceberg import types as T

FIELD_ID = b"PARQUET:field_id"
NAME_MAPPING = "schema.name-mapping.default"


@dataclasses.dataclass(frozen=True)
class Mapped:
    """A name mapping's field: the names a file may give it, its id (None: not mapped),
    and its children (a struct's fields; ``element``; ``key`` and ``value``)."""

    names: tuple[str, ...]
    field_id: int | None
    fields: tuple[Mapped, ...] = ()


Mapping = tuple[Mapped, ...]


def parse_mapping(text: str) -> Mapping:
    """A name mapping from its JSON (the spec's "Name Mapping Serialization"); a malformed
    one is a ValueError."""
    def one(raw: Any) -> Mapped:
        if not isinstance(raw, dict):
            raise ValueError(f"a name mapping field is an object, not {raw!r}")
        names = raw.get("names") or []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"a name mapping field's names are strings: {names!r}")
        fid = raw.get("field-id")
        if fid is not None and (not isinstance(fid, int) or isinstance(fid, bool)):
            raise ValueError(f"a name mapping field's id is an integer: {fid!r}")
        return Mapped(tuple(names), fid, many(raw.get("fields") or []))

    def many(raw: Any) -> Mapping:
        if not isinstance(raw, list):
            raise ValueError(f"a name mapping is a list of fields, not {raw!r}")
        return tuple(map(one, raw))
    return many(json.loads(text))


@dataclasses.dataclass(frozen=True)
class Node:
    """A file's field: its name in the file, its Iceberg id (None: no column of the
    table), and its children (a struct's fields; a list's element; a map's key and
    value)."""

    id: int | None
    name: str
    children: tuple[Node, ...] = ()


def _children(t: pa.DataType) -> list[tuple[pa.Field[Any], str]]:
    """A nested Arrow type's child fields, each with the name a name mapping gives it."""
    if pa.types.is_map(t):
        return [(t.key_field, "key"), (t.item_field, "value")]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [(t.value_field, "element")]
    if pa.types.is_struct(t):
        return [(t.field(i), t.field(i).name) for i in range(t.num_fields)]
    return []


def file_id(field: pa.Field[Any]) -> int | None:
    raw = (field.metadata or {}).get(FIELD_ID)
    return None if raw is None else int(raw)


def _all_have_ids(fields: Sequence[pa.Field[Any]]) -> bool:
    return all(file_id(f) is not None and _all_have_ids([c for c, _ in _children(f.type)])
               for f in fields)


def by_ids(field: pa.Field[Any]) -> Node:
    """A file's field with the ids its Parquet schema gives it and its children."""
    return Node(file_id(field), field.name, tuple(by_ids(c) for c, _ in _children(field.type)))


def _by_mapping(field: pa.Field[Any], name: str, level: Mapping) -> Node:
    found = next((m for m in level if name in m.names), None)
    below = () if found is None else found.fields
    return Node(None if found is None else found.field_id, field.name,
                tuple(_by_mapping(c, n, below) for c, n in _children(field.type)))


def file_fields(schema: pa.Schema, mapping: Mapping | None, uri: str) -> list[Node]:
    """The file's top-level fields with their ids: the file's own when all its fields
    have one, else the name mapping's; neither is an :class:`ObjectFormatError`."""
    fields = list(schema)
    if _all_have_ids(fields):
        return [by_ids(f) for f in fields]
    if mapping is not None:
        return [_by_mapping(f, f.name, mapping) for f in fields]
    raise ObjectFormatError(
        f"the data file's Parquet schema lacks Iceberg field ids and the table has no name "
        f"mapping ({NAME_MAPPING}): its columns cannot be matched to the table's; nothing "
        f"was read", uri=uri)


def arrow_type(t: T.Type) -> pa.DataType:
    """The Arrow type of an Iceberg type, as polars converts it."""
    out: pa.DataType = pl.Series([], dtype=T.polars_type(t)).to_arrow().type
    return out


def default_array(t: T.Type, default: Any, rows: int, uri: str) -> Any:
    """``rows`` values of a field the file lacks: its ``initial-default`` (the spec's
    column projection), null when it has none."""
    try:
        value = T.from_json(t, default)
        if value is None:
            return pa.nulls(rows, arrow_type(t))  # type: ignore[call-overload]
        return pa.repeat(pa.scalar(value, type=arrow_type(t)), rows)  # type: ignore[call-overload]
    except (ValueError, TypeError, OverflowError, pa.ArrowException) as e:
        raise ObjectFormatError(f"the initial-default {default!r} is not a {t}: {e}",
                                uri=uri) from None


def _find(children: Sequence[Node], fid: int) -> int | None:
    return next((i for i, c in enumerate(children) if c.id == fid), None)


def _mask(array: Any) -> Any:
    return array.is_null() if array.null_count else None


def project(t: T.Type, node: Node, array: Any, uri: str) -> Any:
    """``array`` (the file's ``node``) as the table's type ``t``: a struct's fields by id
    in the table's order and names (one the file lacks null), a list's element and a
    map's key and value projected in turn. Primitives come as the file holds them."""
    if not isinstance(t, dict):
        if pa.types.is_nested(array.type):
            raise ObjectFormatError(f"column {node.name!r} is {array.type} in the file, not "
                                    f"the table's {t}", uri=uri)
        return array
    kind = t.get("type")
    if kind == "struct" and pa.types.is_struct(array.type):
        arrays, names = [], []
        for f in t["fields"]:
            at = _find(node.children, f["id"])
            arrays.append(default_array(f["type"], f.get("initial-default"), len(array), uri)
                          if at is None
                          else project(f["type"], node.children[at], array.field(at), uri))
            names.append(f["name"])
        return pa.StructArray.from_arrays(arrays, names=names, mask=_mask(array))
    if kind == "list" and isinstance(array, pa.ListArray | pa.LargeListArray) and not (
            isinstance(array, pa.MapArray)):
        [element] = node.children
        _same_id(element, t["element-id"], node, uri)
        offsets, values = _entries(array)
        return type(array).from_arrays(offsets, project(t["element"], element, values, uri),
                                       mask=_mask(array))
    if kind == "map" and isinstance(array, pa.MapArray):
        key, value = node.children
        _same_id(key, t["key-id"], node, uri)
        _same_id(value, t["value-id"], node, uri)
        offsets, entries = _entries(array)
        return pa.MapArray.from_arrays(offsets, project(t["key"], key, entries.field(0), uri),
                                       project(t["value"], value, entries.field(1), uri),
                                       mask=_mask(array))
    raise ObjectFormatError(f"column {node.name!r} is {array.type} in the file, not the "
                            f"table's {kind}", uri=uri)


def _entries(array: Any) -> tuple[Any, Any]:
    """A list's (or map's) offsets from 0 and the values they index (Arrow builds a list
    with a validity mask only from offsets that are not a slice)."""
    offsets = array.offsets
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    return pc.subtract(offsets, start), array.values.slice(start, end - start)


def _same_id(child: Node, fid: int, parent: Node, uri: str) -> None:
    if child.id is not None and child.id != fid:
        raise ObjectFormatError(f"column {parent.name!r}: the file's field id {child.id} is "
                                f"not the table's {fid}", uri=uri)
