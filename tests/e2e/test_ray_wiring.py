"""The Ray backend's wiring into the service, without a cluster: Ray stays optional (nothing
imports it unless `--ray-address` is given), the flags default to the settings, and per-node
placement and health reach `/metrics` and `GET /v1/rollouts/{id}`."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import typer
from fastapi.testclient import TestClient

from clients.commands import collect as collect_command
from clients.commands import serve as serve_command
from sandboxes.ray_cluster import RayCluster, RaySettings, SandboxNode
from sandboxes.ray_executor import ExecutorConfig
from sandboxes.task import Task
from service.app import create_app
from service.components import Components, build_components, settings_task_loader
from service.sample import SampleSpec
from service.settings import PolicySettings, SandboxSettings, ServiceSettings, Settings
from service.trajectory import Status, empty_trajectory

ROOT = Path(__file__).resolve().parents[2]
TASKS = str(ROOT / "examples" / "tasks")
KEY = "k" * 32


def test_nothing_imports_ray_without_a_ray_address() -> None:
    code = (
        "import sys\n"
        "import clients.cli, service.app, service.components, service.collect\n"
        "import sandboxes.ray_backend, sandboxes.ray_executor\n"
        "assert 'ray' not in sys.modules, sorted(m for m in sys.modules if m.startswith('ray'))\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


def test_a_ray_address_without_ray_installed_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sandboxes.ray_backend

    monkeypatch.setattr(sandboxes.ray_backend, "ray_available", lambda: False)
    settings = Settings(
        policy=PolicySettings(urls=["http://127.0.0.1:9"], max_retries=0),
        sandboxes=SandboxSettings(ray_address="auto"),
    )
    with pytest.raises(ValueError, match=r"rollouts\[ray\]"):
        asyncio.run(build_components(settings))


@pytest.mark.parametrize("name", ["serve", "collect"])
def test_the_ray_address_flag_defaults_to_the_setting(name: str) -> None:
    app = typer.Typer()
    {"serve": serve_command, "collect": collect_command}[name].register(app)
    app.command("noop")(lambda: None)  # typer needs two commands to keep names
    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    param = next(p for p in command.params if "--ray-address" in p.opts)
    assert param.default == SandboxSettings().ray_address is None
    assert param.envvar == "ROLLOUTS_RAY_ADDRESS"


class OneSampleRunner:
    async def run_group(
        self,
        task: Task,
        samples: list[SampleSpec],
        on_trajectory: Callable,
        on_episode_end=None,
        on_start=None,
    ) -> None:
        for s in samples:
            await on_trajectory(
                empty_trajectory(
                    s.trajectory_id,
                    s.rollout_id,
                    s.group_id,
                    task.id,
                    s.sample_index,
                    0,
                    Status.sandbox_error,
                )  # fmt: skip
            )


NODES = {
    "node-a": {"alive": True, "ready": True, "capacity": 4, "in_use": 3, "placed": 17,
               "failures": 0, "restarts": 0},
    "node-b": {"alive": False, "ready": False, "capacity": 2, "in_use": 0, "placed": 5,
               "failures": 2, "restarts": 1},
}  # fmt: skip


def test_placement_and_node_health_reach_metrics_and_the_rollout_status(tmp_path: Path) -> None:
    placements: dict[str, dict[str, int]] = {}

    async def factory(settings: Settings, _version: Callable[[], int]) -> Components:
        return Components(
            OneSampleRunner(),
            settings_task_loader(settings),
            sandbox_stats=lambda: {"nodes": NODES, "capacity": 4, "in_use": 3},
            placement=lambda rid: placements.get(rid, {}),
        )

    settings = Settings(
        service=ServiceSettings(
            data_dir=tmp_path, api_key=KEY, tasks_roots=[Path(TASKS)], allowed_hosts=["testserver"]
        )
    )
    headers = {"Authorization": f"Bearer {KEY}"}
    with TestClient(create_app(settings, factory), headers=headers) as c:
        metrics = c.get("/metrics").text
        assert 'rollouts_sandbox_node_capacity{node="node-a"} 4.0' in metrics
        assert 'rollouts_sandbox_node_in_use{node="node-a"} 3.0' in metrics
        assert 'rollouts_sandbox_node_alive{node="node-b"} 0.0' in metrics
        assert 'rollouts_sandbox_node_placed_total{node="node-a"} 17.0' in metrics
        assert 'rollouts_sandbox_node_failures_total{node="node-b"} 2.0' in metrics
        assert 'rollouts_sandbox_node_restarts_total{node="node-b"} 1.0' in metrics

        r = c.post("/v1/rollouts", json={"tasks": {"path": TASKS, "limit": 1}, "n_samples": 4})
        assert r.status_code == 202, r.text
        rid = r.json()["id"]
        placements[rid] = {"node-a": 2}
        assert c.get(f"/v1/rollouts/{rid}").json()["placement"] == {"node-a": 2}


def test_placement_prefers_a_node_with_the_image_then_the_least_loaded() -> None:
    cluster = RayCluster(RaySettings(), ExecutorConfig())
    warm = SandboxNode("warm", "", 4, None, in_use=2, ready=True, images={"rollouts-env:abc"})
    cold = SandboxNode("cold", "", 4, None, in_use=0, ready=True)
    cluster.nodes = {"warm": warm, "cold": cold}
    assert cluster.pick("rollouts-env:abc", 0.0) is warm  # has the image, though busier
    assert cluster.pick("rollouts-env:other", 0.0) is cold  # nobody has it: least loaded
    warm.in_use = 4
    assert cluster.pick("rollouts-env:abc", 0.0) is cold  # full: the next best
    cold.cooldown_until = 10.0  # its last create failed
    assert cluster.pick("rollouts-env:abc", 5.0) is None
    assert cluster.pick("rollouts-env:abc", 11.0) is cold
    cold.alive = False
    assert cluster.pick("rollouts-env:abc", 11.0) is None


def test_a_calibration_is_placed_when_every_slot_is_taken() -> None:
    """A task's samples wait for its calibration holding their slots (their kept workspaces
    wait for the oracle's grade): a calibration that waited for a free slot could wait on them
    until the placement timeout. Samples still wait for a free one."""

    async def main() -> None:
        cluster = RayCluster(RaySettings(), ExecutorConfig())
        cluster._started, cluster._changed = True, asyncio.Condition()  # no Ray needed
        full = SandboxNode("full", "", 2, None, in_use=2, ready=True)
        cluster.nodes = {"full": full}
        sample = asyncio.ensure_future(cluster.acquire("rollouts-env:abc"))
        calibration = await cluster.acquire("rollouts-env:abc", beyond_capacity=True)
        assert calibration is full and full.in_use == 3
        assert not sample.done()  # no slot freed: the sample waits
        cluster.release(full)
        cluster.release(full)  # one below capacity now
        assert await asyncio.wait_for(sample, 30) is full and full.in_use == 2

    asyncio.run(main())
