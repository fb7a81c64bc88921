"""``python -m tests.fuzz``: the differential fuzzer for as long as asked, with a fresh
seed (or ``--seed``), every difference printed with the case seed that replays it.

    python -m tests.fuzz --seconds 480            # make fuzz FUZZ_SECONDS=480
    python -m tests.fuzz --replay 123456789       # one case again, in full
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import secrets
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.fuzz.runner import Runner, Tally

#: A case still running after this long is a hang (reported with its seed).
CASE_SECONDS = 120


def case_seeds(run_seed: int) -> Iterator[int]:
    rng = random.Random(run_seed)
    while True:
        yield rng.getrandbits(48)


@contextlib.contextmanager
def s3_server() -> Iterator[Any]:
    import boto3

    from s3slice.cli.local_s3 import LOCAL_CREDENTIALS, LocalS3

    os.environ.update(LOCAL_CREDENTIALS)
    # The handler's log lines and metrics would bury the findings.
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "3008")
    with LocalS3() as server:
        os.environ["AWS_ENDPOINT_URL_S3"] = server.endpoint_url
        yield boto3.client("s3", endpoint_url=server.endpoint_url,
                           region_name=LOCAL_CREDENTIALS["AWS_REGION"])


def _hang(signum: int, frame: Any) -> None:
    raise TimeoutError(f"the case ran over {CASE_SECONDS} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--cases", type=int, default=0, help="stop after this many (0: time)")
    parser.add_argument("--seed", type=int, default=None, help="the run's seed (fresh)")
    parser.add_argument("--replay", type=int, default=None, help="one case seed, in full")
    parser.add_argument("--no-s3", action="store_true", help="the local engine only")
    parser.add_argument("--spark", action="store_true", help="Spark writes some tables")
    parser.add_argument("--only", choices=["local", "s3"], default=None,
                        help="the engine's local paths or the handler's S3 paths alone")
    args = parser.parse_args(argv)
    seed = secrets.randbits(32) if args.seed is None else args.seed
    current = Path(tempfile.gettempdir()) / f"s3slice-fuzz-{os.getpid()}.case"
    with contextlib.ExitStack() as stack:
        client = None if args.no_s3 or args.only == "local" else stack.enter_context(
            s3_server())
        runner = Runner(s3_client=client, spark=args.spark, only=args.only)
        replay = "python -m tests.fuzz" + (f" --only {args.only}" if args.only else "") + (
            " --spark" if args.spark else "") + " --replay"
        if args.replay is not None:
            case = runner.run(args.replay)
            print(case.report(replay))
            if case.query is not None:
                print(f"  request: {case.query.request}\n  reference SQL: {case.query.sql}")
            return 0 if case.outcome in ("equal", "refused", "skipped") else 1
        print(f"fuzz: run seed {seed} (python -m tests.fuzz --seed {seed}); each case's "
              f"seed is written to {current} before it runs", flush=True)
        if runner.spark is not None:  # the JVM's start (a minute or more) is no case's
            with contextlib.suppress(Exception):
                runner.spark.session()
        signal.signal(signal.SIGALRM, _hang)
        tally, deadline = Tally(), time.monotonic() + args.seconds
        for case_seed in case_seeds(seed):
            if (args.cases and tally.counts["cases"] >= args.cases) or (
                    not args.cases and time.monotonic() >= deadline):
                break
            current.write_text(str(case_seed))
            signal.alarm(CASE_SECONDS)
            try:
                case = runner.run(case_seed)
            finally:
                signal.alarm(0)
            tally.add(case)
            if case in tally.findings:
                print(case.report(replay), flush=True)
        current.unlink(missing_ok=True)
    print(f"fuzz: run seed {seed}: {tally.summary()}")
    return 1 if tally.counts["different"] or tally.counts["crash"] else 0


if __name__ == "__main__":
    sys.exit(main())
