"""Use every library of a built layer the way the service does, from the layer alone, and
then the service itself on it.

    python -I -S -B layers/smoke_check.py LAYER/python [SECONDS]

Run by ``build.py --check`` and the layer tests in an interpreter that has no
site-packages, no environment and no working directory on its path; the function's code
(``functions/``, Lambda's ``/var/task``) and the layer (``/opt/python``) are put first on
``sys.path`` here (``-I`` ignores PYTHONPATH). The service runs with its local fetcher in
place of S3 (boto3, which the Lambda runtime provides, is not here): every Parquet codec
through each of its three decoders, every output codec, CSV and JSON in every text codec,
in memory and streamed, and SQL in S3 Select's dialect (its date functions, a combining
query over two objects). Fails if any module was loaded from anywhere but the layer, the
function's code or the standard library, and unless the layer's bytecode is what the
build promises: no source beside a ``.pyc``, every ``.pyc`` this interpreter's and
``unchecked-hash``, every module loaded from the layer loaded from bytecode (sourceless,
or from ``__pycache__`` for the few sources kept), and none compiled from source here.
SECONDS (default 600): dump every thread's stack and exit if still running then.
"""

from __future__ import annotations

import asyncio
import faulthandler
import gzip
import importlib.machinery
import importlib.util
import io
import json
import os
import struct
import sys
import sysconfig
import tempfile
from typing import Any

LAYER = os.path.abspath(sys.argv[1])
FUNCTION_CODE = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                              os.pardir, "functions"))
faulthandler.dump_traceback_later(float(sys.argv[2]) if len(sys.argv) > 2 else 600, exit=True)

#: Every file the import system compiled from source in this process. The loader of a
#: module with a source compiles it (``source_to_code``) only when it has no usable
#: bytecode; a sourceless module has nothing to compile.
COMPILED: list[str] = []
_source_to_code = importlib.machinery.SourceFileLoader.source_to_code


def _recording_source_to_code(self: Any, data: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
    COMPILED.append(os.fspath(path))
    return _source_to_code(self, data, path, *args, **kwargs)


importlib.machinery.SourceFileLoader.source_to_code = _recording_source_to_code  # type: ignore[method-assign]
#: This file's folder, for its second part (``smoke_service``) alone.
HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:0] = [FUNCTION_CODE, LAYER, HERE]

# Imported only now, from the layer.
import obstore  # noqa: E402
import polars as pl  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import sqlglot  # noqa: E402
from aws_lambda_powertools import Logger, Metrics, Tracer  # noqa: E402
from aws_lambda_powertools.metrics import MetricUnit  # noqa: E402
from obstore.store import LocalStore, MemoryStore, S3Store  # noqa: E402
from smoke_service import (  # noqa: E402 - the service's part, beside this file
    PARQUET_CODECS,
    ROWS,
    check_function,
)
from sqlglot import exp  # noqa: E402

FILE = "data/smoke.parquet"


def check_parquet(tmp: str) -> tuple[pl.DataFrame, bytes]:
    """What the planner and engine do with pyarrow and polars."""
    table = pa.table({
        "id": pa.array(range(ROWS), pa.int64()),
        "name": pa.array([f"row-{i}" for i in range(ROWS)]),
        "x": pa.array([i * 0.5 for i in range(ROWS)]),
    })
    path = os.path.join(tmp, "smoke.parquet")
    pq.write_table(table, path, row_group_size=10_000, compression="zstd")
    with open(path, "rb") as f:
        data = f.read()

    # the planner: the footer from a suffix read, then row-group statistics
    tail = data[-64 * 1024:]
    (footer_len,) = struct.unpack("<I", tail[-8:-4])
    framed = b"PAR1" + tail[len(tail) - footer_len - 8:]
    md = pq.read_metadata(pa.BufferReader(framed))
    assert (md.num_row_groups, md.num_rows) == (3, ROWS), md
    stats = md.row_group(1).column(0).statistics
    assert (stats.min, stats.max) == (10_000, 19_999), stats
    assert pq.read_metadata(path).num_rows == ROWS

    # the engine: row groups and columns of an in-memory image and of a memory map
    image = pa.py_buffer(data)
    got = pq.ParquetFile(pa.BufferReader(image), metadata=md).read_row_groups(
        [1, 2], columns=["id", "name"], use_threads=True)
    assert (got.num_rows, got.column_names) == (20_000, ["id", "name"])
    with pa.memory_map(path, "r") as mm:
        one = pq.ParquetFile(mm, metadata=md).read_row_groups([0], columns=["x"])
    assert one.num_rows == 10_000

    frame = pl.from_arrow(got)
    assert isinstance(frame, pl.DataFrame)
    hit = frame.lazy().filter(pl.sql_expr("id <= 10005 AND name LIKE 'row-1%'")).collect()
    assert hit.height == 6, hit
    ctx = pl.SQLContext(frames={"t": pl.scan_parquet(path)})
    agg = ctx.execute("SELECT COUNT(*) AS c, MAX(x) AS m FROM t WHERE id < 100").collect()
    assert agg.row(0) == (100, 49.5), agg
    assert pl.scan_parquet(path).filter(pl.col("id") < 10).select("name").collect().height == 10
    return hit, data


def check_writers(frame: pl.DataFrame) -> None:
    """The output formats, as the writer produces them."""
    buf = io.BytesIO()
    frame.write_parquet(buf, compression="zstd")
    assert pl.read_parquet(io.BytesIO(buf.getvalue())).equals(frame)
    buf = io.BytesIO()
    frame.write_csv(buf)
    assert pl.read_csv(io.BytesIO(gzip.decompress(gzip.compress(buf.getvalue())))).equals(frame)
    buf = io.BytesIO()
    frame.write_ndjson(buf)
    assert pl.read_ndjson(io.BytesIO(buf.getvalue())).equals(frame)
    assert json.loads(frame.write_json())[0]["id"] == 10_000


async def _ranged(store: MemoryStore) -> bytes:
    result = await obstore.get_async(store, FILE, options={"range": (0, 4)})
    return bytes(await result.bytes_async())


def check_obstore(tmp: str, data: bytes) -> None:
    """Suffix and ranged reads, async reads, listing, a local store, an S3 store (no I/O)."""
    store = MemoryStore()
    obstore.put(store, FILE, data)
    suffix = obstore.get(store, FILE, options={"range": {"suffix": 8}})
    assert bytes(suffix.bytes())[-4:] == b"PAR1"
    parts = obstore.get_ranges(store, FILE, starts=[0, 4], ends=[4, 8])
    assert bytes(parts[0]) == b"PAR1"
    assert asyncio.run(_ranged(store)) == b"PAR1"
    listed = [meta["path"] for batch in obstore.list(store, prefix="data") for meta in batch]
    assert listed == [FILE], listed
    local = LocalStore(tmp)
    obstore.put(local, "out.bin", b"abc")
    assert bytes(obstore.get(local, "out.bin").bytes()) == b"abc"
    S3Store("example-bucket", region="us-east-1", skip_signature=True)


def check_text_inputs(tmp: str) -> None:
    """CSV and JSON inputs: pyarrow's compressed streams (gzip, bzip2, zstd), decompressed
    to a file and scanned lazily by polars."""
    text = b"a,b\n" + b"".join(b"%d,x%d\n" % (i, i % 7) for i in range(ROWS))
    for codec in ("gzip", "bz2", "zstd"):
        sink = pa.BufferOutputStream()
        with pa.CompressedOutputStream(sink, codec) as out:
            out.write(text)
        path = os.path.join(tmp, f"t.csv.{codec}")
        with open(path, "wb") as f:
            f.write(sink.getvalue().to_pybytes())
        with pa.input_stream(path, compression=codec) as src:
            assert src.read() == text, codec
    plain = os.path.join(tmp, "t.csv")
    with open(plain, "wb") as f:
        f.write(text)
    hit = pl.scan_csv(plain).filter(pl.col("b") == "x3").select("a").collect()
    assert hit.height == len(range(3, ROWS, 7)), hit
    lines = os.path.join(tmp, "t.ndjson")
    pl.read_csv(plain).write_ndjson(lines)
    assert pl.scan_ndjson(lines).filter(pl.col("a") < 10).collect().height == 10


def check_parquet_codecs(tmp: str) -> None:
    """Every Parquet codec, written by pyarrow and by polars and read by both, with
    ``pq.read_table`` on a buffer as the page-level decoder calls it."""
    table = pa.table({"id": pa.array(range(ROWS), pa.int64()),
                      "name": pa.array([f"row-{i % 97}" for i in range(ROWS)])})
    frame = pl.from_arrow(table)
    for codec in PARQUET_CODECS:
        written = io.BytesIO()
        pq.write_table(table, written, compression=codec)
        by_polars = io.BytesIO()
        frame.write_parquet(by_polars, compression=codec)  # type: ignore[arg-type]
        for data in (written.getvalue(), by_polars.getvalue()):
            md = pq.read_metadata(pa.BufferReader(data))
            assert md.row_group(0).column(0).compression.startswith(codec.upper()), (codec, md)
            assert pl.from_arrow(pq.read_table(pa.BufferReader(data))).equals(frame), codec
            assert pl.read_parquet(io.BytesIO(data)).equals(frame), codec


def check_sqlglot() -> None:
    """sqlglot's default dialect, extended as the service extends it; the named dialects
    (trimmed from the layer) are neither loaded nor there."""
    from sqlglot import parser
    from sqlglot.dialects.dialect import Dialect

    tree = sqlglot.parse_one("SELECT a, b FROM s3object WHERE a <= 1000 LIMIT 5")
    assert [c.name for c in tree.find_all(exp.Column)][:2] == ["a", "b"]
    assert tree.sql() == "SELECT a, b FROM s3object WHERE a <= 1000 LIMIT 5", tree.sql()

    class Custom(Dialect):  # how the service adds S3 Select's functions
        class Parser(parser.Parser):
            FUNCTIONS = {**parser.Parser.FUNCTIONS,  # noqa: RUF012
                         "UTCNOW": lambda args: exp.Literal.string("now")}

    assert sqlglot.parse_one("SELECT UTCNOW() FROM t", read=Custom).sql() == "SELECT 'now' FROM t"
    named = sorted(n for n in sys.modules if n.startswith(("sqlglot.dialects.",
                                                           "sqlglot.generators.",
                                                           "sqlglot.parsers.",
                                                           "sqlglot.typing."))
                   and n not in ("sqlglot.dialects.dialect", "sqlglot.parsers.base"))
    assert not named, f"named dialects were loaded: {named}"
    for name in ("executor", "planner", "lineage"):
        assert f"sqlglot.{name}" not in sys.modules, name
    missing = None
    try:
        sqlglot.parse_one("SELECT 1", read="duckdb")
    except ModuleNotFoundError as e:
        missing = e.name
    assert missing == "sqlglot.dialects.duckdb", f"sqlglot's DuckDB dialect is there ({missing})"


def _pyc_header(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read(8)


def check_bytecode() -> str:
    """The layer's files: no source beside its ``.pyc``; every ``.pyc`` this interpreter's
    and ``unchecked-hash`` (never checked against a source or a time); every source kept
    has its bytecode in ``__pycache__``. The modules loaded from the layer by everything
    above: each from bytecode (a sourceless ``.pyc``, or a kept source's cache), and none
    compiled from source in this process."""
    magic = importlib.util.MAGIC_NUMBER
    kept = []
    for dirpath, _, filenames in os.walk(LAYER):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if name.endswith(".py"):
                assert not os.path.exists(path + "c"), f"{path} beside its .pyc"
                cached = importlib.util.cache_from_source(path)
                assert os.path.isfile(cached), f"{path} has no bytecode ({cached})"
                kept.append(path)
            elif name.endswith(".pyc"):
                header = _pyc_header(path)
                assert header[:4] == magic, f"{path}: magic {header[:4].hex()}, not {magic.hex()}"
                assert int.from_bytes(header[4:8], "little") == 0b01, f"{path}: not unchecked-hash"
    compiled = [p for p in COMPILED if p.startswith(LAYER + os.sep)]
    assert not compiled, f"compiled from source at import: {compiled[:10]}"
    sourceless = with_source = extensions = 0
    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        origin = getattr(spec, "origin", None)
        if not origin or not os.path.realpath(origin).startswith(LAYER + os.sep):
            continue
        loader = type(spec.loader)
        if loader is importlib.machinery.ExtensionFileLoader:
            extensions += 1
        elif loader is importlib.machinery.SourcelessFileLoader:
            assert origin.endswith(".pyc"), (name, origin)
            assert not os.path.exists(origin[:-1]), (name, origin)
            sourceless += 1
        else:
            assert loader is importlib.machinery.SourceFileLoader, (name, loader)
            assert origin in kept, (name, origin)
            assert os.path.isfile(module.__cached__), (name, module.__cached__)
            with_source += 1
    assert sourceless > 300, f"only {sourceless} modules loaded from sourceless bytecode"
    return (f"bytecode: {sourceless} modules from sourceless .pyc, {with_source} from a kept "
            f"source's cache, none compiled ({len(kept)} sources kept); {extensions} "
            f"extension modules")


def check_powertools() -> None:
    """Structured logs and EMF metrics go to stdout; Tracer's X-Ray SDK is there, with
    wrapt's compiled wrappers. (The SDK's recorder needs botocore, which the Lambda runtime
    provides and this isolated interpreter does not have: the integration tests on the
    layer construct it.)"""
    Logger(service="smoke").info("layer smoke check", extra={"rows": ROWS})
    metrics = Metrics(namespace="s3slice-smoke", service="smoke")
    metrics.add_metric(name="Rows", unit=MetricUnit.Count, value=ROWS)
    metrics.flush_metrics()
    assert Tracer.__name__ == "Tracer"
    import aws_xray_sdk
    import wrapt
    from wrapt import __wrapt__

    assert aws_xray_sdk.global_sdk_config.sdk_enabled() in (True, False)
    assert wrapt.ObjectProxy(ROWS) == ROWS
    # the compiled extension loaded (wrapt falls back to pure Python when it cannot)
    assert __wrapt__._using_c_extension, "wrapt's _wrappers extension did not load"


def check_thrift(tmp: str) -> None:
    """The page index, read as the planner reads it: Parquet's Thrift IDL with thriftpy2."""
    import thriftpy2
    from thriftpy2.protocol import TCompactProtocolFactory
    from thriftpy2.utils import deserialize, serialize

    idl = os.path.join(FUNCTION_CODE, "s3slice", "parquet", "parquet.thrift")
    parquet = thriftpy2.load(idl, module_name="smoke_parquet_thrift")
    path = os.path.join(tmp, "indexed.parquet")
    pq.write_table(pa.table({"id": pa.array(range(ROWS), pa.int64())}), path,
                   write_page_index=True, data_page_size=4096)
    with open(path, "rb") as f:
        data = f.read()
    (footer_len,) = struct.unpack("<I", data[-8:-4])
    factory = TCompactProtocolFactory()
    fmd = deserialize(parquet.FileMetaData(), data[-8 - footer_len:-8], factory)
    chunk = fmd.row_groups[0].columns[0]
    start, length = chunk.column_index_offset, chunk.column_index_length
    index = deserialize(parquet.ColumnIndex(), data[start:start + length], factory)
    assert struct.unpack("<q", index.min_values[0])[0] == 0
    assert len(index.min_values) > 1
    assert deserialize(parquet.FileMetaData(), serialize(fmd, factory), factory) == fmd


def check_xxhash() -> None:
    """The hash of Parquet's Bloom filters (the compiled extension, from the layer)."""
    import xxhash

    assert xxhash.xxh64_intdigest(b"") == 0xEF46DB3751D8E999


def check_isolation() -> None:
    """Every loaded module came from the layer, the function's code or the standard
    library; the service's from the function's code."""
    paths = sysconfig.get_paths()
    roots = tuple({os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib")}
                  | {os.path.realpath(LAYER), FUNCTION_CODE})
    strays = sorted(
        f"{name} from {file}" for name, module in list(sys.modules.items())
        if name not in ("__main__", "smoke_service")
        and (file := getattr(module, "__file__", None))
        and not os.path.realpath(file).startswith(roots)
    )
    assert not strays, "modules from outside the layer: " + "; ".join(strays)
    for name in ("boto3", "numpy", "pandas"):
        assert name not in sys.modules, f"{name} was imported"
    service = [m for n, m in sys.modules.items() if n.split(".")[0] == "s3slice"]
    assert service, "the service was not imported"
    assert all(os.path.realpath(m.__file__ or "").startswith(FUNCTION_CODE + os.sep)
               for m in service), "s3slice not from the function's code"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        frame, data = check_parquet(tmp)
        check_writers(frame)
        check_obstore(tmp, data)
        check_text_inputs(tmp)
        check_thrift(tmp)
        check_parquet_codecs(tmp)
        check_function(tmp)
    check_xxhash()
    check_sqlglot()
    check_powertools()
    check_isolation()
    summary = check_bytecode()
    faulthandler.cancel_dump_traceback_later()
    print(summary)
    print("SMOKE OK", pl.__version__, pa.__version__, sqlglot.__version__)


if __name__ == "__main__":
    main()
