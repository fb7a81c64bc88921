"""``s3slice demo``: the service's whole path against an embedded S3 on 127.0.0.1."""

from __future__ import annotations

import io
import os
import time

import polars as pl

from s3slice._local_s3 import LOCAL_CREDENTIALS, LocalS3

BUCKET = "s3slice-demo"
KEY = "sales/2024/orders.parquet"
REGIONS = ["north", "south", "east", "west", "central"]


def sample_table(rows: int, *, seed: int = 4) -> pl.DataFrame:
    """Ten integer columns of 1..1,000,000 and one low-cardinality string column.

    Values come from hashing the row number, so the table is the same on every machine.
    """
    idx = pl.int_range(0, rows, dtype=pl.UInt64)
    columns = [((idx.hash(seed + i) % 1_000_000) + 1).cast(pl.Int64).alias(f"col_{i}")
               for i in range(10)]
    region = pl.lit(pl.Series(REGIONS)).get((idx.hash(seed + 99) % len(REGIONS)).cast(pl.Int64))
    return pl.select(*columns, region.alias("region"))


def demo(*, rows: int = 2_000_000, row_groups: int = 8) -> int:
    import boto3

    from s3slice._invoke import LambdaContext, invoke, print_json

    for name, value in LOCAL_CREDENTIALS.items():
        os.environ.setdefault(name, value)
    with LocalS3() as s3:
        os.environ["AWS_ENDPOINT_URL_S3"] = s3.endpoint_url
        print(f"embedded S3 (moto server) listening on {s3.endpoint_url}")
        client = boto3.client("s3", endpoint_url=s3.endpoint_url,
                              region_name=LOCAL_CREDENTIALS["AWS_REGION"])
        client.create_bucket(Bucket=BUCKET)

        table = sample_table(rows)
        buf = io.BytesIO()
        table.write_parquet(buf, compression="snappy",
                            row_group_size=max(1, -(-rows // row_groups)))
        data = buf.getvalue()
        client.put_object(Bucket=BUCKET, Key=KEY, Body=data)
        print(f"uploaded s3://{BUCKET}/{KEY}: {rows:,} rows, {row_groups} row groups, "
              f"{len(data) / 1e6:.1f} MB")

        request = {
            "source": f"s3://{BUCKET}/{KEY}",
            "sql": "SELECT col_1, col_2, region FROM s3object "
                   "WHERE col_1 <= 1000 AND region = 'north'",
            "output": {"uri": f"s3://{BUCKET}/results/", "format": "parquet"},
        }
        print(f"\nrequest:  {request}\n")
        started = time.perf_counter()
        response = invoke(request, LambdaContext())
        elapsed = time.perf_counter() - started
        print("response:")
        print_json(response)

        stats = response["stats"]
        share = stats["bytes_fetched"] / stats["object_bytes"]
        print(f"\nstrategy {stats['strategy']}: fetched {stats['bytes_fetched']:,} of "
              f"{stats['object_bytes']:,} bytes ({share:.1%})"
              f" in {stats['requests']} requests; read {stats['row_groups_read']} of "
              f"{stats['row_groups']} row groups; {stats['rows_out']:,} rows out; "
              f"{elapsed * 1000:.0f} ms")
        out = response["outputs"][0]
        bucket, _, key = out["uri"][5:].partition("/")
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        result = pl.read_parquet(io.BytesIO(body))
        print(f"\nresult read back from {out['uri']} ({len(body):,} bytes):")
        print(result.head(8))

        expected = table.filter((pl.col("col_1") <= 1000) & (pl.col("region") == "north")) \
            .select("col_1", "col_2", "region")
        same = result.sort(result.columns).equals(expected.sort(expected.columns))
        print(f"\nresult equals a local polars read of the same table: {same}")
        return 0 if same else 1
