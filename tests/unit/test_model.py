"""Request and value types: parsing a request, and the errors that name its field."""

from __future__ import annotations

from typing import Any

import pytest

from s3slice import RequestError, parse_request
from s3slice.core.model import InputSpec, ObjectRef, SourceSpec, object_ref


def test_minimal_request() -> None:
    req = parse_request({"source": "s3://b/k.parquet", "columns": ["a", "b"],
                         "filter": "a <= 1000", "limit": 10})
    assert req.sources == (SourceSpec(bucket="b", key="k.parquet"),)
    assert req.query.columns == ("a", "b")
    assert req.query.filter == "a <= 1000"
    assert req.query.limit == 10
    assert req.output is None
    assert req.return_rows is False


def test_sources_list_and_prefix() -> None:
    req = parse_request({"source": ["s3://b/k1", "s3://b/p/"], "sql": "SELECT * FROM s3object"})
    assert [s.is_prefix for s in req.sources if isinstance(s, SourceSpec)] == [False, True]


def test_output_defaults() -> None:
    req = parse_request({"source": "s3://b/k", "output": {"uri": "s3://o/out/"}})
    assert req.output is not None
    assert (req.output.format, req.output.compression) == ("parquet", "zstd")
    assert (req.output.bucket, req.output.prefix) == ("o", "out/")


@pytest.mark.parametrize(("raw", "field"), [
    ({}, "source"),
    ({"source": 3}, "source"),
    ({"source": []}, "source"),
    ({"source": "http://b/k"}, "source"),
    ({"source": "s3:///k"}, "source"),
    ({"source": ["s3://b/k", 4]}, "source[1]"),
    ({"source": "s3://b/k", "columns": "a,,b"}, "columns[1]"),
    ({"source": "s3://b/k", "columns": [1]}, "columns[0]"),
    ({"source": "s3://b/k", "columns": ["a", "a"]}, "columns"),
    ({"source": "s3://b/k", "limit": -1}, "limit"),
    ({"source": "s3://b/k", "limit": "10"}, "limit"),
    ({"source": "s3://b/k", "limit": True}, "limit"),
    ({"source": "s3://b/k", "filter": ""}, "filter"),
    ({"source": "s3://b/k", "sql": "SELECT 1", "columns": ["a"]}, "sql"),
    ({"source": "s3://b/k", "sql": "x" * 70000}, "sql"),
    ({"source": "s3://b/k", "output": {"uri": "b/out"}}, "output.uri"),
    ({"source": "s3://b/k", "output": {"uri": "s3://b/o/", "format": "xml"}}, "output.format"),
    ({"source": "s3://b/k", "output": {"uri": "s3://b/o/", "compression": "rar"}},
     "output.compression"),
    ({"source": "s3://b/k", "output": {"uri": "s3://b/o/", "mode": 1}}, "output"),
    ({"source": "s3://b/k", "return_rows": "yes"}, "return_rows"),
    ({"source": "s3://b/k", "input": 3}, "input"),
    ({"source": "s3://b/k", "input": "xml"}, "input.format"),
    ({"source": "s3://b/k", "input": {"compression": "gzip"}}, "input.format"),
    ({"source": "s3://b/k", "input": {"format": "csv", "compression": "rar"}},
     "input.compression"),
    ({"source": "s3://b/k", "input": {"format": "csv", "delimiter": ";;"}}, "input.delimiter"),
    ({"source": "s3://b/k", "input": {"format": "csv", "quote": 1}}, "input.quote"),
    ({"source": "s3://b/k", "input": {"format": "csv", "header": "yes"}}, "input.header"),
    ({"source": "s3://b/k", "input": {"format": "csv", "infer_types": 1}}, "input.infer_types"),
    ({"source": "s3://b/k", "input": {"format": "json", "json_type": "xml"}},
     "input.json_type"),
    ({"source": "s3://b/k", "input": {"format": "csv", "escape": "\\"}}, "input"),
    ({"source": "s3://b/k", "input": {"format": "parquet", "compression": "gzip"}}, "input"),
])
def test_malformed_requests_name_their_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_request(raw)
    assert info.value.field == field
    assert field in str(info.value)


def test_unknown_top_level_field_is_named() -> None:
    with pytest.raises(RequestError, match="colums"):
        parse_request({"source": "s3://b/k", "colums": ["a"]})


@pytest.mark.parametrize("raw", [None, [], "text", 5])
def test_request_must_be_an_object(raw: object) -> None:
    with pytest.raises(RequestError, match="JSON object"):
        parse_request(raw)


def test_query_hash_depends_on_query_not_destination() -> None:
    a = parse_request({"source": "s3://b/k", "columns": ["a"], "output": "s3://o/x/"})
    b = parse_request({"source": "s3://b/other", "columns": ["a"], "output": "s3://o/y/"})
    c = parse_request({"source": "s3://b/k", "columns": ["b"], "output": "s3://o/x/"})
    assert a.query_hash() == b.query_hash() != c.query_hash()


def test_event_keys_are_url_decoded() -> None:
    ref = object_ref("b", "dir/my+file%3D1.parquet", size=10, etag="abc", url_encoded=True)
    assert ref == ObjectRef(bucket="b", key="dir/my file=1.parquet", size=10,
                            etag="\"abc\"")  # quoted, as S3 sends ETags


def test_input_options() -> None:
    req = parse_request({"source": "s3://b/k", "input": {
        "format": "csv", "compression": "zstd", "header": False, "delimiter": ";",
        "comment": "#", "infer_types": False}})
    assert req.input is not None
    assert (req.input.format, req.input.compression, req.input.header) == ("csv", "zstd", "none")
    assert (req.input.delimiter, req.input.comment, req.input.strings_only) == (";", "#", True)
    assert parse_request({"source": "s3://b/k", "input": "json"}).input == InputSpec(
        format="json", compression="auto", json_type="auto", strings_only=False)
    assert parse_request({"source": "s3://b/k"}).input is None


@pytest.mark.parametrize(("request_", "field"), [
    ({"source": "s3://b/data/", "output": "s3://b/data/out/"}, "output.uri"),
    ({"source": "s3://b/", "output": "s3://b/out/"}, "output.uri"),
    ({"source": ["s3://c/x", "s3://b/out/x.parquet"], "output": "s3://b/out/"}, "source[1]"),
])
def test_direct_requests_may_not_read_their_own_output(request_: dict[str, Any],
                                                       field: str) -> None:
    with pytest.raises(RequestError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_request(request_)
