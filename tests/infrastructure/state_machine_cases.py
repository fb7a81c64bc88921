"""What the workflow executions read and run: the objects (``frame``) and their oracle
(polars over every object at once), and the queries (``CASES`` and the others), for
``test_workflow_execution.py``."""

from __future__ import annotations

import dataclasses
import io
import random
from typing import Any

import polars as pl

from tests.infrastructure.state_machine_run import DATA

#: The combining queries' data: 200 objects, batches of 7, 7, ..., 7 and 4.
OBJECTS = 200
#: A smaller prefix for the per-object run: batches of 7, 7 and 6.
FEW = 20
#: The failed-batch run's good objects (and one that is not Parquet): batches of 7 and 2.
BROKEN = 8
#: A Spark output folder: its marker (``spark/``, 0 bytes), its empty ``_SUCCESS`` and this
#: many parts, listed in batches of 7 (the marker, _SUCCESS and 5 parts) and 4.
SPARK_PARTS = 9
#: Floating-point answers are combined batch by batch, in another order than polars sums
#: them: equal within this relative (and, near zero, absolute) tolerance.
REL_TOL = 1e-9
ABS_TOL = 1e-9


# ------------------------------------------------------------------------ the data
def frame(i: int) -> pl.DataFrame:
    """Object ``i``: 12 to 16 rows. ``region`` and ``k`` (group keys) and ``x`` have nulls;
    ``tag`` is ``common`` except in every 37th object, whose own group it is (a group that
    only one batch sees); ``obj`` is ``i``, so a filter on it matches nothing in most
    batches."""
    rng = random.Random(i)
    n = 12 + i % 5

    def sometimes_null(values: list[Any], share: float) -> list[Any]:
        return [None if rng.random() < share else v for v in values]
    regions = sometimes_null([rng.choice(["north", "south", "east", "west"])
                              for _ in range(n)], 0.1)
    k = sometimes_null([rng.randrange(10) for _ in range(n)], 0.1)
    x = sometimes_null([rng.gauss(1000.0, 250.0) for _ in range(n)], 0.05)
    v = [rng.randrange(-1000, 1000) for _ in range(n)]
    return pl.DataFrame({
        "obj": [i] * n,
        "row": list(range(n)),
        "region": regions,
        "k": k,
        "v": v,
        "x": x,
        "tag": [f"only-{i}" if i % 37 == 0 else "common"] * n,
    }, schema={"obj": pl.Int64, "row": pl.Int64, "region": pl.String, "k": pl.Int64,
               "v": pl.Int64, "x": pl.Float64, "tag": pl.String})


def put_frames(client: Any, prefix: str, frames: list[pl.DataFrame]) -> None:
    for i, f in enumerate(frames):
        buffer = io.BytesIO()
        f.write_parquet(buffer)
        client.put_object(Bucket=DATA, Key=f"{prefix}part-{i:03}.parquet",
                          Body=buffer.getvalue())


def oracle(frames: list[pl.DataFrame], sql: str) -> pl.DataFrame:
    """The same SQL, run by polars over every object at once."""
    return pl.SQLContext(s3object=pl.concat(frames)).execute(sql, eager=True)


# ------------------------------------------------------------------------ the queries
@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    sql: str
    #: The query leaves the answer's order open (compared regardless of row order); else
    #: compared row by row.
    unordered: bool = True


#: Matches rows of objects 7, 57, 107, 157 and 190-199 only: 23 of the 29 batches match
#: nothing (their partials are empty).
FEW_OBJECTS = "obj % 50 = 7 OR obj >= 190"

CASES = [  # every construct of the split, each answer over 29 batches
    # every aggregate, and expressions over them, over mostly empty batches
    Case("aggregates",
         "SELECT COUNT(*) AS n, COUNT(x) AS nx, SUM(v) AS s, MIN(x) AS lo, MAX(x) AS hi, "
         "AVG(x) AS mean, COUNT(DISTINCT k) AS kinds, STDDEV(x) AS sd, VARIANCE(x) AS var, "
         "MIN(region) AS first_region, MAX(x) - MIN(x) AS spread, "
         f"SUM(v) * 1.0 / COUNT(*) AS per_row FROM s3object WHERE {FEW_OBJECTS}"),
    # GROUP BY with every aggregate over every batch: null group keys, groups that only
    # one batch sees (tag), HAVING and expressions over aggregates (final plan only)
    Case("grouped",
         "SELECT tag, region, COUNT(*) AS n, SUM(v) AS s, MIN(x) AS lo, MAX(x) AS hi, "
         "AVG(x) AS mean, COUNT(DISTINCT k) AS kinds, STDDEV(x) AS sd, VAR(x) AS var, "
         "MIN(obj) AS first, MAX(obj) AS last, MAX(x) - MIN(x) AS spread, "
         "SUM(v) + 2 * COUNT(DISTINCT k) AS mixed FROM s3object GROUP BY tag, region "
         "HAVING COUNT(*) > 2"),
    # ORDER BY ... LIMIT k: top k per batch, merged; of rows, then of groups (over mostly
    # empty batches)
    Case("top-rows",
         "SELECT obj, row, x, v FROM s3object WHERE x IS NOT NULL "
         "ORDER BY x DESC, obj, row LIMIT 10", unordered=False),
    Case("top-groups",
         "SELECT k, SUM(v) AS s, COUNT(*) AS n, AVG(x) AS mean, STDDEV(x) AS sd "
         f"FROM s3object WHERE {FEW_OBJECTS} GROUP BY k ORDER BY s DESC, k LIMIT 4",
         unordered=False),
    Case("distinct", "SELECT DISTINCT region, k FROM s3object"),
]
SQL = {case.name: case.sql for case in CASES}
#: LIMIT without ORDER BY: any that many rows of the data are a right answer.
LIMIT_SQL = "SELECT obj, row, v, region FROM s3object WHERE v > 0 LIMIT 25"
#: No exact split: refused by the check step.
MEDIAN_SQL = "SELECT region, MEDIAN(x) AS m FROM s3object GROUP BY region"
#: Combines nothing: one output per object.
PER_OBJECT_SQL = "SELECT region, v FROM s3object WHERE v < 0"
#: Combines objects, over a prefix with an object that is not Parquet.
BROKEN_SQL = ("SELECT region, COUNT(*) AS n, SUM(v) AS s, MAX(x) AS hi FROM s3object "
              "GROUP BY region")
#: Combines objects, over a Spark output folder (a folder marker and an empty _SUCCESS).
SPARK_SQL = ("SELECT region, COUNT(*) AS n, SUM(v) AS s, MIN(x) AS lo FROM s3object "
             "GROUP BY region")
