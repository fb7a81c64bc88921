"""The benchmark's data: each case's objects generated once per scale from a seed (the
seed-004 table, wide, many small objects, sorted, small, CSV) and cached in .work/data,
with a manifest per data key. The cases that read them are in ``cases.py``.

``--scale s`` multiplies row counts of the single-object cases and object counts of the
many-object cases by ``s`` (objects keep their size), with the row-group counts unchanged.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import WORK

DATA_VERSION = 1  # bump when generation changes, so cached data is rebuilt

# --------------------------------------------------------------------------- generation


def _rng(seed: int) -> Any:
    import numpy as np

    return np.random.default_rng(seed)


def _write_int_table(path: Path, rows: int, cols: int, row_groups: int, seed: int) -> None:
    """``rows`` by ``cols`` int64 columns col_1.. of uniform 1..1_000_000, snappy."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = _rng(seed)
    per_group = math.ceil(rows / row_groups)
    schema = pa.schema([(f"col_{i}", pa.int64()) for i in range(1, cols + 1)])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with pq.ParquetWriter(tmp, schema, compression="snappy") as writer:
        done = 0
        while done < rows:
            n = min(per_group, rows - done)
            arrays = [pa.array(rng.integers(1, 1_000_001, n)) for _ in range(cols)]
            writer.write_table(pa.Table.from_arrays(arrays, schema=schema), row_group_size=n)
            done += n
    tmp.replace(path)


def gen_seed004(out: Path, scale: float) -> list[str]:
    key = "seed-004/data.parquet"
    _write_int_table(out / key, max(1000, round(10_000_000 * scale)), 10, 10, seed=4)
    return [key]


def gen_wide(out: Path, scale: float) -> list[str]:
    key = "wide/data.parquet"
    _write_int_table(out / key, max(1000, round(4_800_000 * scale)), 30, 10, seed=30)
    return [key]


VENDORS = ["CMT", "VTS", "DDS", "NYC", "JFK"]


def gen_many(out: Path, scale: float) -> list[str]:
    """~5 MB objects: a dictionary-encoded vendor of 5 values, float32 tips (≈40 % zero),
    and fare/distance/pickup columns that make up the bulk."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    count = max(4, round(200 * scale))
    rows = 200_000
    rng = _rng(200)
    keys = []
    probs = np.array([0.35, 0.3, 0.15, 0.12, 0.08])
    base = int(dt.datetime(2024, 1, 1, tzinfo=dt.UTC).timestamp() * 1_000_000)
    for i in range(count):
        key = f"many/part-{i:04d}.parquet"
        vendor_idx = rng.choice(len(VENDORS), rows, p=probs).astype(np.int32)
        # The zero share differs by vendor, so the answer is not the same for every group.
        zero_p = np.array([0.2, 0.35, 0.5, 0.65, 0.8])[vendor_idx]
        tips = np.where(
            rng.random(rows) < zero_p, 0.0, np.round(rng.gamma(2.0, 2.0, rows), 2)
        ).astype(np.float32)
        table = pa.table(
            {
                "vendor": pa.DictionaryArray.from_arrays(pa.array(vendor_idx), pa.array(VENDORS)),
                "tips": pa.array(tips),
                "fare": pa.array(np.round(rng.gamma(3.0, 6.0, rows), 2)),
                "trip_distance": pa.array(rng.gamma(2.0, 1.5, rows).astype(np.float32)),
                "pickup": pa.array(
                    base + np.sort(rng.integers(0, 86_400_000_000, rows)), pa.timestamp("us")
                ),
            }
        )
        path = out / key
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path, compression="snappy", row_group_size=rows)
        keys.append(key)
    return keys


SORTED_START = dt.datetime(2024, 1, 1)
SORTED_SPAN = dt.timedelta(days=100)


def sorted_window(scale: float) -> tuple[dt.datetime, dt.datetime]:
    """A 1 % window of the time span (the timestamps are uniform over it)."""
    del scale
    lo = SORTED_START + SORTED_SPAN * 0.42
    return lo, lo + SORTED_SPAN * 0.01


def gen_sorted(out: Path, scale: float, *, page_index: bool = False) -> list[str]:
    """Rows sorted by ``ts`` (uniform over 100 days), 20 row groups.

    With ``page_index`` the same rows are written with a page index (ColumnIndex and
    OffsetIndex), as parquet-mr and arrow-rs write by default.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = max(2000, round(10_000_000 * scale))
    rng = _rng(20)
    span_us = int(SORTED_SPAN.total_seconds() * 1_000_000)
    start_us = int(SORTED_START.replace(tzinfo=dt.UTC).timestamp() * 1_000_000)
    ts = np.sort(rng.integers(0, span_us, rows)) + start_us
    per_group = math.ceil(rows / 20)
    schema = pa.schema(
        [
            ("ts", pa.timestamp("us")),
            ("sensor_id", pa.int32()),
            ("value", pa.float64()),
            ("reading", pa.int64()),
        ]
    )
    key = "sorted-indexed/data.parquet" if page_index else "sorted/data.parquet"
    path = out / key
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with pq.ParquetWriter(tmp, schema, compression="snappy", write_page_index=page_index) as writer:
        for start in range(0, rows, per_group):
            n = min(per_group, rows - start)
            table = pa.Table.from_arrays(
                [
                    pa.array(ts[start : start + n], pa.timestamp("us")),
                    pa.array(rng.integers(0, 5000, n).astype(np.int32)),
                    pa.array(rng.normal(20.0, 5.0, n)),
                    pa.array(rng.integers(0, 1 << 40, n)),
                ],
                schema=schema,
            )
            writer.write_table(table, row_group_size=n)
    tmp.replace(path)
    return [key]


LABELS = [f"label-{i:02d}" for i in range(20)]


def gen_small(out: Path, scale: float) -> list[str]:
    """~200 kB objects of 5 columns."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    count = max(10, round(500 * scale))
    rows = 5_000
    rng = _rng(500)
    keys = []
    for i in range(count):
        key = f"small/obj-{i:04d}.parquet"
        table = pa.table(
            {
                "id": pa.array(np.arange(i * rows, (i + 1) * rows, dtype=np.int64)),
                "x": pa.array(rng.integers(0, 1 << 40, rows)),
                "y": pa.array(rng.normal(0.0, 1.0, rows)),
                "label": pa.array(np.array(LABELS)[rng.integers(0, len(LABELS), rows)]),
                "flag": pa.array(rng.random(rows) < 0.5),
            }
        )
        path = out / key
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path, compression="snappy")
        keys.append(key)
    return keys


FIRST_NAMES = [f"name{i:05d}" for i in range(2000)]
CITIES = [f"city-{i:03d}" for i in range(300)]


def gen_csv(out: Path, scale: float) -> list[str]:
    """~1 GB: name, city (strings), n (1..1000), amount (1..1_000_000)."""
    import numpy as np
    import polars as pl

    rows = max(10_000, round(30_000_000 * scale))
    rng = _rng(7)
    key = "csv/data.csv"
    path = out / key
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    names = pl.Series(FIRST_NAMES)
    cities = pl.Series(CITIES)
    chunk = 2_000_000
    with tmp.open("wb") as f:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            frame = pl.DataFrame(
                {
                    "name": names.gather(rng.integers(0, len(FIRST_NAMES), n)),
                    "city": cities.gather(rng.integers(0, len(CITIES), n)),
                    "n": rng.integers(1, 1001, n, dtype=np.int64),
                    "amount": rng.integers(1, 1_000_001, n, dtype=np.int64),
                }
            )
            frame.write_csv(f, include_header=start == 0)
    tmp.replace(path)
    return [key]


GENERATORS: dict[str, Callable[[Path, float], list[str]]] = {
    "seed-004": gen_seed004,
    "wide": gen_wide,
    "many": gen_many,
    "sorted": gen_sorted,
    "sorted-indexed": functools.partial(gen_sorted, page_index=True),
    "small": gen_small,
    "csv": gen_csv,
}


def data_dir(scale: float) -> Path:
    return WORK / "data" / f"scale-{scale:g}"


def ensure_data(data_key: str, scale: float) -> list[str]:
    """Generate a data set once per scale; a manifest records what was written."""
    out = data_dir(scale)
    manifest = out / f"{data_key}.manifest.json"
    if manifest.exists():
        meta = json.loads(manifest.read_text())
        if meta.get("version") == DATA_VERSION and all(
            (out / k).exists() and (out / k).stat().st_size == s
            for k, s in zip(meta["keys"], meta["sizes"], strict=True)
        ):
            return list(meta["keys"])
    out.mkdir(parents=True, exist_ok=True)
    print(f"[data] generating {data_key} at scale {scale:g} ...", flush=True)
    keys = GENERATORS[data_key](out, scale)
    sizes = [(out / k).stat().st_size for k in keys]
    manifest.write_text(
        json.dumps({"version": DATA_VERSION, "keys": keys, "sizes": sizes}, indent=1)
    )
    print(f"[data]   {len(keys)} object(s), {sum(sizes) / 1e6:.1f} MB", flush=True)
    return keys


def data_fingerprint(data_key: str, scale: float) -> str:
    out = data_dir(scale)
    return hashlib.sha256((out / f"{data_key}.manifest.json").read_bytes()).hexdigest()[:16]
