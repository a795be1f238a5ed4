"""Clean-up: the reaper removes containers of dead owners; the pool leaves nothing behind."""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid

import pytest

from sandboxes.images import BASE_TAG
from sandboxes.isolation import LABEL_MANAGED, LABEL_OWNER, owner_label
from sandboxes.reaper import is_orphan, reap_orphans

pytestmark = pytest.mark.docker


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_is_orphan():
    host = socket.gethostname()
    me = owner_label()
    pid, start = me.split(":")[1:]
    assert is_orphan(f"{host}:{_dead_pid()}:123")
    assert not is_orphan(me)
    assert is_orphan(f"{host}:{pid}:{int(start) + 1}")  # pid reused by another process
    assert not is_orphan(f"other-host:{_dead_pid()}:1", running_containers=set())
    # an owner inside a container (hostname = container id) that no longer runs
    assert is_orphan("0123456789ab:1:55", running_containers={"ba9876543210"})
    assert not is_orphan("0123456789ab:1:55", running_containers={"0123456789ab"})
    assert not is_orphan(None) and not is_orphan("garbage") and not is_orphan(f"{host}:1")


async def test_reaper_removes_dead_owner_containers(adapter):
    mark = {"rollouts.test_reaper": uuid.uuid4().hex}
    host = socket.gethostname()
    owners = {"dead": f"{host}:{_dead_pid()}:1", "alive": owner_label()}
    ids = {}
    try:
        for name, owner in owners.items():
            args = {
                "image": BASE_TAG,
                "command": ["sleep", "infinity"],
                "labels": {LABEL_MANAGED: "true", LABEL_OWNER: owner, **mark},
                "host_config": {"network_mode": "none", "init": True},
            }
            ids[name] = await adapter.create_container(args)
        removed = await reap_orphans(adapter=adapter, extra_labels=mark)
        assert removed == 1
        left = {c["Id"] for c in await adapter.list_containers(mark)}
        assert left == {ids["alive"]}
    finally:
        for cid in ids.values():
            await adapter.remove(cid)
    assert await adapter.list_containers(mark) == []


async def test_warm_pool_hands_out_prestarted_containers(pooled_backend, example_task, run_labels):
    first = await pooled_backend.create(example_task, run_labels)
    await pooled_backend.destroy(first)
    # The refill started by the first create is awaited here, then handed out.
    for _ in range(100):
        if any(pooled_backend.pool._idle.values()):
            break
        await __import__("asyncio").sleep(0.1)
    idle = [cid for ids in pooled_backend.pool._idle.values() for cid in ids]
    assert len(idle) == 1
    second = await pooled_backend.create(example_task, run_labels)
    assert second.id == idle[0]
    r = await second.exec("echo warm", 10)
    assert r.output == "warm\n"
    await pooled_backend.destroy(second)


def _slow_tests(task, seconds: float):
    """`task` with tests that take `seconds`, then pass."""
    from dataclasses import replace

    test_sh = f"sleep {seconds}; echo 1 > /logs/verifier/reward.txt\n".encode()
    return replace(task, test_files={**task.test_files, "test.sh": test_sh})


async def _containers(backend) -> set[str]:
    from sandboxes.isolation import LABEL_BACKEND

    return {
        c["Id"] for c in await backend.adapter.list_containers({LABEL_BACKEND: backend.backend_id})
    }


async def _verify_while_creating(backend, task, labels, watch_s: float):
    """Starts a verification, then an agent sandbox (whose create starts refills), and returns
    the containers seen each 0.2 s for `watch_s` beside the verification's result."""
    import asyncio

    from sandboxes.workspace_tar import build_tar

    verification = asyncio.ensure_future(backend.verify(task, build_tar({}), labels))
    for _ in range(200):  # until the verifier holds its container
        if backend.pool._verifying or verification.done():
            break
        await asyncio.sleep(0.05)
    assert not verification.done(), verification.result()
    sandbox = await backend.create(task, labels)
    seen = []
    for _ in range(int(watch_s / 0.2)):
        seen.append(await _containers(backend))
        await asyncio.sleep(0.2)
    result = await verification
    return sandbox, seen, result


async def test_refills_wait_for_running_verifications(example_task, run_labels):
    """A refill is engine work for later; a verification is what a sample's reward waits for:
    while one runs, no refill starts (the agent sandbox is created on demand), and when it
    ends the pool fills up again."""
    import asyncio

    from sandboxes.docker_backend import BackendSettings, DockerBackend
    from sandboxes.pool import PoolSettings

    task = _slow_tests(example_task, 4)
    pool = PoolSettings(warm_per_key=1, refill_defer_s=60)
    async with DockerBackend(BackendSettings(pool=pool, reap_at_start=False)) as backend:
        sandbox, seen, result = await _verify_while_creating(backend, task, run_labels, 2.5)
        assert result.reward == 1.0, result.output
        # The verifier's container and the agent's, nothing else while the tests ran.
        assert all(ids == seen[0] and len(ids) == 2 for ids in seen), seen
        for _ in range(100):  # the verification is over: both keys are refilled
            if sum(map(len, backend.pool._idle.values())) == 2:
                break
            await asyncio.sleep(0.1)
        assert sum(map(len, backend.pool._idle.values())) == 2
        await backend.destroy(sandbox)


async def test_a_refill_waits_for_verifications_only_so_long(example_task, run_labels):
    from sandboxes.docker_backend import BackendSettings, DockerBackend
    from sandboxes.pool import PoolSettings

    task = _slow_tests(example_task, 8)
    pool = PoolSettings(warm_per_key=1, refill_defer_s=1)
    async with DockerBackend(BackendSettings(pool=pool, reap_at_start=False)) as backend:
        sandbox, seen, result = await _verify_while_creating(backend, task, run_labels, 5)
        assert result.reward == 1.0, result.output
        # Refills (one per key) started after refill_defer_s, with the tests still running.
        assert len(seen[-1]) == 4, seen
        await backend.destroy(sandbox)
