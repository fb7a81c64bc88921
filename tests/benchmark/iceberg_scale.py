"""Planning an Iceberg table of N data files (written by pyiceberg in two appends, one
partition per file): the function's PlanTable step and a pruned direct read, against
pyiceberg's own planning; MinIO unshaped on 127.0.0.1:9000 (../shared/bench/substrate.sh).

    .venv/bin/python -m tests.benchmark.iceberg_scale 2000
"""
import os, sys, time, types, json, tempfile
N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
EP = "http://127.0.0.1:9000"
os.environ.update(AWS_ACCESS_KEY_ID="minioadmin", AWS_SECRET_ACCESS_KEY="minioadmin", AWS_DEFAULT_REGION="us-east-1",
                  AWS_ENDPOINT_URL=EP, AWS_ENDPOINT_URL_S3=EP, POWERTOOLS_METRICS_DISABLED="true", POWERTOOLS_LOG_LEVEL="WARNING",
                  AWS_LAMBDA_FUNCTION_MEMORY_SIZE="1024")
import boto3, pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionSpec, PartitionField
from pyiceberg.transforms import IdentityTransform
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField, LongType, DoubleType
s3 = boto3.client("s3", endpoint_url=EP, region_name="us-east-1")
bucket = "ice-scale"
try: s3.create_bucket(Bucket=bucket)
except Exception: pass
props = {"s3.endpoint": EP, "s3.access-key-id": "minioadmin", "s3.secret-access-key": "minioadmin", "s3.region": "us-east-1"}
cat = SqlCatalog("bench", uri=f"sqlite:///{tempfile.mkdtemp()}/c.db", warehouse=f"s3://{bucket}/wh{N}_{int(time.time())}", **props)
cat.create_namespace_if_not_exists("db")
schema = Schema(NestedField(1, "p", LongType(), required=False), NestedField(2, "v", DoubleType(), required=False))
spec = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(), name="p"))
t = cat.create_table(f"db.t{N}", schema=schema, partition_spec=spec)
t0 = time.perf_counter()
half = N // 2
for lo, hi in ((0, half), (half, N)):
    rows = [(p, float(p) * 1.5) for p in range(lo, hi) for _ in range(3)]
    t.append(pa.table({"p": pa.array([r[0] for r in rows], pa.int64()), "v": pa.array([r[1] for r in rows])}))
t = cat.load_table(f"db.t{N}")
print(f"wrote {N} data files in {time.perf_counter() - t0:.1f} s; metadata {t.metadata_location}")
c = time.perf_counter(); files = list(t.scan().plan_files()); print(f"pyiceberg plan_files: {len(files)} files, {time.perf_counter() - c:.3f} s")
c = time.perf_counter(); n = len(list(t.scan(row_filter="p == 17").plan_files())); print(f"pyiceberg plan_files p = 17: {n} files, {time.perf_counter() - c:.3f} s")
from s3slice.handler import lambda_handler
ctx = types.SimpleNamespace(function_name="s3slice", memory_limit_in_mb=1024, aws_request_id="r", invoked_function_arn="arn:aws:lambda:us-east-1:000000000000:function:s3slice", get_remaining_time_in_millis=lambda: 900000)
for label, sql in (("all", "SELECT p, SUM(v) AS s FROM s3object GROUP BY p"), ("p = 17", "SELECT p, SUM(v) AS s FROM s3object WHERE p = 17 GROUP BY p")):
    for run in range(2):
        c = time.perf_counter(); cpu = time.process_time()
        r = lambda_handler({"PlanTable": {"source": {"iceberg": t.metadata_location}, "query": {"sql": sql}, "output": {"uri": f"s3://{bucket}/out/"}, "run": f"r{N}{run}{label.replace(' ', '')}"}}, ctx)
        print(f"PlanTable {label} (run {run}): {r['items']['count']} items, {time.perf_counter() - c:.3f} s wall, {time.process_time() - cpu:.3f} CPU s; stats {json.dumps(r['stats'].get('iceberg', r['stats']))[:300]}")
c = time.perf_counter()
r = lambda_handler({"source": {"iceberg": t.metadata_location}, "sql": "SELECT p, SUM(v) AS s FROM s3object WHERE p = 17 GROUP BY p", "return_rows": True}, ctx)
print(f"direct read p = 17: {time.perf_counter() - c:.3f} s, rows {r.get('rows')}, data files read {r['stats'].get('objects')}")
