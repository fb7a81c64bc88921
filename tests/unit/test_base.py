"""What every fetcher counts: requests and bytes, and requests by S3's price tier."""

from __future__ import annotations

import threading

import pytest

from s3slice.fetch.base import Counters


def test_a_new_counter_is_zero_in_every_tier() -> None:
    assert Counters().snapshot() == (0, 0, {"get": 0, "put": 0, "free": 0})


@pytest.mark.parametrize(("kind", "tier"), [
    ("get", "get"), ("list", "put"), ("put", "put"), ("delete", "free")])
def test_each_request_kind_is_priced_in_its_tier(kind: str, tier: str) -> None:
    counters = Counters()
    counters.add(7, kind)  # type: ignore[arg-type]
    counters.add(3, kind)  # type: ignore[arg-type]
    expected = {"get": 0, "put": 0, "free": 0}
    expected[tier] = 2
    assert counters.snapshot() == (2, 10, expected)
    assert (counters.requests, counters.bytes, counters.by_tier) == (2, 10, expected)


def test_a_request_is_a_get_unless_said_otherwise() -> None:
    counters = Counters()
    counters.add(5)
    assert counters.snapshot() == (1, 5, {"get": 1, "put": 0, "free": 0})


def test_a_snapshot_does_not_move_with_the_counter() -> None:
    counters = Counters()
    counters.add(1)
    requests, nbytes, tiers = counters.snapshot()
    tiers["get"] = 99
    counters.add(2, "put")
    assert (requests, nbytes) == (1, 1)
    assert counters.snapshot() == (2, 3, {"get": 1, "put": 1, "free": 0})


def test_concurrent_adds_are_all_counted() -> None:
    counters = Counters()
    start = threading.Barrier(8)

    def work() -> None:
        start.wait()
        for _ in range(2_000):
            counters.add(3)
            counters.add(0, "delete")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counters.snapshot() == (32_000, 48_000, {"get": 16_000, "put": 0, "free": 16_000})
