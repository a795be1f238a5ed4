"""CPU time a benchmark round costs, split by who spent it.

- engine: the Docker Engine's processes (dockerd, containerd, the per-container shims, runc, the
  storage driver's helpers such as fuse-overlayfs). Read from cgroup accounting: the engine's
  processes are moved into a cpuacct group of their own (cgroup v1) once, and every process
  they start later (a shim, runc, a FUSE mount) is born in it, so short-lived helpers are
  counted too, which sampling /proc would miss.
- containers: what ran inside the containers (solve.sh, the tests, tmux): the engine's parent
  cgroup of all containers, which keeps the usage of containers already removed.
- harness: this process and the children it waited for (the `docker` CLI of the cold harness).

A machine where the groups cannot be read or made (cgroup v2 without a separate engine group,
no root) reports the harness share only, and says why.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
ENGINE_GROUP = "rollouts-bench-engine"
ENGINE_COMMS = ("dockerd", "containerd", "runc")
# fuse-overlayfs processes are named after the binary; the kernel truncates comm to 15 chars.
ENGINE_COMM_PREFIXES = ("containerd-shim", "fuse-overlayfs", "docker-proxy")


@dataclass(frozen=True)
class CpuSample:
    engine_s: float | None
    containers_s: float | None
    harness_s: float
    at: float  # monotonic seconds, for the wall time between two samples

    def minus(self, before: CpuSample) -> CpuCost:
        def diff(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else a - b

        return CpuCost(
            engine_s=diff(self.engine_s, before.engine_s),
            containers_s=diff(self.containers_s, before.containers_s),
            harness_s=self.harness_s - before.harness_s,
            wall_s=self.at - before.at,
        )


@dataclass(frozen=True)
class CpuCost:
    engine_s: float | None
    containers_s: float | None
    harness_s: float
    wall_s: float

    @property
    def total_s(self) -> float | None:
        if self.engine_s is None or self.containers_s is None:
            return None
        return self.engine_s + self.containers_s + self.harness_s


def _usage_s(group: Path) -> float:
    return int((group / "cpuacct.usage").read_text()) / 1e9


def _comm(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _cpuacct_path(pid: str) -> str | None:
    try:
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "cpuacct" in controllers.split(","):
                return path
    except OSError:
        pass
    return None


def _is_engine(comm: str) -> bool:
    return comm in ENGINE_COMMS or comm.startswith(ENGINE_COMM_PREFIXES)


class CpuMeter:
    """Samples the three shares; `setup()` once before the first sample."""

    def __init__(self) -> None:
        self.engine_group: Path | None = None
        self.containers_group: Path | None = None
        self.unavailable: str | None = None

    def setup(self) -> None:
        if not (CPUACCT / "cpuacct.usage").exists():
            self.unavailable = f"no cgroup v1 cpuacct hierarchy at {CPUACCT}"
            return
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
        engine = [p for p in pids if _is_engine(_comm(p))]
        if not any(_comm(p) == "dockerd" for p in engine):
            self.unavailable = "no dockerd process on this machine (a remote engine?)"
            return
        group = CPUACCT / ENGINE_GROUP
        try:
            group.mkdir(exist_ok=True)
            for pid in engine:
                # Only processes outside a container's group: a container's own processes
                # are the work, not the engine.
                where = _cpuacct_path(pid) or "/"
                if not where.startswith("/docker/"):
                    try:
                        (group / "cgroup.procs").write_text(pid)
                    except ProcessLookupError:
                        pass  # a short-lived helper (runc) that ended since it was listed
        except OSError as e:
            self.unavailable = f"cannot group the engine's processes for accounting: {e}"
            return
        self.engine_group = group
        containers = CPUACCT / "docker"
        if (containers / "cpuacct.usage").exists():
            self.containers_group = containers

    def sample(self) -> CpuSample:
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        harness = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
        return CpuSample(
            engine_s=_usage_s(self.engine_group) if self.engine_group else None,
            containers_s=_usage_s(self.containers_group) if self.containers_group else None,
            harness_s=harness,
            at=time.monotonic(),
        )
