"""CPU time a benchmark round costs, split by who spent it.

- engine: the Docker Engine's processes (dockerd, containerd, the per-container shims, runc, the
  storage driver's helpers such as fuse-overlayfs). Read from cgroup accounting: the engine's
  processes are moved into cpuacct groups of their own (cgroup v1) once, and every process
  they start later (a shim, runc, a FUSE mount) is born in its parent's, so short-lived
  helpers are counted too, which sampling /proc would miss. Two groups, to tell the parts
  apart: dockerd with what it starts (the storage driver's mounts), and containerd with what
  it starts (a shim per container, which runs runc).
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
# Engine part -> its cpuacct group and the processes that go there at setup (by comm; the
# kernel truncates comm to 15 characters, so prefixes for the long names).
ENGINE_PARTS = {
    "dockerd": ("rollouts-bench-dockerd", ("dockerd",), ("fuse-overlayfs", "docker-proxy")),
    "containerd": ("rollouts-bench-containerd", ("containerd", "runc"), ("containerd-shim",)),
}


@dataclass(frozen=True)
class CpuSample:
    engine_parts: dict[str, float] | None  # ENGINE_PARTS key -> seconds
    containers_s: float | None
    harness_s: float
    at: float  # monotonic seconds, for the wall time between two samples

    def minus(self, before: CpuSample) -> CpuCost:
        parts = None
        if self.engine_parts is not None and before.engine_parts is not None:
            parts = {k: v - before.engine_parts[k] for k, v in self.engine_parts.items()}
        containers = None
        if self.containers_s is not None and before.containers_s is not None:
            containers = self.containers_s - before.containers_s
        return CpuCost(
            engine_parts=parts,
            containers_s=containers,
            harness_s=self.harness_s - before.harness_s,
            wall_s=self.at - before.at,
        )


@dataclass(frozen=True)
class CpuCost:
    engine_parts: dict[str, float] | None
    containers_s: float | None
    harness_s: float
    wall_s: float

    @property
    def engine_s(self) -> float | None:
        return None if self.engine_parts is None else sum(self.engine_parts.values())

    @property
    def total_s(self) -> float | None:
        if self.engine_s is None or self.containers_s is None:
            return None
        return self.engine_s + self.containers_s + self.harness_s

    def shares(self) -> dict[str, float]:
        """Seconds by who spent them, named as the results files name them: engine (and each
        of its parts, `engine_<part>`), containers, harness, total; a share not measured here
        is left out."""
        out = {
            "engine": self.engine_s,
            "containers": self.containers_s,
            "harness": self.harness_s,
            "total": self.total_s,
        }
        # The engine's share by part: dockerd (with the storage driver's mounts) and
        # containerd (with the shims and runc).
        out.update({f"engine_{k}": v for k, v in (self.engine_parts or {}).items()})
        return {k: v for k, v in out.items() if v is not None}


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


def _engine_part(comm: str) -> str | None:
    for part, (_, comms, prefixes) in ENGINE_PARTS.items():
        if comm in comms or comm.startswith(prefixes):
            return part
    return None


class CpuMeter:
    """Samples the three shares; `setup()` once before the first sample."""

    def __init__(self) -> None:
        self.engine_groups: dict[str, Path] | None = None
        self.containers_group: Path | None = None
        self.unavailable: str | None = None

    def setup(self) -> None:
        if not (CPUACCT / "cpuacct.usage").exists():
            self.unavailable = f"no cgroup v1 cpuacct hierarchy at {CPUACCT}"
            return
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
        engine = [(p, part) for p in pids if (part := _engine_part(_comm(p)))]
        if not any(_comm(p) == "dockerd" for p, _ in engine):
            self.unavailable = "no dockerd process on this machine (a remote engine?)"
            return
        groups = {part: CPUACCT / name for part, (name, _, _) in ENGINE_PARTS.items()}
        try:
            for group in groups.values():
                group.mkdir(exist_ok=True)
            for pid, part in engine:
                # Only processes outside a container's group: a container's own processes
                # are the work, not the engine.
                where = _cpuacct_path(pid) or "/"
                if not where.startswith("/docker/"):
                    try:
                        (groups[part] / "cgroup.procs").write_text(pid)
                    except ProcessLookupError:
                        pass  # a short-lived helper (runc) that ended since it was listed
        except OSError as e:
            self.unavailable = f"cannot group the engine's processes for accounting: {e}"
            return
        self.engine_groups = groups
        containers = CPUACCT / "docker"
        if (containers / "cpuacct.usage").exists():
            self.containers_group = containers

    def sample(self) -> CpuSample:
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        harness = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
        engine = self.engine_groups
        return CpuSample(
            engine_parts={k: _usage_s(g) for k, g in engine.items()} if engine else None,
            containers_s=_usage_s(self.containers_group) if self.containers_group else None,
            harness_s=harness,
            at=time.monotonic(),
        )
