"""Iceberg tables written by real Spark, for the tests (tests/integration/test_iceberg_spark.py).

Spark runs in a venv of its own (``~/.cache/s3slice-tests/spark-<version>``, built by pip the first
time) because the Iceberg runtime must match Spark's minor version, whatever pyspark the
project's venv holds; the runtime jar comes from Maven Central by ``mvn dependency:get``.
tests/spark/spark_iceberg_writer.py writes the tables (one JVM, ~40 tables) into a local tree
whose metadata holds ``s3://BUCKET/wh/...`` paths; the tree is kept under
``~/.cache/s3slice-tests/spark-iceberg/<hash of the writer and versions>``, reused while neither
changes, so only the first run on a machine pays for Spark.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

SPARK_VERSION = "4.1.4"
ICEBERG_RUNTIME = ("org.apache.iceberg", "iceberg-spark-runtime-4.1_2.13", "1.11.0")
BUCKET = "spark-iceberg"

HERE = Path(__file__).resolve().parent
WRITER = HERE / "spark_iceberg_writer.py"
# kept outside the work tree: CI runs in a fresh clone, on a machine that may have run it before
WORK = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "s3slice-tests"


class SparkUnavailable(RuntimeError):
    """A tool Spark needs (a JDK, Maven, pip's registry) is missing on this machine."""


@dataclasses.dataclass(frozen=True)
class SparkTable:
    name: str
    location: str  # s3://BUCKET/wh/db/NAME
    snapshots: list[int]  # in commit order; the last is the current one
    metadata: str  # the current metadata file's s3:// URI


def _run(args: list[str], log: Path, timeout: float, env: dict[str, str] | None = None) -> None:
    with log.open("a") as out:
        done = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
                              env=env, check=False)
    if done.returncode != 0:
        tail = log.read_text()[-4000:]
        raise RuntimeError(f"{' '.join(args[:3])} failed ({done.returncode}):\n{tail}")


def spark_python(log: Path) -> str:
    """A Python whose pyspark is SPARK_VERSION: this one's if it has it, else a venv's."""
    with contextlib.suppress(ImportError):
        import pyspark

        if pyspark.__version__ == SPARK_VERSION:
            return sys.executable
    venv = WORK / f"spark-{SPARK_VERSION}"
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if not stamp.exists():
        shutil.rmtree(venv, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(venv)], log, 300)
        _run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              f"pyspark=={SPARK_VERSION}"], log, 1800)
        stamp.touch()
    return str(python)


def runtime_jar(log: Path) -> Path:
    group, artifact, version = ICEBERG_RUNTIME
    repo = Path.home() / ".m2" / "repository"
    jar = repo.joinpath(*group.split("."), artifact, version, f"{artifact}-{version}.jar")
    if not jar.exists():
        if shutil.which("mvn") is None:
            raise SparkUnavailable("Maven (mvn) is needed to fetch the Iceberg Spark runtime")
        _run(["mvn", "-q", "-B", "dependency:get", f"-Dartifact={group}:{artifact}:{version}",
              "-Dtransitive=false"], log, 900)
    return jar


def _fingerprint() -> str:
    digest = hashlib.sha256(WRITER.read_bytes())
    digest.update(f"{SPARK_VERSION} {ICEBERG_RUNTIME} {BUCKET}".encode())
    digest.update(os.environ.get("S3SLICE_SPARK_TABLES", "").encode())
    return digest.hexdigest()[:16]


def tables_tree() -> Path:
    """The local tree of the tables (ROOT/BUCKET/wh/...; ROOT/tables.json), written once
    per writer version; a lock keeps concurrent test processes from writing it twice."""
    if shutil.which("java") is None:
        raise SparkUnavailable("a JDK (java) is needed to run Spark")
    WORK.mkdir(parents=True, exist_ok=True)
    root = WORK / "spark-iceberg" / _fingerprint()
    with (WORK / "spark-iceberg.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / "tables.json").exists():
            return root
        log = WORK / "spark-iceberg.log"
        log.write_text("")
        python = spark_python(log)
        jar = runtime_jar(log)
        partial = root.with_name(root.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK"))}
        env["ICEBERG_SPARK_RUNTIME"] = str(jar)
        env["TZ"] = "UTC"
        env["SPARK_LOCAL_IP"] = "127.0.0.1"  # loopback only
        _run([python, str(WRITER), str(partial), BUCKET], log, 1800, env=env)
        partial.rename(root)
        return root


def current_metadata(tree: Path, location: str) -> str:
    """The s3:// URI of the table's current metadata file (the Hadoop catalog's
    version-hint names its number; the file may be gzip-compressed)."""
    local = tree / location.removeprefix("s3://") / "metadata"
    version = (local / "version-hint.text").read_text().strip()
    [name] = [p.name for p in local.iterdir()
              if p.name in (f"v{version}.metadata.json", f"v{version}.gz.metadata.json")]
    return f"{location}/metadata/{name}"


def load_tables(tree: Path) -> list[SparkTable]:
    listing = json.loads((tree / "tables.json").read_text())
    return [SparkTable(t["name"], t["location"], t["snapshots"],
                       current_metadata(tree, t["location"])) for t in listing]


def upload(tree: Path, client: object) -> None:
    """Every file of the tree, to the S3 server: ROOT/BUCKET/key is s3://BUCKET/key."""
    base = tree / BUCKET
    for path in sorted(base.rglob("*")):
        if path.is_file() and not path.name.endswith(".crc"):
            key = path.relative_to(base).as_posix()
            client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())  # type: ignore[attr-defined]
