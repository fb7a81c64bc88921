"""``s3slice demo``: the service's whole path against an embedded S3 on 127.0.0.1."""

from __future__ import annotations

import io
import json
import os
import shlex

import polars as pl

from s3slice.cli.local_s3 import LOCAL_CREDENTIALS, LocalS3

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

    from s3slice.cli.invoke import LambdaContext, invoke, print_json

    for name, value in LOCAL_CREDENTIALS.items():
        os.environ.setdefault(name, value)
    with LocalS3() as s3:
        os.environ["AWS_ENDPOINT_URL_S3"] = s3.endpoint_url
        print(f"embedded S3 (moto server) listening on {s3.endpoint_url}")
        client = boto3.client("s3", endpoint_url=s3.endpoint_url,
                              region_name=LOCAL_CREDENTIALS["AWS_REGION"])
        client.create_bucket(Bucket=BUCKET)

        # Written in col_1's order, as data is often clustered on what it is filtered by:
        # each row group's statistics then tell which groups can hold col_1 <= 1000.
        table = sample_table(rows).sort("col_1")
        buf = io.BytesIO()
        table.write_parquet(buf, compression="snappy",
                            row_group_size=max(1, -(-rows // row_groups)))
        data = buf.getvalue()
        client.put_object(Bucket=BUCKET, Key=KEY, Body=data)
        print(f"uploaded s3://{BUCKET}/{KEY}: {rows:,} rows sorted by col_1, {row_groups} "
              f"row groups, {len(data) / 1e6:.1f} MB")

        request = {
            "source": f"s3://{BUCKET}/{KEY}",
            "sql": "SELECT col_1, col_2, region FROM s3object "
                   "WHERE col_1 <= 1000 AND region = 'north'",
            "output": {"uri": f"s3://{BUCKET}/results/", "format": "parquet"},
        }
        payload = json.dumps(request)
        print("\nthe request, as a deployed function takes it:")
        print(f"  aws lambda invoke --function-name <your s3slice function> "
              f"--cli-binary-format raw-in-base64-out \\\n      --payload {shlex.quote(payload)} "
              "response.json\n")
        response = invoke(request, LambdaContext(), verbose=False)
        print("response:")
        print_json(response)

        stats = response["stats"]
        share = stats["bytes_fetched"] / stats["object_bytes"]
        print(f"\nstrategy {stats['strategy']}: fetched {stats['bytes_fetched']:,} of "
              f"{stats['object_bytes']:,} bytes ({share:.1%})"
              f" in {stats['requests']} requests; read {stats['row_groups_read']} of "
              f"{stats['row_groups']} row groups; {stats['rows_out']:,} rows out; "
              f"{stats['timings_ms']['total']:.0f} ms (timings_ms.total)")
        out = response["outputs"][0]
        bucket, _, key = out["uri"][5:].partition("/")
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        result = pl.read_parquet(io.BytesIO(body))
        shown = min(8, result.height)
        print(f"\nresult read back from {out['uri']} ({len(body):,} bytes), first {shown} "
              f"of {result.height:,} rows:")
        print(result.head(shown))

        expected = table.filter((pl.col("col_1") <= 1000) & (pl.col("region") == "north")) \
            .select("col_1", "col_2", "region")
        same = result.sort(result.columns).equals(expected.sort(expected.columns))
        print(f"\nresult equals a local polars read of the same table: {same}")
        return 0 if same else 1
