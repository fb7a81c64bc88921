"""Writes Iceberg tables with real Spark (run by tests/spark/spark_iceberg.py in Spark's own venv:
this file imports pyspark and the standard library only).

    python spark_iceberg_writer.py ROOT BUCKET

The tables' metadata holds ``s3://BUCKET/wh/...`` paths: Hadoop's ViewFileSystemOverloadScheme
serves the ``s3`` scheme from ROOT/BUCKET on the local disk (no S3 client in the JVM), and
the tree is uploaded to the test's S3 server as it is. Each table is a list of Spark SQL
statements; ROOT/tables.json lists every table with its snapshots, in commit order.
"""

from __future__ import annotations

import json
import os
import sys
import time

CATALOG = "c"

# name -> statements (``$T`` is the table's full name)
TABLES: dict[str, list[str]] = {}

PRIMITIVES = """(id BIGINT, i INT, f FLOAT, d DOUBLE, dec DECIMAL(10,2), big DECIMAL(38,10),
  s STRING, b BINARY, flag BOOLEAN, day DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ)"""


def rows(n: int, start: int = 0, step: int = 3917000017) -> str:
    """n rows of PRIMITIVES' columns, nulls sprinkled, as a SELECT over range(); ``ts`` and
    ``ntz`` are ``step`` microseconds apart (about an hour by default)."""
    return f"""SELECT id,
      CASE WHEN id % 7 = 0 THEN NULL ELSE CAST(id % 1000 - 500 AS INT) END AS i,
      CASE WHEN id % 11 = 0 THEN NULL ELSE CAST(id * 0.25 AS FLOAT) END AS f,
      CASE WHEN id % 13 = 0 THEN NULL ELSE id / 3.0D END AS d,
      CAST((id % 2000) / 100.0 - 10 AS DECIMAL(10,2)) AS dec,
      CASE WHEN id % 5 = 0 THEN NULL ELSE CAST(id * 12345.0123456789 AS DECIMAL(38,10)) END AS big,
      CASE WHEN id % 9 = 0 THEN NULL ELSE concat('s', CAST(id % 37 AS STRING)) END AS s,
      CASE WHEN id % 4 = 0 THEN NULL ELSE CAST(concat('b', CAST(id % 5 AS STRING)) AS BINARY) END AS b,
      CASE WHEN id % 6 = 0 THEN NULL ELSE id % 3 = 0 END AS flag,
      CASE WHEN id % 17 = 0 THEN NULL ELSE date_add(DATE '2023-11-20', CAST(id % 500 AS INT)) END AS day,
      CASE WHEN id % 19 = 0 THEN NULL
           ELSE timestamp_micros(1700000000000000 + id * {step}) END AS ts,
      CASE WHEN id % 23 = 0 THEN NULL
           ELSE CAST(timestamp_micros(1690000000000000 + id * {step * 13 // 10}) AS TIMESTAMP_NTZ) END AS ntz
    FROM range({start}, {start + n})"""


def table(name: str, partition: str = "", props: str = "'format-version'='2'",
          n: int = 1000, extra: list[str] | None = None, step: int = 3917000017) -> None:
    by = f" PARTITIONED BY ({partition})" if partition else ""
    TABLES[name] = [f"CREATE TABLE $T {PRIMITIVES} USING iceberg{by} TBLPROPERTIES ({props})",
                    f"INSERT INTO $T {rows(n // 2, 0, step)}",
                    f"INSERT INTO $T {rows(n - n // 2, n // 2, step)}",
                    *(extra or [])]


table("v1_plain", props="'format-version'='1'")
table("v2_plain")
table("v1_identity", "s", props="'format-version'='1'")
table("v2_identity_multi", "flag, s")
table("bucket_id", "bucket(8, id)")
table("bucket_string_date", "bucket(4, s), bucket(3, day)")
table("truncate_string_int", "truncate(2, s), truncate(100, i)")
table("truncate_decimal", "truncate(500, dec)")
table("ts_years", "years(ts)")
table("ts_months", "months(ts)")
table("ts_days", "days(ts)")
table("ts_hours", "hours(ts)", step=97_000_003)  # about 27 hours in all
table("ntz_hours", "bucket(2, id), hours(ntz)", step=97_000_003)
table("date_months_days", "months(day)")
table("date_years_v1", "years(day)", props="'format-version'='1'")
table("mixed_multi", "s, days(ts), bucket(4, id)")
table("identity_on_date_ts", "day, i")
table("small_groups", "", n=20000, props="""'format-version'='2',
  'write.parquet.row-group-size-bytes'='8192', 'write.parquet.page-size-bytes'='1024',
  'write.parquet.page-row-limit'='100'""")
table("gzip_snappy", "bucket(2, id)", props="""'format-version'='2',
  'write.parquet.compression-codec'='snappy', 'write.metadata.compression-codec'='gzip'""",
      extra=["ALTER TABLE $T SET TBLPROPERTIES ('write.parquet.compression-codec'='gzip')",
             f"INSERT INTO $T {rows(300, 5000)}"])
table("object_storage", "s", props="""'format-version'='2',
  'write.object-storage.enabled'='true'""")
table("uncompressed_dict_off", "", props="""'format-version'='2',
  'write.parquet.compression-codec'='uncompressed', 'write.parquet.dict-size-bytes'='1'""")

# Partition evolution: identity, then days + bucket, a field dropped (v1: a void transform).
for version in (1, 2):
    table(f"partition_evolution_v{version}", "s", props=f"'format-version'='{version}'", extra=[
        "ALTER TABLE $T ADD PARTITION FIELD days(ts)",
        f"INSERT INTO $T {rows(600, 3000)}",
        "ALTER TABLE $T DROP PARTITION FIELD s",
        "ALTER TABLE $T ADD PARTITION FIELD bucket(4, id)",
        f"INSERT INTO $T {rows(600, 4000)}",
        "ALTER TABLE $T REPLACE PARTITION FIELD days(ts) WITH months(ts)",
        f"INSERT INTO $T {rows(300, 5000)}",
    ])

# Schema evolution: promotions, a rename (of a partition source too), a drop, an add.
TABLES["schema_evolution"] = [
    """CREATE TABLE $T (id BIGINT, n INT, x FLOAT, amount DECIMAL(9,2), cat STRING, old STRING,
       ts TIMESTAMP) USING iceberg PARTITIONED BY (cat) TBLPROPERTIES ('format-version'='2')""",
    """INSERT INTO $T SELECT id, CAST(id % 300 AS INT), CAST(id / 8.0 AS FLOAT),
       CAST(id / 4.0 AS DECIMAL(9,2)), concat('c', CAST(id % 4 AS STRING)), concat('o', id),
       timestamp_micros(1700000000000000 + id * 60000000) FROM range(0, 800)""",
    "ALTER TABLE $T ALTER COLUMN n TYPE BIGINT",
    "ALTER TABLE $T ALTER COLUMN x TYPE DOUBLE",
    "ALTER TABLE $T ALTER COLUMN amount TYPE DECIMAL(18,2)",
    "ALTER TABLE $T RENAME COLUMN cat TO category",
    "ALTER TABLE $T DROP COLUMN old",
    "ALTER TABLE $T ADD COLUMN note STRING",
    "ALTER TABLE $T ADD COLUMN extra INT AFTER id",
    """INSERT INTO $T SELECT id, CAST(id % 5 AS INT), id * 1000000000, id / 8.0D,
       CAST(id * 1000.25 AS DECIMAL(18,2)), concat('c', CAST(id % 4 AS STRING)),
       timestamp_micros(1700000000000000 + id * 60000000),
       CASE WHEN id % 3 = 0 THEN NULL ELSE concat('note', id % 3) END FROM range(800, 1400)""",
    "ALTER TABLE $T RENAME COLUMN n TO count_n",
    "ALTER TABLE $T ADD COLUMN old STRING",  # a new column reusing a dropped one's name
]

# Row-level changes: merge-on-read (position deletes) and copy-on-write.
for mode in ("merge-on-read", "copy-on-write"):
    short = "mor" if mode == "merge-on-read" else "cow"
    props = (f"'format-version'='2', 'write.delete.mode'='{mode}', "
             f"'write.update.mode'='{mode}', 'write.merge.mode'='{mode}'")
    table(f"{short}_delete", "bucket(4, id)", props=props, extra=[
        "DELETE FROM $T WHERE id % 10 = 3", "DELETE FROM $T WHERE s = 's5'"])
    table(f"{short}_update", "s", props=props, extra=[
        "UPDATE $T SET d = -1.5, s = 's36' WHERE id % 9 = 1",
        "UPDATE $T SET dec = dec + 1 WHERE flag"])
    table(f"{short}_merge", "days(ts)", props=props, n=1200, extra=[
        f"""MERGE INTO $T t USING ({rows(400, 1000)}) u ON t.id = u.id
            WHEN MATCHED AND u.id % 2 = 0 THEN DELETE
            WHEN MATCHED THEN UPDATE SET t.s = 'merged', t.i = -u.i
            WHEN NOT MATCHED THEN INSERT *"""])
    table(f"{short}_unpartitioned_delete", "", props=props, extra=[
        "DELETE FROM $T WHERE id BETWEEN 100 AND 400 OR i IS NULL",
        f"INSERT INTO $T {rows(200, 9000)}", "DELETE FROM $T WHERE id > 9150"])
table("mor_delete_v1_to_v2", "bucket(2, id)", props="'format-version'='1'", extra=[
    "ALTER TABLE $T SET TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read')",
    "DELETE FROM $T WHERE id % 4 = 0"])
table("overwrite_partitions", "s", extra=[
    f"INSERT OVERWRITE $T {rows(200, 7000)}",  # dynamic: replaces the partitions written
])
table("everything_deleted", "", props="'format-version'='2', 'write.delete.mode'='merge-on-read'",
      n=200, extra=["DELETE FROM $T WHERE id >= 0"])
table("compacted", "bucket(2, id)", extra=[
    f"INSERT INTO $T {rows(300, 6000)}",
    "CALL c.system.rewrite_data_files(table => 'db.compacted', options => map('min-input-files','2'))"])

TABLES["nested"] = [
    """CREATE TABLE $T (id BIGINT, st STRUCT<a: INT, b: STRUCT<c: STRING, d: DOUBLE>>,
       arr ARRAY<INT>, m MAP<STRING, BIGINT>, arr_st ARRAY<STRUCT<k: STRING, v: INT>>,
       m_arr MAP<STRING, ARRAY<STRING>>, cat STRING)
       USING iceberg PARTITIONED BY (cat) TBLPROPERTIES ('format-version'='2')""",
    """INSERT INTO $T SELECT id,
       CASE WHEN id % 5 = 0 THEN NULL ELSE named_struct('a', CAST(id AS INT), 'b',
         CASE WHEN id % 3 = 0 THEN NULL ELSE named_struct('c', concat('c', id % 4), 'd', id / 2.0D) END)
       END,
       CASE WHEN id % 7 = 0 THEN NULL WHEN id % 7 = 1 THEN array()
            ELSE array(CAST(id AS INT), NULL, CAST(id * 2 AS INT)) END,
       CASE WHEN id % 4 = 0 THEN NULL ELSE map('k', id, concat('k', id % 3), id * 10) END,
       array(named_struct('k', 'x', 'v', CAST(id AS INT)), named_struct('k', NULL, 'v', NULL)),
       CASE WHEN id % 6 = 0 THEN NULL ELSE map('a', array('p', NULL)) END,
       concat('g', CAST(id % 3 AS STRING))
       FROM range(0, 900)""",
    "ALTER TABLE $T ADD COLUMN st.e STRING",
    "ALTER TABLE $T RENAME COLUMN st.a TO a2",
    """INSERT INTO $T SELECT id, named_struct('a2', 1, 'b', named_struct('c', 'z', 'd', 0.5D),
       'e', concat('e', id)), array(1), map('q', id), array(), map(), 'g9' FROM range(900, 1000)""",
]

TABLES["odd_names"] = [
    """CREATE TABLE $T (`id` BIGINT, `Upper Case` STRING, `dash-col` INT, `dot.col` DOUBLE,
       `ünï` STRING) USING iceberg PARTITIONED BY (`dash-col`) TBLPROPERTIES ('format-version'='2')""",
    """INSERT INTO $T SELECT id, concat('U', id % 5), CAST(id % 3 AS INT), id * 1.5D,
       CASE WHEN id % 2 = 0 THEN NULL ELSE 'ü' END FROM range(0, 300)""",
]

TABLES["empty"] = [
    f"CREATE TABLE $T {PRIMITIVES} USING iceberg PARTITIONED BY (days(ts)) "
    "TBLPROPERTIES ('format-version'='2')"]

# Several snapshots, each read by id (time travel).
TABLES["snapshots"] = [
    "CREATE TABLE $T (id BIGINT, v STRING) USING iceberg TBLPROPERTIES ('format-version'='2', "
    "'write.delete.mode'='merge-on-read')",
    "INSERT INTO $T SELECT id, concat('a', id) FROM range(0, 100)",
    "INSERT INTO $T SELECT id, concat('b', id) FROM range(100, 250)",
    "DELETE FROM $T WHERE id % 3 = 0",
    "ALTER TABLE $T ADD COLUMN w INT",
    "INSERT INTO $T SELECT id, concat('c', id), CAST(id AS INT) FROM range(250, 300)",
]


def chosen() -> dict[str, list[str]]:
    """The tables to write: those S3SLICE_SPARK_TABLES names (comma-separated), else all."""
    names = [n for n in os.environ.get("S3SLICE_SPARK_TABLES", "").split(",") if n]
    unknown = sorted(set(names) - set(TABLES))
    if unknown:
        raise SystemExit(f"S3SLICE_SPARK_TABLES names no table {unknown}; known: {list(TABLES)}")
    return {name: TABLES[name] for name in names} if names else TABLES


def main(root: str, bucket: str) -> None:
    from pyspark.sql import SparkSession

    start = time.monotonic()
    jar = os.environ["ICEBERG_SPARK_RUNTIME"]
    base = f"s3://{bucket}/wh"
    spark = (SparkSession.builder.master("local[1]").appName("iceberg-tables")
             .config("spark.jars", jar)
             .config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "2g")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
             .config("spark.sql.extensions",
                     "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
             .config(f"spark.sql.catalog.{CATALOG}", "org.apache.iceberg.spark.SparkCatalog")
             .config(f"spark.sql.catalog.{CATALOG}.type", "hadoop")
             .config(f"spark.sql.catalog.{CATALOG}.warehouse", base)
             # s3://BUCKET/... is ROOT/BUCKET/... on the local disk
             .config("spark.hadoop.fs.s3.impl",
                     "org.apache.hadoop.fs.viewfs.ViewFileSystemOverloadScheme")
             .config("spark.hadoop.fs.viewfs.overload.scheme.target.file.impl",
                     "org.apache.hadoop.fs.LocalFileSystem")
             .config(f"spark.hadoop.fs.viewfs.mounttable.{bucket}.linkFallback",
                     f"file://{os.path.abspath(root)}/{bucket}")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    print(f"Spark started in {time.monotonic() - start:.0f} s", flush=True)
    listing = []
    for name, statements in chosen().items():
        full = f"{CATALOG}.db.{name}"
        for sql in statements:
            spark.sql(sql.replace("$T", full))
        snaps = [r["snapshot_id"] for r in spark.sql(
            f"SELECT snapshot_id FROM {full}.snapshots ORDER BY committed_at").collect()]
        listing.append({"name": name, "location": f"{base}/db/{name}", "snapshots": snaps})
        print(f"wrote {name} at {time.monotonic() - start:.0f} s", flush=True)
    spark.stop()
    with open(os.path.join(root, "tables.json"), "w") as out:
        json.dump(listing, out, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
