"""The S3 Select comparison with MinIO's ``select_object_content``: the objects both sides
hold, the outcomes a case expects, MinIO built (or skipped, or failed in CI) and started
once per module, and each side asked the same request.

The cases are in ``test_minio_select.py`` (CSV and JSON lines) and
``test_minio_select_time.py`` (timestamps); ``test_minio_select.py``'s docstring says how
MinIO is built and when a missing one skips.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import boto3
import pytest
from botocore.exceptions import ClientError

from s3slice import S3SliceError
from s3slice.cli.invoke import LambdaContext
from s3slice.handler import lambda_handler
from tests.benchmark.common import BIN, free_port
from tests.benchmark.substrate import (
    MINIO_MODULE,
    MINIO_VERSION,
    SubstrateError,
    go_install,
    stop_group,
)
from tests.support import S3Env

BUCKET = "select-compare"
USER, SECRET = "comparer", "comparer-secret-key"

CSV_DATA = (b"id,name,amount,city,ts\n"
            b"1,Ada,10,Oslo,2024-05-01T10:30:00Z\n"
            b"2,bob,25,,2024-06-15T00:00:00Z\n"
            b"3,,7,Lima,2023-12-31T23:59:59Z\n"
            b"4,Cy,100,Oslo,2024-01-01T\n")
RECORDS: list[dict[str, Any]] = [
    {"a": 1, "n": "one", "price": 1.5, "ok": True, "b": {"c": "x1", "d": {"e": 10}},
     "tags": ["t1", "u1"]},
    {"a": 2, "n": "two", "price": 2.25, "ok": False, "b": {"c": "x2", "d": {"e": 20}},
     "tags": []},
    {"a": 3, "n": None, "price": 3.0, "ok": True, "b": {"c": None, "d": {"e": 30}},
     "tags": ["t3"]},
    {"a": 4, "n": "four", "price": 0.5, "ok": False, "tags": ["t4", "u4", "v4"]},  # no b
]
JSON_DATA = "".join(json.dumps(r) + "\n" for r in RECORDS).encode()
#: Timestamps as S3 Select writes them: UTC (``Z``), offsets either side, minutes only,
#: fractions, a date alone.
TIMES = [("1", "2024-05-01T10:30:00Z"), ("2", "2024-06-15T00:00:00+02:00"),
         ("3", "2023-12-31T23:59:59-05:00"), ("4", "2024-02-29T12:00Z"),
         ("5", "2024-01-01T"), ("6", "2020-06-15T08:45:30.25+05:30")]
TIMES_CSV = ("id,ts\n" + "".join(f"{i},{t}\n" for i, t in TIMES)).encode()
TIMES_JSON = "".join(json.dumps({"id": int(i), "ts": t}) + "\n" for i, t in TIMES).encode()
OBJECTS = {"csv": ("t.csv", CSV_DATA), "json": ("t.jsonl", JSON_DATA),
           "times_csv": ("times.csv", TIMES_CSV), "times_json": ("times.jsonl", TIMES_JSON)}


# ------------------------------------------------------------------------- the outcomes
@dataclasses.dataclass(frozen=True)
class Rows:
    """Records: JSON objects (JSON output) or lists of fields (CSV output)."""

    rows: list[Any]


@dataclasses.dataclass(frozen=True)
class Raw:
    """The payload, byte for byte (when parsing would hide the difference)."""

    text: str


@dataclasses.dataclass(frozen=True)
class Fails:
    """An error whose code/type and message contain ``needle``."""

    needle: str


Outcome = Rows | Raw | Fails


@dataclasses.dataclass(frozen=True)
class Differs:
    why: str
    ours: Outcome
    minio: Outcome


SAME = None
Source = Literal["csv", "json", "times_csv", "times_json"]
Output = Literal["JSON", "CSV"]


@dataclasses.dataclass(frozen=True)
class Answer:
    payload: str | None
    error: str | None
    output: Output

    def rows(self) -> list[Any]:
        assert self.payload is not None, self.error
        if self.output == "JSON":
            return [json.loads(line) for line in self.payload.splitlines()]
        return list(csv.reader(io.StringIO(self.payload)))

    def check(self, want: Outcome) -> None:
        match want:
            case Fails(needle=needle):
                assert self.error is not None, f"expected an error, got {self.payload!r}"
                assert needle in self.error
            case Raw(text=text):
                assert self.payload == text, self.error
            case Rows(rows=rows):
                assert self.rows() == rows


def event(source: Source, sql: str, output: Output) -> dict[str, Any]:
    key = OBJECTS[source][0]
    serialization = ({"CSV": {"FileHeaderInfo": "USE"}} if source.endswith("csv")
                     else {"JSON": {"Type": "LINES"}})
    return {"Bucket": BUCKET, "Key": key, "Expression": sql, "ExpressionType": "SQL",
            "InputSerialization": serialization, "OutputSerialization": {output: {}}}


# ------------------------------------------------------------------------------- MinIO
def must_build() -> bool:
    """In CI (``CI=true``, as ``.ci/run`` sets) or when asked to, a MinIO that is not
    built is built, and one that cannot be is a failure, never a skip."""
    return (os.environ.get("CI", "").lower() in ("1", "true")
            or os.environ.get("S3SLICE_BUILD_MINIO") == "1")


def _minio_binary() -> Path:
    target, stamp = BIN / "minio", BIN / "minio.version"
    wanted = f"{MINIO_MODULE}@{MINIO_VERSION}"
    if target.exists() and stamp.exists() and stamp.read_text().strip() == wanted:
        return target
    if not must_build():
        pytest.skip(f"MinIO ({wanted}) is not built; `make minio` (or `make test`) builds "
                    "it, or set S3SLICE_BUILD_MINIO=1 (a Go build of 7 to 11 minutes)")
    with tempfile.NamedTemporaryFile("w+", prefix="minio-build-", suffix=".log",
                                     delete=False) as log:
        try:
            return go_install(MINIO_MODULE, MINIO_VERSION, "minio", log)
        except (SubstrateError, OSError, subprocess.SubprocessError) as e:
            log.seek(0)
            pytest.fail(f"MinIO ({wanted}) could not be built, and CI runs these "
                        f"comparisons: {e}\n{log.read()[-4000:]}")


@pytest.fixture(scope="module")
def minio() -> Iterator[Any]:
    """MinIO on a free loopback port holding ``OBJECTS``, as a boto3 client (a module's
    fixture): built first, or skipped, or failed in CI (``_minio_binary``)."""
    binary = _minio_binary()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MINIO_"))}
    env.update(MINIO_ROOT_USER=USER, MINIO_ROOT_PASSWORD=SECRET, MINIO_BROWSER="off",
               MINIO_UPDATE="off", MINIO_CALLHOME_ENABLE="off")
    with tempfile.TemporaryDirectory(prefix="s3slice-minio-") as data:
        proc = subprocess.Popen(
            [str(binary), "server", data, "--address", f"127.0.0.1:{port}",
             "--console-address", f"127.0.0.1:{free_port()}", "--quiet"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, f"MinIO exited with {proc.returncode}"
                try:
                    with urllib.request.urlopen(
                            f"http://127.0.0.1:{port}/minio/health/ready", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                assert time.monotonic() < deadline, "MinIO did not start within 60 s"
                time.sleep(0.1)
            client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}",
                                  aws_access_key_id=USER, aws_secret_access_key=SECRET,
                                  region_name="us-east-1")
            client.create_bucket(Bucket=BUCKET)
            for key, body in OBJECTS.values():
                client.put_object(Bucket=BUCKET, Key=key, Body=body)
            yield client
        finally:
            stop_group(proc)


def ask_minio(client: Any, source: Source, sql: str, output: Output) -> Answer:
    try:
        response = client.select_object_content(**event(source, sql, output))
        payload = "".join(e["Records"]["Payload"].decode() for e in response["Payload"]
                          if "Records" in e)
    except ClientError as e:
        error = e.response.get("Error", {})
        return Answer(None, f"{error.get('Code')}: {error.get('Message')}", output)
    return Answer(payload, None, output)


@pytest.fixture
def local(s3: S3Env) -> S3Env:
    """The local S3 server holding ``OBJECTS`` for the handler (a test's fixture)."""
    s3.bucket(BUCKET)
    for key, body in OBJECTS.values():
        s3.client.put_object(Bucket=BUCKET, Key=key, Body=body)
    return s3


def ask_ours(source: Source, sql: str, output: Output) -> Answer:
    try:
        response = lambda_handler(event(source, sql, output), LambdaContext())
    except S3SliceError as e:
        return Answer(None, f"{type(e).__name__}: {e.message}", output)
    return Answer(response["Payload"], None, output)


def compare(minio: Any, name: str, source: Source, sql: str, output: Output,
            expect: Differs | None) -> None:
    """Ask both sides: the same records, or the difference exactly as it is known."""
    ours = ask_ours(source, sql, output)
    theirs = ask_minio(minio, source, sql, output)
    if expect is SAME:
        assert ours.error is None, ours.error
        assert theirs.error is None, theirs.error
        assert ours.rows() == theirs.rows(), name
    else:
        ours.check(expect.ours)
        theirs.check(expect.minio)
