"""The differential fuzzer's fixed-seed slice over the engine's local paths (single, ranges,
whole, batches, the page index): each case a random table by a random writer (pyarrow with
random options, polars, DuckDB, fastparquet) and a random query, the engine's answer equal
to polars' in-memory evaluation of the decoded file (or to DuckDB's), or a typed refusal.
``make fuzz`` runs the same cases from a fresh seed for as long as asked
(``tests/fuzz``); a case here replays with
``python -m tests.fuzz --only local --replay SEED``."""

from __future__ import annotations

import pytest

from tests.fuzz.__main__ import case_seeds
from tests.fuzz.runner import Case, Runner, Tally

#: Some 60 cases of a second or less each, some 20 s together on a quiet 2-core machine.
pytestmark = pytest.mark.slow

RUN_SEED = 36
CASES = 60
SEEDS = [s for s, _ in zip(case_seeds(RUN_SEED), range(CASES), strict=False)]
#: Cases the current service answers wrong (each a finding of issue 36, to be fixed, then
#: removed from here: xfail is strict, so a fixed case fails until it is).
KNOWN: dict[int, str] = {}


@pytest.fixture(scope="module")
def runner() -> Runner:
    return Runner(only="local")


#: Each case's outcome, kept for the slice's tally.
CASES_RUN: dict[int, Case] = {}


@pytest.mark.parametrize("seed", [pytest.param(s, marks=pytest.mark.xfail(
    reason=KNOWN[s], strict=True)) if s in KNOWN else s for s in SEEDS])
def test_a_fuzz_case_answers_as_the_references(runner: Runner, seed: int) -> None:
    case = CASES_RUN[seed] = runner.run(seed)
    assert case.outcome in ("equal", "refused", "skipped", "disputed"), case.report(
        "python -m tests.fuzz --only local --replay")


def test_the_slice_reaches_every_local_path(runner: Runner) -> None:
    """The slice's tally (printed with ``-s``), and the strategies its cases reached."""
    tally = Tally()
    for seed in SEEDS:
        tally.add(CASES_RUN.get(seed) or runner.run(seed))
    print(tally.summary())
    assert set(tally.reached) >= {"single", "ranges", "whole", "batches"}, tally.summary()
    assert tally.counts["equal"] >= CASES // 2, tally.summary()
