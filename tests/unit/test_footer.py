"""A Parquet footer parsed from an object's last bytes: its size, its schema, and the typed
errors of a footer that is not one."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3slice import ObjectFormatError
from s3slice.parquet.footer import FooterTooLarge, parse_footer


def test_footer_from_a_suffix(sample: bytes) -> None:
    footer = parse_footer(sample[-65536:], size=len(sample), uri="s3://b/k")
    assert footer.metadata.num_row_groups == 10
    assert footer.schema_names == ["a", "b", "c"]
    assert footer.size == len(sample)
    assert footer.data_end == len(sample) - footer.length


def test_footer_larger_than_the_tail_asks_for_exactly_enough(sample: bytes) -> None:
    with pytest.raises(FooterTooLarge) as info:
        parse_footer(sample[-100:], size=len(sample), uri="s3://b/k")
    footer = parse_footer(sample[-info.value.needed:], size=len(sample), uri="s3://b/k")
    assert footer.metadata.num_row_groups == 10


@pytest.mark.parametrize(("data", "message"), [
    (b"", "too small"),
    (b"PAR1" + b"\0" * 20 + b"NOPE", "no PAR1 magic"),
    (b"PAR1" + b"\0" * 20 + (10**6).to_bytes(4, "little") + b"PAR1", "claims 1000000 bytes"),
    (b"PAR1" + b"\xff" * 20 + (20).to_bytes(4, "little") + b"PAR1", "corrupt Parquet footer"),
])
def test_bad_footers_are_typed_errors(data: bytes, message: str) -> None:
    with pytest.raises(ObjectFormatError, match=message) as info:
        parse_footer(data, size=len(data), uri="s3://b/bad")
    assert "s3://b/bad" in str(info.value)


def test_parse_footer_uses_pyarrow_for_every_type() -> None:
    table = pa.table({"d": pa.array([1, 2], pa.date32()), "s": ["x", "y"],
                      "dec": pa.array([1, 2], pa.decimal128(10, 2))})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    data = buf.getvalue()
    footer = parse_footer(data, size=len(data), uri="u")
    assert footer.schema_names == ["d", "s", "dec"]
