"""Planning an Iceberg table of N data files (written by pyiceberg in two appends, one
partition per file): the function's PlanTable step and a pruned direct read, against
pyiceberg's own planning; MinIO unshaped on 127.0.0.1:9000 (../shared/bench/substrate.sh).

    .venv/bin/python -m tests.benchmark.iceberg_scale 2000
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import types
from typing import Any

ENDPOINT = "http://127.0.0.1:9000"
BUCKET = "ice-scale"
KEYS = {"AWS_ACCESS_KEY_ID": "minioadmin", "AWS_SECRET_ACCESS_KEY": "minioadmin",
        "AWS_DEFAULT_REGION": "us-east-1"}


def table(n: int) -> Any:
    """A table of ``n`` data files, one per identity partition of ``p``, in two appends."""
    import boto3
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DoubleType, LongType, NestedField

    s3 = boto3.client("s3", endpoint_url=ENDPOINT, region_name="us-east-1")
    if BUCKET not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket=BUCKET)
    props = {"s3.endpoint": ENDPOINT, "s3.access-key-id": KEYS["AWS_ACCESS_KEY_ID"],
             "s3.secret-access-key": KEYS["AWS_SECRET_ACCESS_KEY"], "s3.region": "us-east-1"}
    catalog = SqlCatalog("bench", uri=f"sqlite:///{tempfile.mkdtemp()}/c.db",
                         warehouse=f"s3://{BUCKET}/wh{n}_{int(time.time())}", **props)
    catalog.create_namespace_if_not_exists("db")
    schema = Schema(NestedField(1, "p", LongType(), required=False),
                    NestedField(2, "v", DoubleType(), required=False))
    spec = PartitionSpec(PartitionField(source_id=1, field_id=1000,
                                        transform=IdentityTransform(), name="p"))
    t = catalog.create_table(f"db.t{n}", schema=schema, partition_spec=spec)
    for low, high in ((0, n // 2), (n // 2, n)):
        ps = [p for p in range(low, high) for _ in range(3)]
        t.append(pa.table({"p": pa.array(ps, pa.int64()), "v": pa.array([p * 1.5 for p in ps])}))
    return catalog.load_table(f"db.t{n}")


def main(n: int) -> None:
    os.environ.update(KEYS, AWS_ENDPOINT_URL=ENDPOINT, AWS_ENDPOINT_URL_S3=ENDPOINT,
                      POWERTOOLS_METRICS_DISABLED="true", POWERTOOLS_LOG_LEVEL="WARNING",
                      AWS_LAMBDA_FUNCTION_MEMORY_SIZE="1024")
    started = time.perf_counter()
    t = table(n)
    print(f"wrote {n} data files in {time.perf_counter() - started:.1f} s; "
          f"metadata {t.metadata_location}")
    for label, row_filter in (("all", None), ("p = 17", "p == 17")):
        started = time.perf_counter()
        scan = t.scan(row_filter=row_filter) if row_filter else t.scan()
        files = list(scan.plan_files())
        print(f"pyiceberg plan_files {label}: {len(files)} files, "
              f"{time.perf_counter() - started:.3f} s")

    from s3slice.handler import lambda_handler

    ctx = types.SimpleNamespace(
        function_name="s3slice", memory_limit_in_mb=1024, aws_request_id="r",
        invoked_function_arn="arn:aws:lambda:us-east-1:000000000000:function:s3slice",
        get_remaining_time_in_millis=lambda: 900000)
    source = {"iceberg": t.metadata_location}
    for label, where in (("all", ""), ("p = 17", " WHERE p = 17")):
        sql = f"SELECT p, SUM(v) AS s FROM s3object{where} GROUP BY p"
        for attempt in range(2):
            started, cpu = time.perf_counter(), time.process_time()
            answer = lambda_handler({"PlanTable": {
                "source": source, "query": {"sql": sql},
                "output": {"uri": f"s3://{BUCKET}/out/"},
                "run": f"r{n}-{attempt}-{label.replace(' ', '')}"}}, ctx)
            print(f"PlanTable {label} (run {attempt}): {answer['items']['count']} items, "
                  f"{time.perf_counter() - started:.3f} s wall, "
                  f"{time.process_time() - cpu:.3f} CPU s; "
                  f"{json.dumps(answer['stats'].get('iceberg', answer['stats']))}")
    started = time.perf_counter()
    answer = lambda_handler({"source": source, "return_rows": True,
                             "sql": "SELECT p, SUM(v) AS s FROM s3object WHERE p = 17 GROUP BY p"},
                            ctx)
    print(f"direct read p = 17: {time.perf_counter() - started:.3f} s, rows {answer.get('rows')}, "
          f"data files read {answer['stats'].get('objects')}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
