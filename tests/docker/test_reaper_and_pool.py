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
