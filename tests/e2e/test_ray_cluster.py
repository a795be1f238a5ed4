"""The Ray sandbox backend over real Docker, on a Ray cluster of one machine: a head and three
sandbox nodes (`ray.cluster_utils.Cluster`), each with its own node identity, all sharing this
machine's Docker Engine (each executor still owns only its own node's containers).

- An executor killed mid-sample: the sample's next call fails masked (not agent-caused), Ray
  restarts the executor, and its reaper removes the container the dead one left.
- `collect` of 4 tasks x 8 through the service's own components with `ray_address` set, the
  stand-in policy and real sandboxes: samples spread over all three nodes; one node is removed
  mid-run (its in-flight samples end masked and run again on the other nodes: every group
  arrives with 8 graded samples, nothing hangs), a node added mid-run receives work; every
  sample is accounted for exactly once, and no container is left. The stand-in holds every
  generation until the test has removed a busy node and a new one is up (else the run could
  end first on a fast machine), then releases them. A task's calibration never waits for a
  slot its samples hold while they wait for it (a deadlock until the placement timeout).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import httpx
import pyarrow.parquet as pq
import pytest
import ray
from ray.cluster_utils import Cluster

from clients.commands.policy_stub import stand_in_policy
from sandboxes.backend import AgentCausedSandboxFault
from sandboxes.docker_backend import BackendSettings
from sandboxes.images import ensure_base_image
from sandboxes.pool import PoolSettings
from sandboxes.ray_backend import RayBackend
from sandboxes.ray_cluster import RaySettings, SandboxLost
from sandboxes.ray_executor import LABEL_NODE
from sandboxes.tasks import load_tasks
from service.collect import collect
from service.components import build_components
from service.settings import PolicySettings, SandboxSettings, ServiceSettings, Settings
from service.store import Store
from service.trajectory import Status, from_arrow
from service.wire import RolloutRequest, TasksSpec
from tests.e2e.ray_fakes import add_sandbox_node, start_cluster, stop_cluster

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TASKS = str(ROOT / "examples" / "tasks")
SLOTS = 2  # rollouts_sandbox per node: this machine has two cores


@pytest.fixture(scope="module")
def three_nodes() -> Iterator[tuple[Cluster, list]]:
    asyncio.run(ensure_base_image())
    cluster, nodes = start_cluster(3, SLOTS)
    try:
        yield cluster, nodes
    finally:
        stop_cluster(cluster)


async def until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        await asyncio.sleep(0.2)


def containers_of(node_ids: list[str]) -> list[str]:
    client = docker.from_env()
    try:
        return [
            c.id[:12]
            for nid in node_ids
            for c in client.containers.list(all=True, filters={"label": f"{LABEL_NODE}={nid}"})
        ]
    finally:
        client.close()


async def test_a_crashed_executor_is_restarted_and_reaps_what_it_left(three_nodes) -> None:
    cluster, nodes = three_nodes
    task = load_tasks(TASKS, limit=1)[0]
    backend = RayBackend(
        RaySettings(poll_s=0.5),
        BackendSettings(pool=PoolSettings(warm_per_key=0)),
        reap_interval_s=5.0,
    )
    async with backend:
        await until(
            lambda: sum(n.ready for n in backend.cluster.nodes.values()) == 3, 120, "3 nodes"
        )
        sandbox = await backend.create(task, {"rollouts.rollout_id": "crash-test"})
        assert (await sandbox.exec("echo hi", 30)).output.strip() == "hi"
        node = backend.cluster.nodes[sandbox.node_id]
        assert containers_of([node.node_id]) == [sandbox.id[:12]]

        ray.kill(node.actor, no_restart=False)  # the executor's process dies; Ray restarts it
        with pytest.raises(SandboxLost) as lost:
            await sandbox.exec("echo hi", 30)
        assert not isinstance(lost.value, AgentCausedSandboxFault)  # masked, never graded
        await until(lambda: node.restarts >= 1, 60, "the executor's restart")
        # The restarted executor's reaper removes the container its predecessor left.
        await until(lambda: not containers_of([node.node_id]), 60, "the orphan to be reaped")
        await backend.destroy(sandbox)
        # It takes new sandboxes again.
        again = await backend.create(task, {"rollouts.rollout_id": "crash-test"})
        assert (await again.exec("echo ok", 30)).output.strip() == "ok"
        await backend.destroy(again)
    assert not containers_of([n.node_id for n in nodes])


def test_collect_spreads_survives_a_removed_node_and_uses_a_new_one(
    three_nodes, tmp_path: Path
) -> None:
    """The service (collect) runs on an event loop in a thread of its own; the main thread
    changes the cluster meanwhile (Ray adds nodes only from the main thread)."""
    cluster, nodes = three_nodes
    victim = nodes[1]
    vid = victim.node_id
    data_dir, out_file = tmp_path / "store", tmp_path / "out.parquet"
    n_tasks, n_samples = 4, 8
    finished: list[dict] = []
    churn_log: dict[str, object] = {}
    service: dict[str, object] = {}

    async def run_service(policy_url: str) -> None:
        settings = Settings(
            service=ServiceSettings(
                data_dir=data_dir, max_concurrent_samples=3 * SLOTS, tasks_roots=[Path(TASKS)]
            ),
            policy=PolicySettings(urls=[policy_url]),
            sandboxes=SandboxSettings(ray_address=cluster.address, warm_per_key=0),
        )
        components = await build_components(settings, policy_must_answer=True)
        backend = components.runner.sandboxes
        assert isinstance(backend, RayBackend)
        try:
            await until(lambda: backend.cluster.capacity() == 3 * SLOTS, 120, "three sandbox nodes")
            service["backend"] = backend
            tasks = list(components.load_tasks(TASKS, None, n_tasks))
            request = RolloutRequest(tasks=TasksSpec(path=TASKS, limit=n_tasks), n_samples=8)
            summary = await collect(
                TASKS,
                tasks,
                components.runner,
                data_dir,
                out_file,
                request,
                concurrency=3 * SLOTS,
                ready=components.ready,
                task_loader=components.load_tasks,
                on_trajectory=finished.append,
            )
            service["placement"] = components.placement(summary.rollout_id)
            service["stats"] = components.sandbox_stats()
            service["node_of"] = dict(backend.node_of)
        finally:
            await components.aclose()

    def in_thread(policy_url: str) -> None:
        try:
            asyncio.run(run_service(policy_url))
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            service["error"] = e

    def wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if "error" in service:
                raise service["error"]  # type: ignore[misc]
            assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f} s: {what}"
            time.sleep(0.1)

    t_start = time.monotonic()
    with stand_in_policy(TASKS, p_correct=0.5, seed=7) as stand_in:
        # Until released, generations stop before their first token: no sample finishes, and
        # none leaves a node, before the test has changed the cluster.
        httpx.post(f"{stand_in.url}/standin/hold", params={"after_tokens": 0}, timeout=30)
        thread = threading.Thread(target=in_thread, args=(stand_in.url,), daemon=True)
        thread.start()
        released = False
        try:
            wait(lambda: "backend" in service, 180, "the service to start")
            backend: RayBackend = service["backend"]  # type: ignore[assignment]
            # Remove the victim while it runs samples: its slots taken, a sample among them
            # (the task's calibration may hold the other).
            wait(
                lambda: (
                    backend.cluster.nodes[vid].in_use >= SLOTS and vid in backend.node_of.values()
                ),
                300,
                "victim busy",
            )
            churn_log["finished_at_removal"] = len(finished)
            cluster.remove_node(victim, allow_graceful=False)
            t0 = time.monotonic()
            wait(lambda: not backend.cluster.nodes[vid].alive, 60, "the victim's death noticed")
            churn_log["death_noticed_s"] = round(time.monotonic() - t0, 1)
            # A node that joins mid-run gets an executor and work, with no restart. Its
            # executor is up before the held samples go on: their next sandbox starts (the
            # victim's run again among them) find its slots the only free ones.
            joined = add_sandbox_node(cluster, SLOTS)
            t0 = time.monotonic()
            wait(
                lambda: (
                    joined.node_id in backend.cluster.nodes
                    and backend.cluster.nodes[joined.node_id].ready
                ),
                300,
                "the joined node's executor",
            )
            httpx.post(f"{stand_in.url}/standin/release", timeout=30).raise_for_status()
            released = True
            wait(lambda: backend.cluster.nodes[joined.node_id].placed, 300, "work on it")
            churn_log["join_to_first_sample_s"] = round(time.monotonic() - t0, 1)
            churn_log["finished_at_join"] = len(finished)
        finally:
            if not released:
                httpx.post(f"{stand_in.url}/standin/release", timeout=30)
            thread.join(timeout=900)
    assert not thread.is_alive(), "the collect hung"
    if "error" in service:
        raise service["error"]  # type: ignore[misc]
    wall = time.monotonic() - t_start
    placement: dict[str, int] = service["placement"]  # type: ignore[assignment]
    stats: dict = service["stats"]  # type: ignore[assignment]
    node_of: dict[str, str] = service["node_of"]  # type: ignore[assignment]

    trajs = from_arrow(pq.read_table(out_file))
    ids = [t.trajectory_id for t in trajs]
    assert len(trajs) == n_tasks * n_samples and len(set(ids)) == len(ids)  # each exactly once
    # Every sample graded: the removed node's samples in flight ran again on the others.
    statuses = Counter(t.status.value for t in trajs)
    assert all(t.status is Status.ok for t in trajs), statuses
    again = [t for t in trajs if t.attempts > 1]
    assert again, "the removed node held samples in flight: they should have run again"
    for t in again:  # their last run was placed on a node that is still there
        assert node_of.get(t.trajectory_id) not in (None, victim.node_id), t.trajectory_id
    # Spread over all three nodes, and the node that joined mid-run took work.
    original = [n.node_id for n in nodes]
    assert all(placement.get(nid, 0) >= 1 for nid in original), placement
    assert placement.get(joined.node_id, 0) >= 1, placement
    assert stats["nodes"][vid]["alive"] is False
    assert stats["in_use"] == 0, stats  # every slot came back

    # Nothing twice after acknowledgement: every group leased once, then nothing more.
    asyncio.run(lease_ack_all(data_dir, n_tasks, n_samples))
    # Every graded sample's final workspace is kept in the service's store (its files fetched
    # from the node that ran it), and rebuilds into the very tar that node verified.
    asyncio.run(check_kept_workspaces(data_dir, [t.trajectory_id for t in trajs if t.gradings]))

    # No container left on any node, the removed one's included.
    wait(lambda: not containers_of([*original, joined.node_id]), 30, "no leftovers")
    churn_log["victim_samples"] = placement.get(vid, 0)
    print(
        f"\nray collect: {len(trajs)} samples in {wall:.0f} s; per node "
        f"{ {k[:8]: v for k, v in placement.items()} }; statuses {dict(statuses)}; "
        f"run again {len(again)}; churn {churn_log}"
    )


async def check_kept_workspaces(data_dir: Path, graded: list[str]) -> None:
    store = Store(data_dir)
    store.open()
    try:
        assert graded
        for trajectory_id in graded:
            kept = await store.load_workspace(trajectory_id)  # checked against its digest
            assert kept is not None and kept.size > 0, trajectory_id
    finally:
        store.close()


async def lease_ack_all(data_dir: Path, groups: int, samples: int) -> None:
    store = Store(data_dir)
    store.open()
    try:
        lease = dict(rollout_id=None, lease_s=60.0, policy_version=0, max_staleness=None)
        first = await store.lease(max_groups=100, stale_policy="drop", **lease)
        assert len(first.groups) == groups
        assert sum(len(g.rows) for g in first.groups) == groups * samples
        await store.ack(first.batch_id)
        again = await store.lease(max_groups=100, stale_policy="drop", **lease)
        assert again.batch_id is None and not again.groups
    finally:
        store.close()
