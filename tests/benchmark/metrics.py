"""Server-side request and byte counters, from MinIO's v3 API metrics.

A :class:`Counters` snapshot is taken right before and right after each measured run;
the difference is what that run cost the server. Counters are bumped by MinIO when a
handler returns, which can be a moment after the client has its last byte (or, for a
request the client abandoned, a while later), so :func:`snapshot` first waits until MinIO
reports no request in flight.
"""

from __future__ import annotations

import re
import time
import urllib.request
from dataclasses import dataclass, field

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """The samples of a Prometheus text exposition: (name, labels, value)."""
    samples: list[tuple[str, dict[str, str], float]] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        try:
            samples.append((name, dict(_LABEL.findall(labels)), float(value)))
        except ValueError:
            continue
    return samples


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        body: bytes = resp.read()
        return body.decode()


@dataclass(frozen=True)
class Counters:
    """Cumulative server-side counters, or (after ``-``) the difference of two snapshots."""

    requests: dict[str, int] = field(default_factory=dict)  # by S3 API name
    minio_sent_bytes: int = 0  # response bytes MinIO's S3 handlers wrote
    inflight: int = 0

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    def __sub__(self, other: Counters) -> Counters:
        names = set(self.requests) | set(other.requests)
        diff = {n: self.requests.get(n, 0) - other.requests.get(n, 0) for n in names}
        return Counters(
            requests={n: v for n, v in sorted(diff.items()) if v},
            minio_sent_bytes=self.minio_sent_bytes - other.minio_sent_bytes,
        )

    def __add__(self, other: Counters) -> Counters:
        names = set(self.requests) | set(other.requests)
        return Counters(
            requests={n: self.requests.get(n, 0) + other.requests.get(n, 0) for n in sorted(names)},
            minio_sent_bytes=self.minio_sent_bytes + other.minio_sent_bytes,
        )

    def to_json(self) -> dict[str, object]:
        return {
            "requests": dict(self.requests),
            "total_requests": self.total_requests,
            "minio_sent_bytes": self.minio_sent_bytes,
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Counters:
        reqs = data.get("requests", {})
        assert isinstance(reqs, dict)
        sent = data.get("minio_sent_bytes", 0)
        assert isinstance(sent, int)
        return cls(
            requests={str(k): int(v) for k, v in reqs.items()},
            minio_sent_bytes=sent,
        )

    def describe(self) -> str:
        """``11 GET + 1 HEAD``-style summary."""
        short = {
            "GetObject": "GET",
            "HeadObject": "HEAD",
            "ListObjectsV2": "LIST",
            "ListObjectsV1": "LISTv1",
            "HeadBucket": "HEADBUCKET",
            "GetBucketLocation": "LOCATION",
            "ListBuckets": "LISTBUCKETS",
        }
        order = ["GetObject", "HeadObject", "ListObjectsV2"]
        names = sorted(self.requests, key=lambda n: (order.index(n) if n in order else 9, n))
        parts = [f"{self.requests[n]} {short.get(n, n)}" for n in names if self.requests[n]]
        return " + ".join(parts) or "0"


def scrape(minio_metrics_url: str) -> Counters:
    requests: dict[str, int] = {}
    sent = 0
    inflight = 0
    for name, labels, value in parse_prometheus(_get(minio_metrics_url)):
        if labels.get("type", "s3") != "s3":
            continue
        if name == "minio_api_requests_total":
            requests[labels["name"]] = requests.get(labels["name"], 0) + int(value)
        elif name == "minio_api_requests_traffic_sent_bytes":
            sent += int(value)
        elif name == "minio_api_requests_inflight_total":
            inflight += int(value)
    return Counters(requests=requests, minio_sent_bytes=sent, inflight=inflight)


def snapshot(minio_metrics_url: str, settle_s: float = 30.0) -> Counters:
    """Counters once MinIO has no request in flight and two reads in a row agree."""
    deadline = time.monotonic() + settle_s
    last = scrape(minio_metrics_url)
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = scrape(minio_metrics_url)
        if now.inflight == 0 and now == last:
            return now
        last = now
    return last
