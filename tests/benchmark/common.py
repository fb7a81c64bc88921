"""Paths, credentials and small helpers shared by the harness and its worker processes."""

from __future__ import annotations

import os
import socket
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
