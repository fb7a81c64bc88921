"""Paths, credentials and small helpers shared by the harness and its worker processes."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
WORK = HERE / ".work"
BIN = WORK / "bin"
RESULTS = HERE / "results"

BUCKET = "s3slice-bench"
ACCESS_KEY = "s3slicebench"
SECRET_KEY = "s3slicebench-secret-key"
REGION = "us-east-1"

MB = 1_000_000
MIB = 1 << 20


def cpu_seconds() -> float:
    """User + system CPU of this process so far, every thread included."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def polars_storage_options(endpoint: str) -> dict[str, str]:
    """polars' ``storage_options`` for the harness's S3 server at ``endpoint``."""
    return {"aws_endpoint_url": endpoint, "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY, "aws_region": REGION,
            "aws_allow_http": "true"}


def snapshot_service(commit: str) -> str:
    """``git archive`` of functions/ at commit into .work, so every run measures the same
    code while the working tree changes under it (the editable install points there)."""
    dest = WORK / "s3slice-src" / commit[:12]
    if not (dest / "functions" / "s3slice" / "handler.py").exists():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "archive", commit, "functions"],
            cwd=REPO,
            capture_output=True,
            check=True,
            timeout=60,
        )
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return str(dest / "functions")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def client_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a worker runs with: the standard AWS variables and nothing that
    could send a client to a real account or to an instance-metadata endpoint."""
    env = dict(os.environ if base is None else base)
    for name in list(env):
        if name.startswith(("AWS_", "MINIO_")):
            del env[name]
    env.update(
        {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def human_bytes(n: float) -> str:
    """Decimal units, as S3 and network figures are usually quoted."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"  # pragma: no cover - loop always returns
