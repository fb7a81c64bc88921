"""What a cold start and a first job import: nothing the job does not need.

A module imported on the first job is paid for by every cold start (Lambda bills the init
and the first job alike), so a regression here is a cost regression the suite can see
without timing anything: the modules themselves are the figures.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

JOB = """
import io, json, struct, sys
import pyarrow as pa
import polars as pl
import pyarrow.parquet as pq
import s3slice.handler  # noqa: F401
from s3slice.parquet.arrow import empty_table
from s3slice.parquet.decode import polars_schema
from s3slice.parquet.plan import plain_bounds, polars_types
schema = pa.schema([("a", pa.int64()), ("t", pa.timestamp("us", tz="+02:15")),
                    ("s", pa.struct([("x", pa.list_(pa.string()))])),
                    ("d", pa.dictionary(pa.int32(), pa.string()))])
types = polars_types(schema)
chosen = polars_schema(schema, ("a", "d"))
table = empty_table(schema)
buf = io.BytesIO()
pq.write_table(pa.Table.from_arrays([pa.nulls(1, pa.date32())], names=["day"]), buf)
day = pq.read_metadata(pa.BufferReader(buf.getvalue())).schema.column(0)
days = plain_bounds([struct.pack("<i", d) for d in (0, 19_000)], day, pl.Date())
print(json.dumps({"pandas": "pandas" in sys.modules, "types": sorted(types),
                  "chosen": list(chosen), "rows": table.num_rows,
                  "same": table.schema.equals(schema, check_metadata=True),
                  "days": [d.isoformat() for d in days]}))
"""


def test_the_parquet_plan_never_imports_pandas() -> None:
    # pyarrow's Schema.empty_table imports pandas where it is installed (0.3-0.4 CPU s);
    # the test environment has pandas (fastparquet needs it), so the check can fail.
    assert importlib.util.find_spec("pandas") is not None
    env = dict(os.environ, PYTHONPATH=str(ROOT / "functions"))
    out = subprocess.run([sys.executable, "-c", JOB], capture_output=True, text=True,
                         env=env, check=True, timeout=120).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"pandas": False, "types": ["a", "d", "s", "t"], "chosen": ["a", "d"],
                   "rows": 0, "same": True,
                   "days": ["1970-01-01", "2022-01-08"]}
