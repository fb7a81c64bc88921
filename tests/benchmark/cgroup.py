"""A child cgroup (v1) that holds one worker at a Lambda size: memory limit and CPU quota.

Created under *this process's own* cgroup in each hierarchy (read from
``/proc/self/cgroup``), named ``s3slice-bench-<pid>-<n>``, and always removed again: the
owner kills whatever is left in it (only our worker and its children can be there) and
``rmdir``s it, from ``finally``. No other cgroup is written to.

- ``memory``: ``memory.limit_in_bytes`` = M MiB; read back ``memory.max_usage_in_bytes``
  (RSS + page cache + kernel memory charged to it), ``memory.failcnt`` (times the limit
  was hit, reclaim included) and ``memory.oom_control``'s ``oom_kill``.
- ``cpu``: ``cpu.cfs_quota_us`` = min(M / 1769, cores) x ``cpu.cfs_period_us``, Lambda's
  CPU share; read back ``cpu.stat`` (periods throttled, time throttled).
- ``cpuacct`` (when mounted as a hierarchy of its own): ``cpuacct.usage``, the CPU time of
  every task in the group.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from pathlib import Path
from typing import Any

ROOT = Path("/sys/fs/cgroup")
LAMBDA_MB_PER_VCPU = 1769
CONTROLLERS = ("memory", "cpu", "cpuacct")
_counter = itertools.count()


class CgroupError(RuntimeError):
    """cgroup v1 is not usable here (not root, not mounted, not writable)."""


def own_paths() -> dict[str, Path]:
    """Controller -> this process's cgroup directory, for the v1 hierarchies we use."""
    out: dict[str, Path] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if not names:
            continue  # the v2 (unified) line
        for ctrl in names.split(","):
            if ctrl not in CONTROLLERS:
                continue
            for mount in (ROOT / names, ROOT / ctrl):
                if (mount / "cgroup.procs").exists():
                    out[ctrl] = mount / path.lstrip("/")
                    break
    return out


def _read(path: Path) -> str:
    return path.read_text().strip()


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


class LambdaCgroup:
    """One worker's cgroups. Use as a context manager; :meth:`enter` is the preexec hook."""

    def __init__(self, memory_mb: int, cores: int | None = None) -> None:
        self.memory_mb = memory_mb
        self.cores = cores or os.cpu_count() or 1
        self.cpus = min(memory_mb / LAMBDA_MB_PER_VCPU, self.cores)
        self.name = f"s3slice-bench-{os.getpid()}-{next(_counter)}"
        self.dirs: dict[str, Path] = {}

    def __enter__(self) -> LambdaCgroup:
        parents = own_paths()
        for ctrl in ("memory", "cpu"):
            if ctrl not in parents:
                raise CgroupError(f"no cgroup v1 {ctrl} hierarchy under {ROOT}")
        try:
            for ctrl, parent in parents.items():
                d = parent / self.name
                d.mkdir()
                self.dirs[ctrl] = d
            mem = self.dirs["memory"]
            _write(mem / "memory.limit_in_bytes", str(self.memory_mb << 20))
            cpu = self.dirs["cpu"]
            period = int(_read(cpu / "cpu.cfs_period_us"))
            self.quota_us = max(1000, round(self.cpus * period))
            _write(cpu / "cpu.cfs_quota_us", str(self.quota_us))
            self.period_us = period
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def enter(self) -> None:
        """Move the calling process into every child (run in the worker before exec)."""
        pid = str(os.getpid())
        for d in self.dirs.values():
            _write(d / "cgroup.procs", pid)

    def pids(self) -> list[int]:
        found: set[int] = set()
        for d in self.dirs.values():
            with contextlib.suppress(OSError):
                found.update(int(p) for p in _read(d / "cgroup.procs").split())
        return sorted(found)

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "memory_limit_mb": self.memory_mb,
            "cpu_quota_us": self.quota_us,
            "cpu_period_us": self.period_us,
            "cpus": self.cpus,
        }
        mem = self.dirs.get("memory")
        if mem:
            out["cgroup_peak_mb"] = int(_read(mem / "memory.max_usage_in_bytes")) / (1 << 20)
            out["failcnt"] = int(_read(mem / "memory.failcnt"))
            oom = dict(line.split() for line in _read(mem / "memory.oom_control").splitlines())
            out["oom_kill"] = int(oom.get("oom_kill", 0))
            out["under_oom"] = int(oom.get("under_oom", 0))
        cpu = self.dirs.get("cpu")
        if cpu:
            st = dict(line.split() for line in _read(cpu / "cpu.stat").splitlines())
            out["nr_throttled"] = int(st.get("nr_throttled", 0))
            out["throttled_s"] = int(st.get("throttled_time", 0)) / 1e9
        acct = self.dirs.get("cpuacct")
        if acct:
            out["cpuacct_s"] = int(_read(acct / "cpuacct.usage")) / 1e9
        return out

    def remove(self) -> None:
        """Kill what is left inside (our worker's processes only), then rmdir each child."""
        deadline = time.monotonic() + 10
        while self.dirs:
            left = self.pids()
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            for ctrl, d in list(self.dirs.items()):
                try:
                    d.rmdir()
                    del self.dirs[ctrl]
                except FileNotFoundError:
                    del self.dirs[ctrl]
                except OSError:
                    pass  # still busy: a killed task is on its way out
            if self.dirs:
                if time.monotonic() > deadline:
                    raise CgroupError(f"could not remove {sorted(map(str, self.dirs.values()))}")
                time.sleep(0.1)
