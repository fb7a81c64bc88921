"""Correctness: every approach's answer against the oracle (a plain local polars read).

Answers are first brought to the case's canonical schema (engines differ in integer
widths, string vs. categorical, column names of aggregates). Small answers are compared
as frames, sorted, floats to a relative 1e-9; large ones by an order-insensitive
fingerprint: the row count and the sums of the high and low 32 bits of each row's hash.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .translate import polars_query

if TYPE_CHECKING:
    import polars as pl

    from .cases import Case

SMALL_ROWS = 200_000


def _dtype(name: str) -> pl.DataType:
    import polars as pl

    if name == "Datetime":
        return pl.Datetime("us")
    dtype: pl.DataType = getattr(pl, name)()
    return dtype


def normalize(frame: pl.DataFrame, schema: dict[str, str]) -> pl.DataFrame:
    import polars as pl

    if sorted(frame.columns) != sorted(schema):
        raise ValueError(f"columns {frame.columns} != expected {list(schema)}")
    exprs = []
    for name, type_name in schema.items():
        col = pl.col(name)
        dtype = frame.schema[name]
        if isinstance(dtype, pl.Datetime) and dtype.time_zone is not None:
            col = col.dt.convert_time_zone("UTC").dt.replace_time_zone(None)
        if isinstance(dtype, pl.Categorical | pl.Enum):
            col = col.cast(pl.String)
        exprs.append(col.cast(_dtype(type_name)).alias(name))
    return frame.select(exprs)


@dataclass
class Summary:
    rows: int
    hash_hi: int
    hash_lo: int
    frame_path: str | None = None  # small answers, as Parquet

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "hash_hi": self.hash_hi,
            "hash_lo": self.hash_lo,
            "frame_path": self.frame_path,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Summary:
        return cls(data["rows"], data["hash_hi"], data["hash_lo"], data.get("frame_path"))


def summarize(frame: pl.DataFrame, frame_path: Path | None) -> Summary:
    h = frame.hash_rows(seed=0)
    hi = int((h // (1 << 32)).sum()) if frame.height else 0
    lo = int((h % (1 << 32)).sum()) if frame.height else 0
    path = None
    if frame_path is not None and frame.height <= SMALL_ROWS:
        frame_path.parent.mkdir(parents=True, exist_ok=True)
        frame.write_parquet(frame_path)
        path = str(frame_path)
    return Summary(frame.height, hi, lo, path)


def compare(got: Summary, want: Summary) -> str | None:
    """None when equal, else what differs."""
    import polars as pl
    from polars.testing import assert_frame_equal

    if got.rows != want.rows:
        return f"{got.rows} rows, oracle has {want.rows}"
    if (got.hash_hi, got.hash_lo) == (want.hash_hi, want.hash_lo):
        return None
    if got.frame_path and want.frame_path:
        a = pl.read_parquet(got.frame_path)
        b = pl.read_parquet(want.frame_path)
        a = a.sort(a.columns, nulls_last=True)
        b = b.sort(b.columns, nulls_last=True)
        try:
            assert_frame_equal(a, b, check_exact=False, rel_tol=1e-9, abs_tol=1e-12)
        except AssertionError as exc:
            return "frames differ: " + str(exc).splitlines()[0][:200]
        return None
    return "row fingerprints differ"


def oracle(case: Case, local_paths: list[Path], out: Path) -> Summary:
    """The answer from a plain local polars read of the same generated files."""
    import polars as pl

    if case.format == "csv":
        lf = pl.scan_csv(local_paths[0])
    else:
        lf = pl.scan_parquet([str(p) for p in local_paths])
    frame = normalize(polars_query(lf, case.query).collect(), case.schema)
    return summarize(frame, out)
