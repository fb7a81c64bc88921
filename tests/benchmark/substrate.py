"""The S3 substrate the benchmark runs against: MinIO behind toxiproxy, on 127.0.0.1 only.

MinIO and toxiproxy are Go programs installed with ``go install`` into ``.work/bin``
(pinned below); ``pacer/`` is a small Go TCP proxy of this harness, built with
``go build``. Each is started as its own process group; :meth:`Substrate.stop` ends each
group, bounded in time, and is reached from ``finally`` on Ctrl-C, SIGTERM and exceptions
alike. Clients → toxiproxy → pacer → MinIO.

Profiles:

- ``lambda-s3``: +25 ms before each response (toxiproxy's latency toxic, on the requests)
  and 90 MB/s *per connection* (the pacer).
- ``unshaped``: the same path with no toxic and no pacing.

Why the pacer and not toxiproxy's bandwidth toxic: the toxic sleeps once per 32 KiB
chunk, and on this machine a sleep that short costs a millisecond or more, so one
connection got 15 to 20 MB/s out of a configured 90, or 380 MB/s in another run
(measured with :func:`selfcheck.profile`). Latency toxics on the response stream have the
same per-chunk sleep (19 MB/s), so the latency goes on the request instead: one delay per
request, the same 25 ms before the first byte. The pacer schedules chunks by absolute
deadlines, so a late wake-up is caught up by the next chunks.

Requests and bytes are counted by the server, not by the clients: MinIO's v3 metrics
endpoint ``/minio/metrics/v3/api/requests`` is computed live on each scrape (the v2
``/minio/v2/metrics/{cluster,node}`` endpoints cache the HTTP group for 10 s, which makes
before/after diffs wrong). toxiproxy's own byte counter is not used: it adds a
connection's bytes only when the connection closes cleanly (``link.go``), and the clients
keep theirs alive.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from .common import ACCESS_KEY, BIN, REGION, SECRET_KEY, WORK, free_port

# Pinned so a fresh machine builds the same servers. MinIO tags releases as
# RELEASE.<date> (not semver), so the module proxy serves pseudo-versions only; this one
# is what `go list -m github.com/minio/minio@latest` resolved to when the harness was
# written. Toxiproxy has semver tags.
MINIO_MODULE = "github.com/minio/minio"
MINIO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"
TOXIPROXY_MODULE = "github.com/Shopify/toxiproxy/v2/cmd/server"
TOXIPROXY_VERSION = "v2.12.0"

PACER_SOURCE = Path(__file__).parent / "pacer"


@dataclass(frozen=True)
class Profile:
    toxics: list[dict[str, Any]]
    bytes_per_s: int  # per connection, server → client; 0 = unpaced
    description: str


PROFILES: dict[str, Profile] = {
    "lambda-s3": Profile(
        toxics=[
            {
                "name": "latency",
                "type": "latency",
                "stream": "upstream",  # on the request: one delay per request
                "toxicity": 1.0,
                "attributes": {"latency": 25, "jitter": 0},
            },
        ],
        bytes_per_s=90_000_000,
        description="+25 ms per request (toxiproxy), 90 MB/s per connection (pacer)",
    ),
    "unshaped": Profile(toxics=[], bytes_per_s=0, description="no toxic, no pacing"),
}

STOP_GRACE_S = 10.0


class SubstrateError(RuntimeError):
    """The substrate could not be installed, started or configured."""


def _run_go(
    args: list[str], log: TextIO, what: str, timeout: float, cwd: Path | None = None, **env: str
) -> None:
    """Run ``go args`` (no cgo), its output to log; SubstrateError when it fails."""
    go = shutil.which("go")
    if go is None:
        raise SubstrateError(f"`go` is not on PATH; the benchmark needs it for {what}")
    proc = subprocess.run(
        [go, *args],
        cwd=cwd,
        env=dict(os.environ, CGO_ENABLED="0", **env),
        stdout=log,
        stderr=subprocess.STDOUT,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise SubstrateError(f"{what} failed; see {log.name}")


def _stamped(target: Path, stamp: Path, wanted: str) -> bool:
    """Whether target exists and was built from ``wanted`` (recorded in its stamp file)."""
    return target.exists() and stamp.exists() and stamp.read_text().strip() == wanted


def go_install(module: str, version: str, binary: str, log: TextIO) -> Path:
    """``go install module@version`` into BIN unless the pinned build is already there."""
    BIN.mkdir(parents=True, exist_ok=True)
    target = BIN / binary
    stamp = BIN / f"{binary}.version"
    wanted = f"{module}@{version}"
    if _stamped(target, stamp, wanted):
        return target
    print(f"[substrate] go install {wanted} (first run only; MinIO takes minutes)", flush=True)
    started = time.monotonic()
    _run_go(["install", wanted], log, f"go install {wanted}", 3600, GOBIN=str(BIN))
    # `go install .../cmd/server` names the binary after its directory.
    built = BIN / Path(module).name
    if built != target:
        built.replace(target)
    stamp.write_text(wanted + "\n")
    print(f"[substrate]   built in {time.monotonic() - started:.0f} s", flush=True)
    return target


def build_pacer(log: TextIO) -> Path:
    """``go build`` the pacer (standard library only) unless its source is unchanged."""
    BIN.mkdir(parents=True, exist_ok=True)
    target = BIN / "pacer"
    stamp = BIN / "pacer.version"
    digest = hashlib.sha256()
    for path in sorted(PACER_SOURCE.iterdir()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    wanted = digest.hexdigest()
    if _stamped(target, stamp, wanted):
        return target
    _run_go(["build", "-o", str(target), "."], log, "go build of the pacer", 600, PACER_SOURCE)
    stamp.write_text(wanted + "\n")
    return target


def ensure_binaries() -> tuple[Path, Path, Path]:
    WORK.mkdir(parents=True, exist_ok=True)
    with (WORK / "go-install.log").open("a") as log:
        minio = go_install(MINIO_MODULE, MINIO_VERSION, "minio", log)
        toxiproxy = go_install(TOXIPROXY_MODULE, TOXIPROXY_VERSION, "toxiproxy-server", log)
        pacer = build_pacer(log)
    return minio, toxiproxy, pacer


def _http(method: str, url: str, body: Any = None, timeout: float = 10.0) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def _wait_http_ok(url: str, proc: subprocess.Popen[bytes], what: str, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SubstrateError(f"{what} exited with {proc.returncode} while starting")
        with contextlib.suppress(OSError):
            status, _ = _http("GET", url, timeout=2.0)
            if status == 200:
                return
        time.sleep(0.2)
    raise SubstrateError(f"{what} did not answer {url} within {deadline_s:.0f} s")


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the process group, then SIGKILL it if it is still there after grace_s."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=grace_s)


@dataclass
class Substrate:
    """Running MinIO, pacer and toxiproxy. Use :func:`running` to get one."""

    minio_port: int
    toxi_api_port: int
    proxy_port: int
    pacer_port: int
    pacer_control_port: int
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    profile: str = "unshaped"

    @property
    def endpoint(self) -> str:
        """What clients talk to: the proxy."""
        return f"http://127.0.0.1:{self.proxy_port}"

    @property
    def direct_endpoint(self) -> str:
        """MinIO itself: for uploads and set-up only, never for measured reads."""
        return f"http://127.0.0.1:{self.minio_port}"

    @property
    def minio_metrics_url(self) -> str:
        return f"{self.direct_endpoint}/minio/metrics/v3/api/requests"

    @property
    def toxi_api(self) -> str:
        return f"http://127.0.0.1:{self.toxi_api_port}"

    @property
    def pacer_rate_url(self) -> str:
        return f"http://127.0.0.1:{self.pacer_control_port}/rate"

    def set_profile(self, name: str) -> None:
        if name not in PROFILES:
            raise SubstrateError(f"unknown profile {name!r}; known: {sorted(PROFILES)}")
        status, body = _http("GET", f"{self.toxi_api}/proxies/s3/toxics")
        if status != 200:
            raise SubstrateError(f"toxiproxy: listing toxics answered {status}: {body!r}")
        for toxic in json.loads(body):
            _http("DELETE", f"{self.toxi_api}/proxies/s3/toxics/{toxic['name']}")
        profile = PROFILES[name]
        for toxic in profile.toxics:
            status, body = _http("POST", f"{self.toxi_api}/proxies/s3/toxics", toxic)
            if status != 200:
                raise SubstrateError(
                    f"toxiproxy: adding {toxic['name']} answered {status}: {body!r}"
                )
        status, body = _http("GET", f"{self.toxi_api}/proxies/s3/toxics")
        active = sorted(t["name"] for t in json.loads(body))
        if active != sorted(t["name"] for t in profile.toxics):
            raise SubstrateError(f"toxiproxy: profile {name} left toxics {active}")
        status, body = _http("PUT", f"{self.pacer_rate_url}?bytes_per_s={profile.bytes_per_s}")
        if status != 200 or int(body) != profile.bytes_per_s:
            raise SubstrateError(f"pacer: setting the rate answered {status}: {body!r}")
        self.profile = name

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop_group(proc)
        self.procs.clear()


def _start(cmd: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(
            cmd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so stop_group reaches it all
        )


def default_data_dir() -> Path:
    """Where MinIO keeps the bucket: in memory (``/dev/shm``) when the machine has it.

    On disk, the page cache of the bucket does not stay: this machine's kernel pages out
    file pages that are not mapped (DAMON's ``pageout`` scheme), so a GET served from disk
    one run and from memory the next made the server, not the client, the noise. S3's own
    disks are not what the benchmark compares.
    """
    shm = Path("/dev/shm")  # noqa: S108 - test data for a loopback server, nothing secret
    if shm.is_dir() and os.access(shm, os.W_OK):
        return shm / "s3slice-bench-minio"
    return WORK / "minio-data"


@contextlib.contextmanager
def running(data_dir: Path | None = None) -> Iterator[Substrate]:
    """Install (once), start, yield, and always stop MinIO and toxiproxy."""
    minio_bin, toxi_bin, pacer_bin = ensure_binaries()
    data_dir = data_dir or default_data_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    sub = Substrate(
        minio_port=free_port(),
        toxi_api_port=free_port(),
        proxy_port=free_port(),
        pacer_port=free_port(),
        pacer_control_port=free_port(),
    )
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MINIO_"))}
    minio_env = dict(
        base_env,
        MINIO_ROOT_USER=ACCESS_KEY,
        MINIO_ROOT_PASSWORD=SECRET_KEY,
        MINIO_REGION=REGION,
        MINIO_PROMETHEUS_AUTH_TYPE="public",
        MINIO_BROWSER="off",
        MINIO_UPDATE="off",
        MINIO_CALLHOME_ENABLE="off",
        # The background scanner walks every object; on 2 cores it competed with the
        # measured requests right after an upload.
        MINIO_SCANNER_SPEED="slowest",
    )
    try:
        sub.procs.append(
            _start(
                [
                    str(minio_bin),
                    "server",
                    str(data_dir),
                    "--address",
                    f"127.0.0.1:{sub.minio_port}",
                    "--console-address",
                    f"127.0.0.1:{free_port()}",
                    "--quiet",
                ],
                minio_env,
                WORK / "logs" / "minio.log",
            )
        )
        sub.procs.append(
            _start(
                [
                    str(toxi_bin),
                    "-host",
                    "127.0.0.1",
                    "-port",
                    str(sub.toxi_api_port),
                ],
                base_env,
                WORK / "logs" / "toxiproxy.log",
            )
        )
        sub.procs.append(
            _start(
                [
                    str(pacer_bin),
                    "-listen",
                    f"127.0.0.1:{sub.pacer_port}",
                    "-upstream",
                    f"127.0.0.1:{sub.minio_port}",
                    "-control",
                    f"127.0.0.1:{sub.pacer_control_port}",
                ],
                base_env,
                WORK / "logs" / "pacer.log",
            )
        )
        _wait_http_ok(f"{sub.direct_endpoint}/minio/health/ready", sub.procs[0], "MinIO", 60)
        _wait_http_ok(f"{sub.toxi_api}/version", sub.procs[1], "toxiproxy", 30)
        _wait_http_ok(sub.pacer_rate_url, sub.procs[2], "pacer", 30)
        status, body = _http(
            "POST",
            f"{sub.toxi_api}/proxies",
            {
                "name": "s3",
                "listen": f"127.0.0.1:{sub.proxy_port}",
                "upstream": f"127.0.0.1:{sub.pacer_port}",
                "enabled": True,
            },
        )
        if status not in (200, 201):
            raise SubstrateError(f"toxiproxy: creating the proxy answered {status}: {body!r}")
        sub.set_profile("unshaped")
        yield sub
    finally:
        sub.stop()


def versions() -> dict[str, str]:
    """What was built, for the report."""
    out = {
        "minio_module": f"{MINIO_MODULE}@{MINIO_VERSION}",
        "toxiproxy_module": f"{TOXIPROXY_MODULE}@{TOXIPROXY_VERSION}",
    }
    go = shutil.which("go")
    if go:
        out["go"] = subprocess.run(
            [go, "version"], capture_output=True, text=True, check=False, timeout=30
        ).stdout.strip()
    return out
