"""One case from one seed: a random table, a writer with random options, a random query,
the service's answer by one of its paths, and the references' answers. Every outcome is
counted: ``equal``, ``refused`` (a typed error of the service's), ``skipped`` (a writer or
a reference could not), ``different`` (the service differs from every reference that
answered), ``disputed`` (it differs from polars' in-memory answer but equals DuckDB's),
``crash`` (an untyped exception)."""

from __future__ import annotations

import dataclasses
import random
import tempfile
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl

from s3slice import S3SliceError
from tests.fuzz import compare, queries, references, service, tables, writers

#: The share of cases sent through the handler on S3, when a server is given.
S3_SHARE = 0.25
OUTCOMES = ("equal", "refused", "skipped", "different", "disputed", "crash")


@dataclasses.dataclass
class Case:
    seed: int
    writer: str = ""
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    path: str = ""
    query: queries.Query | None = None
    outcome: str = ""
    detail: str = ""
    reached: str = ""
    table: Any = None

    def report(self, replay: str) -> str:
        lines = [f"[{self.outcome}] case seed {self.seed}  (replay: {replay} {self.seed})",
                 f"  writer: {self.writer} {self.options}", f"  path: {self.path} -> "
                 f"{self.reached}", f"  query: {self.query.describe() if self.query else ''}",
                 f"  {self.detail}"]
        if self.table is not None:
            lines.append(f"  table schema: {self.table.schema}".replace("\n", "; "))
            try:
                first = str(self.table.slice(0, 4).to_pylist())
            except (ValueError, OverflowError):  # a date Python's datetime cannot hold
                first = self.table.slice(0, 4).to_string(preview_cols=8)
            lines.append(f"  rows: {self.table.num_rows}; first: {first}")
        return "\n".join(lines)


@dataclasses.dataclass
class Tally:
    counts: Counter[str] = dataclasses.field(default_factory=Counter)
    reached: Counter[str] = dataclasses.field(default_factory=Counter)
    writers: Counter[str] = dataclasses.field(default_factory=Counter)
    reasons: Counter[str] = dataclasses.field(default_factory=Counter)
    refused_with_answers: int = 0
    findings: list[Case] = dataclasses.field(default_factory=list)

    def add(self, case: Case) -> None:
        self.counts["cases"] += 1
        self.counts[case.outcome] += 1
        self.writers[case.writer] += 1
        if case.reached:
            self.reached[case.reached] += 1
        if case.outcome == "skipped":
            self.reasons[case.detail.split(":")[0]] += 1
        answered = case.outcome == "refused" and "both references answered" in case.detail
        if case.outcome in ("different", "disputed", "crash") or answered:
            self.findings.append(case)
        self.refused_with_answers += answered

    def summary(self) -> str:
        counts = ", ".join(f"{k} {self.counts[k]}" for k in ("cases", *OUTCOMES))
        return (f"{counts}; refused where both references answered {self.refused_with_answers}\n"
                f"  paths reached: {dict(sorted(self.reached.items()))}\n"
                f"  writers: {dict(sorted(self.writers.items()))}\n"
                f"  skipped because: {dict(self.reasons.most_common())}")


class Runner:
    """Cases from seeds; ``s3_client`` (an S3 server's, or None) for the handler's paths."""

    def __init__(self, *, s3_client: Any = None, spark: bool = False,
                 only: str | None = None) -> None:
        """``only``: ``"local"`` or ``"s3"`` paths alone (a replay names the same)."""
        self.s3_client, self.only = s3_client, only
        self.spark = writers.SparkWriter() if spark and writers.SparkWriter.available() else None

    def writer(self, rng: random.Random) -> str:
        names = [n for n in writers.WEIGHTS if n != "spark" or self.spark is not None]
        return rng.choices(names, weights=[writers.WEIGHTS[n] for n in names])[0]

    def run(self, seed: int) -> Case:
        case = Case(seed=seed)
        rng = random.Random(seed)
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / service.BUCKET).mkdir()
            file = Path(tmp) / service.BUCKET / f"f{seed}.parquet"
            try:
                self._run(case, rng, file)
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as e:  # noqa: BLE001 - a harness failure (a panic) is counted
                case.outcome, case.detail = "crash", (
                    f"harness: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        return case

    def _run(self, case: Case, rng: random.Random, file: Path) -> None:
        draw = rng.random()  # drawn always: a case replays with or without a server
        on_s3 = self.s3_client is not None and draw < S3_SHARE
        if self.only is not None:
            on_s3 = self.only == "s3"
        case.path = rng.choice(list(service.S3 if on_s3 else service.LOCAL))
        case.writer = self.writer(rng)
        # A copy is planned only where the footer is small beside the chunks copied.
        nested = case.writer in ("pyarrow", "polars", "duckdb", "spark")  # Spark: legacy lists
        # polars' own S3 reader is handed flat columns it types as the service does (no
        # struct, list or dictionary: handoff.applies): those tables, for that path.
        flat = case.path == "s3-handoff"
        table = tables.random_table(rng, nested=nested and not flat, dicts=not flat,
                                    min_rows=20_000 if case.path == "s3-copy" else 0)
        case.table = table
        write = self.spark if case.writer == "spark" else writers.WRITERS[case.writer]
        assert write is not None
        try:
            case.options = write(table, rng, file)
        except writers.Unwritable as e:
            case.outcome, case.detail = "skipped", f"writer: {e}"[:300]
            return
        try:
            frame = references.decoded(file)
        except references.ReferenceError_ as e:
            case.outcome, case.detail = "skipped", f"unreadable by the references: {e}"[:300]
            return
        query = queries.Generator(rng, frame, plain=flat).query(filtered=flat)
        if case.path == "s3-copy":  # no row filter: the column chunks are copied
            columns = rng.sample(frame.columns, rng.randint(1, frame.width))
            query = queries.Query({"columns": columns},
                                  f"SELECT {', '.join(columns)} FROM s3object", False, False)
        case.query = query
        want: dict[str, pl.DataFrame] = {}
        errors: list[str] = []
        for name, answer in (("polars", lambda: references.polars_answer(frame, query.sql)),
                             ("duckdb", lambda: references.duckdb_answer(file, query.sql))):
            try:
                want[name] = answer()
            except references.ReferenceError_ as e:
                errors.append(str(e))
        try:
            if case.path in service.S3:
                got = service.s3_answer(self.s3_client, file.read_bytes(), query.request,
                                        case.path, file.name)
            else:
                got = service.local_answer(file, query.request, case.path)
        except S3SliceError as e:
            case.outcome = "refused"
            case.detail = f"{type(e).__name__}: {str(e)[:300]}"
            if len(want) == 2:  # a finding, though not a wrong answer
                case.detail += " (both references answered)"
            return
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # noqa: BLE001 - an untyped error (or a panic) is a finding
            case.outcome = "crash"
            case.detail = f"{type(e).__name__}: {str(e)[:500]}\n{traceback.format_exc()[-2000:]}"
            return
        case.reached = got.strategy
        if "polars" not in want:
            case.outcome, case.detail = "skipped", f"polars reference: {errors[0][:300]}"
            return
        self._judge(case, got.frame, want, query)

    @staticmethod
    def _judge(case: Case, got: pl.DataFrame, want: dict[str, pl.DataFrame],
               query: queries.Query) -> None:
        versus_polars = compare.difference(got, want["polars"], ordered=query.ordered,
                                           aggregate=query.aggregate)
        if versus_polars is None:
            case.outcome = "equal"
            return
        versus_duckdb = None if "duckdb" not in want else compare.difference(
            got, want["duckdb"], ordered=query.ordered, aggregate=query.aggregate, loose=True)
        if "duckdb" in want and versus_duckdb is None:
            case.outcome, case.detail = "disputed", f"vs polars: {versus_polars}"
            return
        case.outcome = "different"
        case.detail = (f"vs polars: {versus_polars}; vs duckdb: "
                       f"{versus_duckdb or 'no answer'}\n  got: {got.head(5)}\n  "
                       f"polars: {want['polars'].head(5)}").replace("\n", "\n  ")
