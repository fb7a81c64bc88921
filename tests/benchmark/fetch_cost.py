"""CPU to fetch what seed-004's query needs: s3slice's fetcher against polars' own reader.

    .venv/bin/python -m tests.benchmark.fetch_cost --repeats 7

The seed-004 query (``col_1, col_2 WHERE col_1 <= 1000``) needs the 20 column chunks of
``col_1`` and ``col_2`` (104 MB of the 518 MB object). In this process, with MinIO
unshaped on loopback (no toxiproxy, no pacer: only the client's work is timed), each way
below runs ``--repeats`` times and its CPU (user + sys of every thread) is reported:

- ``obstore get_ranges``: the chunks as obstore returns them, nothing else (the transport
  alone).
- ``s3slice S3Fetcher -> image``: s3slice's fetcher (threads, 1 MiB chunks) writing them
  into an object-sized in-memory image (``fetch.image.MemoryImage``), as a ranges read
  does.
- ``polars decode, from memory``: polars' scan of the whole object held in ``bytes``,
  the query's columns and filter (the decode and filter alone, no transport).
- ``polars scan_parquet s3://``: polars' own reader, the same query, from S3 (its
  transport, decode and filter).

The last minus the one before is what polars' own transport costs for the same bytes.
Writes ``results/<--out-stem>.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

from .common import (
    ACCESS_KEY,
    BUCKET,
    REGION,
    REPO,
    RESULTS,
    SECRET_KEY,
    WORK,
    cpu_seconds,
    polars_storage_options,
)
from .datasets import ensure_data

COLUMNS = ("col_1", "col_2")


def _needed_ranges(path: str) -> list[tuple[int, int]]:
    import pyarrow.parquet as pq

    md = pq.read_metadata(path)
    names = [md.schema.column(i).path for i in range(md.num_columns)]
    out = []
    for g in range(md.num_row_groups):
        for name in COLUMNS:
            cc = md.row_group(g).column(names.index(name))
            start = cc.dictionary_page_offset or cc.data_page_offset
            out.append((start, start + cc.total_compressed_size))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.benchmark.fetch_cost")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out-stem", default="fetch-cost")
    args = p.parse_args(argv)

    import obstore
    import polars as pl
    from obstore.store import S3Store

    from . import substrate
    from .run import ensure_bucket, upload

    keys = ensure_data("seed-004", 1.0)
    local = str(WORK / "data" / "scale-1" / keys[0])
    ranges = _needed_ranges(local)
    size = os.path.getsize(local)
    with substrate.running() as sub:
        ensure_bucket(sub)
        key = upload(sub, 1.0, "seed-004", keys)[0]
        endpoint = sub.direct_endpoint
        os.environ.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                          AWS_REGION=REGION, AWS_ENDPOINT_URL_S3=endpoint)
        sys.path.insert(0, str(REPO / "functions"))
        from s3slice.core.model import ObjectRef
        from s3slice.core.settings import Settings
        from s3slice.fetch.image import MemoryImage
        from s3slice.fetch.s3 import S3Fetcher

        store = S3Store(BUCKET, endpoint=endpoint, access_key_id=ACCESS_KEY,
                        secret_access_key=SECRET_KEY, region=REGION,
                        client_options={"allow_http": True})
        fetcher = S3Fetcher(Settings.from_env())
        obj = ObjectRef(bucket=BUCKET, key=key, size=size)
        so = polars_storage_options(endpoint)
        with open(local, "rb") as f:
            held = f.read()
        query = pl.col("col_1") <= 1000

        def transport() -> Any:
            return obstore.get_ranges(store, key, starts=[a for a, _ in ranges],
                                      ends=[b for _, b in ranges])

        def s3slice_image() -> Any:
            image = MemoryImage(size)
            try:
                fetcher.get_ranges(obj, ranges, etag=None, sink=image.write, concurrency=8)
            finally:
                image.close()

        def decode() -> Any:
            return pl.scan_parquet(held).select(COLUMNS).filter(query).collect()

        def polars_s3() -> Any:
            return pl.scan_parquet(f"s3://{BUCKET}/{key}", storage_options=so).select(
                COLUMNS).filter(query).collect()

        ways: list[tuple[str, Callable[[], Any]]] = [
            ("obstore get_ranges", transport), ("s3slice S3Fetcher -> image", s3slice_image),
            ("polars decode, from memory", decode), ("polars scan_parquet s3://", polars_s3)]
        cpu: dict[str, list[float]] = {name: [] for name, _ in ways}
        for _ in range(args.repeats):  # interleaved, so drift on the machine hits all alike
            for name, way in ways:
                c = cpu_seconds()
                way()
                cpu[name].append(cpu_seconds() - c)
    med = {name: statistics.median(v) for name, v in cpu.items()}
    lines = [
        "# CPU to fetch seed-004's needed column chunks", "",
        f"Written by `python -m tests.benchmark.fetch_cost {' '.join(sys.argv[1:])}` (see its "
        f"docstring): {len(ranges)} ranges, {sum(b - a for a, b in ranges):,} bytes of "
        f"{size:,}; MinIO unshaped on loopback; {args.repeats} repeats each, interleaved; "
        "CPU = user + sys of every thread of the process.", "",
        "| way | median CPU s | runs |", "|---|---:|---|"]
    for name, values in cpu.items():
        lines.append(f"| {name} | {med[name]:.3f} | {', '.join(f'{v:.3f}' for v in values)} |")
    lines += ["", "polars' own transport (its S3 read minus its decode from memory): "
              f"{med['polars scan_parquet s3://'] - med['polars decode, from memory']:.3f} s; "
              "s3slice's fetch into the image: "
              f"{med['s3slice S3Fetcher -> image']:.3f} s, of which obstore's transport "
              f"{med['obstore get_ranges']:.3f} s."]
    path = RESULTS / f"{args.out_stem}.md"
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"[report] {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
