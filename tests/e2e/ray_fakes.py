"""Helpers of the Ray tests: a Ray cluster on this machine, a sandbox backend of fixed latency
that the executors run in place of Docker (imported on the Ray nodes, so it lives in a module
of its own), and a group runner that drives a backend through a sample's sandbox life cycle
without a policy."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandboxes.backend import ExecResult, SandboxBackend, Upload, Verdict, VerifyResult
from sandboxes.task import Task
from sandboxes.workspace_tar import build_tar
from service.sample import SampleSpec
from service.trajectory import (
    OnEpisodeEnd,
    OnStart,
    OnTrajectory,
    Status,
    empty_trajectory,
)

_EMPTY_TAR = build_tar({})
ROOT = Path(__file__).resolve().parents[2]

NODE_ARGS = {"num_cpus": 1, "object_store_memory": 80 << 20}
# Node deaths noticed within about two seconds instead of Ray's default half minute.
FAST_HEALTH = {
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 3,
}


_saved_env: dict[str, str | None] = {}


def start_cluster(sandbox_nodes: int, slots: int) -> tuple[Any, list[Any]]:
    """`ray.cluster_utils.Cluster`: a head without sandbox capacity and `sandbox_nodes` nodes
    offering `slots` rollouts_sandbox each; the driver joins it. The nodes' processes import
    this repository (the fake backends here too)."""
    import ray
    from ray.cluster_utils import Cluster

    _saved_env["PYTHONPATH"] = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
    )
    cluster = Cluster(
        initialize_head=True,
        head_node_args={**NODE_ARGS, "include_dashboard": False, "_system_config": FAST_HEALTH},
    )
    nodes = [add_sandbox_node(cluster, slots) for _ in range(sandbox_nodes)]
    ray.init(address=cluster.address, log_to_driver=False)
    return cluster, nodes


def add_sandbox_node(cluster: Any, slots: int) -> Any:
    """A node with `slots` sandbox slots (a `ray._private.node.Node`; `.node_id`). Main thread
    only: Ray installs signal handlers while it starts one."""
    return cluster.add_node(**NODE_ARGS, resources={"rollouts_sandbox": slots})


def stop_cluster(cluster: Any) -> None:
    import ray

    ray.shutdown()
    cluster.shutdown()
    saved = _saved_env.pop("PYTHONPATH", None)
    if saved is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = saved


@dataclass
class Latency:
    """Seconds each step takes: a trial (create, `turns` send_keys, archive, verify) sums up."""

    create_s: float = 0.2
    send_keys_s: float = 0.15
    archive_s: float = 0.05
    verify_s: float = 0.3


class SleepSandbox:
    def __init__(self, latency: Latency) -> None:
        self.id = f"sleep-{uuid.uuid4().hex[:12]}"
        self.latency = latency

    async def exec(
        self, command: str, timeout_s: float, upload: Upload | None = None
    ) -> ExecResult:
        await asyncio.sleep(self.latency.send_keys_s)
        return ExecResult(exit_code=0, output="")

    async def send_keys(self, keystrokes: str, wait_s: float) -> str:
        await asyncio.sleep(self.latency.send_keys_s)
        return f"root@sandbox:/app# {keystrokes}"

    async def get_workspace(self) -> bytes:
        await asyncio.sleep(self.latency.archive_s)
        return _EMPTY_TAR


class SleepBackend:
    """A `SandboxBackend` whose every step only sleeps: fixed per-trial latency, no engine."""

    def __init__(self, latency: Latency | None = None) -> None:
        self.latency = latency or Latency()

    async def create(self, task: Task, labels: dict[str, str]) -> SleepSandbox:
        await asyncio.sleep(self.latency.create_s)
        return SleepSandbox(self.latency)

    async def destroy(self, sandbox: SleepSandbox) -> None:
        return None

    async def verify(
        self, task: Task, workspace_tar: bytes, labels: dict[str, str], plain: bool = False
    ) -> VerifyResult:
        await asyncio.sleep(self.latency.verify_s)
        return VerifyResult(1.0, Verdict.graded, "1 passed")

    async def aclose(self) -> None:
        return None


@dataclass
class SleepFactory:
    """`ExecutorConfig.backend_factory`: a picklable callable building a SleepBackend."""

    latency: Latency = field(default_factory=Latency)

    def __call__(self, config: object, node_id: str) -> SleepBackend:
        return SleepBackend(self.latency)


class LifecycleRunner:
    """A `GroupRunner` doing what the episode does with sandboxes (create, `turns` keystrokes,
    workspace, destroy, verify), with no policy: the service's scheduler and store, and the
    backend's placement, are all that runs in this process."""

    def __init__(self, backend: SandboxBackend, turns: int = 2) -> None:
        self.backend = backend
        self.turns = turns
        self.first_start: float | None = None
        self.last_end: float | None = None

    async def run_group(
        self,
        task: Task,
        samples: list[SampleSpec],
        on_trajectory: OnTrajectory,
        on_episode_end: OnEpisodeEnd | None = None,
        on_start: OnStart | None = None,
    ) -> None:
        await asyncio.gather(*(self._one(task, s, on_trajectory, on_start) for s in samples))

    async def _one(
        self, task: Task, spec: SampleSpec, on_trajectory: OnTrajectory, on_start: OnStart | None
    ) -> None:
        if on_start is not None:
            await on_start(spec.trajectory_id)
        if self.first_start is None:
            self.first_start = time.monotonic()
        labels = {
            "rollouts.rollout_id": spec.rollout_id,
            "rollouts.trajectory_id": spec.trajectory_id,
        }
        status, reward, why = Status.ok, None, ""
        try:
            sandbox = await self.backend.create(task, labels)
            try:
                for turn in range(self.turns):
                    await sandbox.send_keys(f"echo {turn}\n", 1.0)
                workspace = await sandbox.get_workspace()
            finally:
                await self.backend.destroy(sandbox)
            result = await self.backend.verify(task, workspace, labels)
            reward = result.reward
            if result.verdict is not Verdict.graded:
                status, why = Status.sandbox_error, result.output
        except Exception as e:  # noqa: BLE001 - a fault from outside: masked
            status, why = Status.sandbox_error, str(e)
        t = empty_trajectory(
            spec.trajectory_id, spec.rollout_id, spec.group_id, task.id, spec.sample_index, 0,
            status, why,
        )  # fmt: skip
        if reward is not None:
            t = t.model_copy(update={"reward": reward})
        self.last_end = time.monotonic()
        await on_trajectory(t)
