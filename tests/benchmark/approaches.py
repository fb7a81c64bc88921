"""The approaches: each turns a :class:`Target` into a warm ``run() -> polars.DataFrame``.

``setup`` does what a warm Lambda keeps between invocations (clients, connections,
settings) and is not timed; ``run`` is the measured query. Each module is imported inside
its approach so a worker process loads only what its approach needs (that is what its
peak RSS then shows).

Multi-object queries: polars, pyarrow datasets, DuckDB and the service take the prefix
(or a glob) themselves; fsspec and the boto3 approaches have no multi-object read, so a
pool of ``POOL`` threads drives them over the listed keys, as a user would write it.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import io
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .cases import Query
from .common import ACCESS_KEY, REGION, SECRET_KEY, polars_storage_options

# Imported from here by the workers and the oracle too.
from .translate import (
    arrow_filter,
    combine,
    needed_columns,
    per_object_query,
    polars_query,
    read_buffer,
    sql_query,
)

if TYPE_CHECKING:
    import polars as pl

POOL = 8


@dataclass
class Target:
    endpoint: str  # http://127.0.0.1:PORT (the proxy)
    bucket: str
    keys: list[str]
    many: bool  # query the prefix, not one key
    prefix: str
    format: str  # "parquet" | "csv"
    query: Query
    service_query: dict[str, Any]
    info: list[dict[str, Any]] = field(default_factory=list)  # per-run notes (client's word)

    @property
    def host_port(self) -> str:
        return self.endpoint.removeprefix("http://")

    @property
    def url(self) -> str:
        """s3:// URL of the one object, or of the prefix."""
        return f"s3://{self.bucket}/{self.prefix if self.many else self.keys[0]}"


Run = Callable[[], "pl.DataFrame"]
Setup = Callable[[Target], Run]


# --------------------------------------------------------------------------- approaches


def service(strategy: str) -> Setup:
    def setup(t: Target) -> Run:
        import s3slice

        settings = s3slice.Settings.from_env(endpoint_url=t.endpoint, strategy=strategy)
        request = s3slice.parse_request({"source": t.url, **t.service_query})
        # One engine, and so one S3 client, for every run: a warm function keeps its
        # engine, as the peers here keep their file systems, connections and stores.
        engine = s3slice.Engine(settings)

        def run() -> pl.DataFrame:
            s3slice.FOOTER_CACHE.clear()  # a new object each time, as for the peers' caches
            result = engine.read(request)
            stats = result.stats
            t.info.append({"service_stats": _jsonable(
                stats.to_dict() if hasattr(stats, "to_dict") else stats)})
            frame: pl.DataFrame = result.frame
            return frame

        return run

    return setup


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, str | int | float | bool) or obj is None:
        return obj
    return repr(obj)


def polars_scan(t: Target) -> Run:
    import polars as pl

    storage_options = polars_storage_options(t.endpoint)
    source = f"s3://{t.bucket}/{t.prefix}*.{t.format}" if t.many else t.url

    def run() -> pl.DataFrame:
        if t.format == "csv":
            lf = pl.scan_csv(source, storage_options=storage_options)
        else:
            lf = pl.scan_parquet(source, storage_options=storage_options)
        return polars_query(lf, t.query).collect()

    return run


def pyarrow_dataset(t: Target) -> Run:
    import polars as pl
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    fs = pafs.S3FileSystem(
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        region=REGION,
        endpoint_override=t.host_port,
        scheme="http",
    )
    q = t.query
    path = f"{t.bucket}/{t.prefix if t.many else t.keys[0]}"
    flt = arrow_filter(q.where) if q.where else None

    def run() -> pl.DataFrame:
        if q.share_nonzero:
            g, v = q.share_nonzero
            dataset = ds.dataset(path, filesystem=fs, format=t.format)
            table = dataset.to_table(
                columns={
                    g: pc.field(g).cast(pa.string()),
                    "nz": (pc.field(v) != 0).cast(pa.float64()),
                },
                filter=flt,
            )
            agg = table.group_by(g).aggregate([("nz", "mean")])
            return pl.from_arrow(agg.select([g, "nz_mean"]).rename_columns([g, "share"]))  # type: ignore[return-value]
        if t.format == "parquet" and not t.many:
            table = pq.read_table(path, columns=q.columns, filters=flt, filesystem=fs)
        else:
            table = ds.dataset(path, filesystem=fs, format=t.format).to_table(
                columns=q.columns, filter=flt
            )
        return pl.from_arrow(table)  # type: ignore[return-value]

    return run


def duckdb_httpfs(t: Target) -> Run:
    import duckdb

    # DuckDB cannot download extensions here; the PyPI package duckdb-extension-httpfs
    # ships the binary for one DuckDB version, loaded by path (no ~/.duckdb install).
    ext = (
        importlib.resources.files("duckdb_extension_httpfs")
        / "extensions"
        / f"v{duckdb.__version__}"
        / "httpfs.duckdb_extension"
    )
    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    con.execute("SET enable_progress_bar = false")  # a local setting, not a config one
    con.execute(f"LOAD '{ext}'")
    con.execute(
        f"""CREATE SECRET bench (TYPE s3, KEY_ID '{ACCESS_KEY}', SECRET '{SECRET_KEY}',
        REGION '{REGION}', ENDPOINT '{t.host_port}', URL_STYLE 'path', USE_SSL false)"""
    )
    # Each run must fetch what it reads: a warm Lambda normally reads a *new* object, so
    # DuckDB's in-memory cache of remote file blocks (on by default since 1.3) is turned
    # off; the per-run request counts show whether anything else is cached.
    for setting in ("enable_external_file_cache", "enable_http_metadata_cache"):
        with contextlib.suppress(duckdb.Error):  # older DuckDB: no such setting
            con.execute(f"SET {setting} = false")
    reader = "read_csv" if t.format == "csv" else "read_parquet"
    source = f"s3://{t.bucket}/{t.prefix}*.{t.format}" if t.many else t.url
    sql = sql_query(f"{reader}('{source}')", t.query)

    def run() -> pl.DataFrame:
        return con.sql(sql).pl()

    return run


def fsspec_parquet(t: Target) -> Run:
    import fsspec.parquet
    import polars as pl
    import s3fs

    fs = s3fs.S3FileSystem(
        key=ACCESS_KEY,
        secret=SECRET_KEY,
        endpoint_url=t.endpoint,
        client_kwargs={"region_name": REGION},
        use_listings_cache=False,
    )
    q = per_object_query(t.query)
    cols = needed_columns(q)

    def read_one(path: str) -> pl.DataFrame:
        if t.format == "csv":
            with fs.open(path, "rb") as f:
                return polars_query(pl.read_csv(f).lazy(), q).collect()
        with fsspec.parquet.open_parquet_file(path, fs=fs, columns=cols, engine="pyarrow") as f:
            return polars_query(pl.read_parquet(f, columns=cols).lazy(), q).collect()

    def run() -> pl.DataFrame:
        if not t.many:
            return combine([read_one(f"{t.bucket}/{t.keys[0]}")], t.query)
        paths = sorted(fs.find(f"{t.bucket}/{t.prefix}"))
        with ThreadPoolExecutor(POOL) as pool:
            return combine(list(pool.map(read_one, paths)), t.query)

    return run


def _boto3_client(t: Target) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=t.endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=Config(max_pool_connections=32, s3={"addressing_style": "path"}),
    )


def _list_keys(s3: Any, t: Target) -> list[str]:
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=t.bucket, Prefix=t.prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return sorted(keys)


def boto3_download(t: Target) -> Run:
    """s3transfer's managed download (HEAD, then 8 MiB parts on 10 threads) into memory."""
    s3 = _boto3_client(t)
    q = per_object_query(t.query)

    def read_one(key: str) -> pl.DataFrame:
        buf = io.BytesIO()
        s3.download_fileobj(t.bucket, key, buf)
        buf.seek(0)
        return read_buffer(buf, t.format, q)

    def run() -> pl.DataFrame:
        if not t.many:
            return combine([read_one(t.keys[0])], t.query)
        with ThreadPoolExecutor(POOL) as pool:
            return combine(list(pool.map(read_one, _list_keys(s3, t))), t.query)

    return run


def boto3_get_object(t: Target) -> Run:
    """One plain GET per object, its body read into bytes, then polars."""
    s3 = _boto3_client(t)
    q = per_object_query(t.query)

    def read_one(key: str) -> pl.DataFrame:
        data: bytes = s3.get_object(Bucket=t.bucket, Key=key)["Body"].read()
        return read_buffer(data, t.format, q)

    def run() -> pl.DataFrame:
        if not t.many:
            return combine([read_one(t.keys[0])], t.query)
        with ThreadPoolExecutor(POOL) as pool:
            return combine(list(pool.map(read_one, _list_keys(s3, t))), t.query)

    return run


SERVICE_STRATEGIES = ["auto", "ranges", "whole", "batches"]

APPROACHES: dict[str, Setup] = {
    **{f"s3slice[{s}]": service(s) for s in SERVICE_STRATEGIES},
    "polars scan": polars_scan,
    "pyarrow S3FileSystem": pyarrow_dataset,
    "duckdb httpfs": duckdb_httpfs,
    "fsspec open_parquet_file": fsspec_parquet,
    "boto3 download_fileobj": boto3_download,
    "boto3 get_object": boto3_get_object,
}

SERVICE = [name for name in APPROACHES if name.startswith("s3slice")]
PEERS = [name for name in APPROACHES if name not in SERVICE]
