"""Issue 16 against the real engine: a hostile task Dockerfile. Its RUN steps have no network,
run under the memory and CPU limits, and are stopped at the wall-clock timeout even while they
keep printing (before, the "timeout" was a socket read timeout, builds had the default network
and no limits); a fork bomb stays bounded and is stopped; and task images are pruned by last use.

Each build here is bounded to seconds; the fork bomb runs under a 128 MiB limit (a few thousand
processes at most) for at most 8 s. However a build ends, it removes its step containers itself
before it returns: nothing of a stopped build is left for the engine to finish later."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from dataclasses import replace
from typing import Any

import docker.errors
import pytest

from sandboxes.docker_adapter import DockerAdapter, build_step_containers
from sandboxes.images import (
    BASE_TAG,
    BuildSettings,
    ImageAliases,
    ImageBuildError,
    ImageResolver,
    ensure_base_image,
    prune_images,
)
from sandboxes.task import EnvironmentConfig, Task, TaskConfig
from sandboxes.workspace_tar import build_tar

pytestmark = pytest.mark.docker
MIB = 1 << 20


def hostile(dockerfile: str) -> Task:
    env = replace(EnvironmentConfig(), build_timeout_sec=3600.0)  # the task asks for an hour
    return Task(
        id=f"hostile-{uuid.uuid4().hex[:8]}",  # a fresh env hash: never a cached image
        path="hostile",
        instruction="x",
        config=replace(TaskConfig(), environment=env),
        environment_files={"Dockerfile": dockerfile.encode(), "nonce": uuid.uuid4().bytes},
        test_files={"test.sh": b"#!/bin/bash\n"},
    )


async def containers_running(adapter: DockerAdapter, marker: str) -> list[dict[str, Any]]:
    found = await adapter.call(adapter.client.api.containers, all=True)
    return [c for c in found if marker in c.get("Command", "")]


def host_processes() -> int:
    return sum(1 for name in os.listdir("/proc") if name.isdigit())


def processes_of(containers: list[str]) -> list[int]:
    """The host's processes in the cgroups of these containers (IDs or 12-digit prefixes)."""
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cgroup") as f:
                cgroups = f.read()
        except (OSError, ValueError):  # not a process, or gone meanwhile
            continue
        if any(c in cgroups for c in containers):
            found.append(int(name))
    return found


@pytest.fixture(autouse=True)
async def base_image(adapter: DockerAdapter) -> None:
    await ensure_base_image(BASE_TAG, adapter=adapter)


async def test_run_steps_have_no_network(adapter: DockerAdapter) -> None:
    marker = f"net-probe-{uuid.uuid4().hex[:8]}"
    # Fails when the step has any interface but loopback: it could reach the network.
    dockerfile = (
        f"FROM {BASE_TAG}\nRUN echo {marker}; ls /sys/class/net; "
        "test -z \"$(ls /sys/class/net | grep -v '^lo$')\"\n"
    )
    offline = ImageResolver(adapter, ImageAliases(), build=BuildSettings(budget_bytes=None))
    tag = await offline.resolve(hostile(dockerfile))  # builds: loopback only
    await adapter.call(adapter.client.api.remove_image, tag)
    online = ImageResolver(
        adapter, ImageAliases(), build=BuildSettings(network=True, budget_bytes=None)
    )
    with pytest.raises(ImageBuildError, match="returned a non-zero code"):
        await online.resolve(hostile(dockerfile))  # --build-network: an interface appears


async def test_a_long_run_step_is_stopped_at_the_wall_clock(adapter: DockerAdapter) -> None:
    marker = f"tick-{uuid.uuid4().hex[:8]}"
    # It prints every second, so a read timeout never fires: only a wall clock stops it.
    dockerfile = f"FROM {BASE_TAG}\nRUN while true; do echo {marker}; sleep 1; done\n"
    settings = BuildSettings(timeout_s=8, memory_mb=256, cpus=0.5, budget_bytes=None)
    resolver = ImageResolver(adapter, ImageAliases(), build=settings)
    build = asyncio.ensure_future(resolver.resolve(hostile(dockerfile)))
    try:
        host_config: dict[str, Any] = {}
        while not build.done() and not host_config:
            for c in await containers_running(adapter, marker):
                info = await adapter.inspect_container(c["Id"])
                host_config = info["HostConfig"]
            await asyncio.sleep(0.2)
        assert host_config, "the build step's container was never seen"
        assert host_config["NetworkMode"] == "none"
        assert host_config["Memory"] == host_config["MemorySwap"] == 256 * MIB  # no swap
        assert (host_config["CpuPeriod"], host_config["CpuQuota"]) == (100_000, 50_000)
        # The build's token, by which the build finds its step containers to remove them.
        assert [h for h in host_config["ExtraHosts"] if h.startswith("rollouts-build-")]
        # Its own wall-clock timeout stopped it (the message says so); this wait only bounds a
        # hang.
        with pytest.raises(ImageBuildError, match="did not finish within 8 s"):
            await asyncio.wait_for(asyncio.shield(build), 300)
    finally:
        if not build.done():
            build.cancel()
            await asyncio.gather(build, return_exceptions=True)
    for _ in range(100):  # the engine removes the step's container once the build is cancelled
        if not await containers_running(adapter, marker):
            break
        await asyncio.sleep(0.2)
    assert await containers_running(adapter, marker) == []


async def test_a_fork_bomb_is_bounded_and_stopped(adapter: DockerAdapter) -> None:
    marker = f"bomb-{uuid.uuid4().hex[:8]}"
    dockerfile = f"FROM {BASE_TAG}\nRUN echo {marker}; b() {{ b | b & }}; b; sleep 600\n"
    settings = BuildSettings(timeout_s=8, memory_mb=128, cpus=1, budget_bytes=None)
    resolver = ImageResolver(adapter, ImageAliases(), build=settings)
    before = host_processes()
    build = asyncio.ensure_future(resolver.resolve(hostile(dockerfile)))
    peak = before
    try:
        while not build.done():
            peak = max(peak, host_processes())
            if peak > before + 12_000:  # never let it near pid_max on a shared machine
                break
            await asyncio.sleep(0.1)
        assert peak < before + 12_000, f"{peak - before} processes: not bounded"
        # Either stop will do: the memory limit kills the step (it fails: 137, or whatever its
        # shell returns once it cannot fork), or the build's wall clock stops it. The wait is
        # only a did-not-hang bound (it includes the build's removal of its step container).
        with pytest.raises(ImageBuildError, match="did not finish within 8 s|non-zero code") as e:
            await asyncio.wait_for(asyncio.shield(build), 300)
    finally:
        if not build.done():
            build.cancel()
            await asyncio.gather(build, return_exceptions=True)
    steps = build_step_containers(e.value.__cause__.log)  # type: ignore[union-attr]
    assert steps, "the step never ran"
    # The build removed its step container itself before it raised (however it stopped) ...
    left_at_raise = await containers_running(adapter, marker)
    # ... and nothing of it comes back: every container and every process of the build gone.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not await containers_running(adapter, marker) and not processes_of(steps):
            break
        await asyncio.sleep(0.5)
    assert [c["Id"][:12] for c in left_at_raise] == []
    assert await containers_running(adapter, marker) == []
    assert processes_of(steps) == []
    assert await adapter.call(adapter.client.api.ping)  # and the engine still answers


async def test_a_cancelled_build_of_a_silent_step_stops_at_once(adapter: DockerAdapter) -> None:
    marker = f"quiet-{uuid.uuid4().hex[:8]}"
    # It prints nothing after the marker: the build's connection must be shut down, not just
    # closed (a reader waiting for output kept it open until the read timeout: 31 min here).
    dockerfile = f"FROM {BASE_TAG}\nRUN echo {marker}; exec sleep 600\n"
    resolver = ImageResolver(adapter, ImageAliases(), build=BuildSettings(budget_bytes=None))
    build = asyncio.ensure_future(resolver.resolve(hostile(dockerfile)))
    try:
        deadline = time.monotonic() + 120
        while not await containers_running(adapter, marker) and time.monotonic() < deadline:
            assert not build.done(), build
            await asyncio.sleep(0.2)
        assert await containers_running(adapter, marker), "the build step never started"
        await asyncio.sleep(2)  # its output read: the build's reader now waits on a quiet step
    finally:
        build.cancel()
        await asyncio.wait_for(asyncio.gather(build, return_exceptions=True), 30)
    deadline = time.monotonic() + 60  # the engine's removal, and the build's own after it
    while await containers_running(adapter, marker) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert await containers_running(adapter, marker) == []


async def test_a_builds_leftover_step_containers_are_removed_and_only_those(
    adapter: DockerAdapter,
) -> None:
    # What the build does once it ends, with its engine-side removal left out: one container
    # carries the build's token (a step container the engine did not remove), the other is
    # named by a forged line of a step's output and must be left alone.
    token = f"rollouts-build-{uuid.uuid4().hex}"
    api = adapter.client.api
    created = []
    try:
        for extra_hosts in ([f"{token}:127.0.0.1"], []):
            host_config = api.create_host_config(network_mode="none", extra_hosts=extra_hosts)
            c = await adapter.call(
                api.create_container, BASE_TAG, ["sleep", "600"], host_config=host_config,
                labels={"rollouts.test": "build-cleanup"},
            )  # fmt: skip
            created.append(c["Id"])
            await adapter.start(c["Id"])
        ours, other = created
        lines = [f" ---> Running in {ours[:12]}", "output", f" ---> Running in {other[:12]}"]
        assert build_step_containers(lines) == [ours[:12], other[:12]]
        assert await adapter.remove_build_containers(lines, token) == []
        with pytest.raises(docker.errors.NotFound):
            await adapter.inspect_container(ours)
        assert (await adapter.inspect_container(other))["State"]["Running"]
    finally:
        for cid in created:
            await adapter.remove(cid)


async def test_task_images_are_pruned_by_last_use(adapter: DockerAdapter) -> None:
    repository = f"rollouts-prunetest-{uuid.uuid4().hex[:8]}"  # never touches real env images
    tags = [f"{repository}:{i}" for i in range(3)]
    try:
        for tag in tags:  # a 1 MB layer of its own each (COPY: no step container, quick)
            context = {"Dockerfile": f"FROM {BASE_TAG}\nCOPY blob /blob\n".encode()}
            context["blob"] = os.urandom(1_000_000)
            await adapter.build(
                context_tar=build_tar(context), tag=tag, timeout_s=120, network_mode="none",
                labels={"rollouts.managed": "true"},
            )  # fmt: skip
            await asyncio.sleep(1.1)  # distinct LastTagTime seconds
        await asyncio.sleep(1.1)
        await adapter.call(adapter.client.api.tag, tags[0], repository, "0")  # 0: used last
        removed = await prune_images(adapter, budget_bytes=1_500_000, repository=repository)
        assert [i.ref for i in removed] == [tags[1], tags[2]]
        left = await adapter.call(adapter.client.api.images, name=repository)
        assert [t for i in left for t in i["RepoTags"]] == [tags[0]]
    finally:
        for tag in tags:
            try:
                await adapter.call(adapter.client.api.remove_image, tag)
            except Exception:  # noqa: BLE001 - pruned already
                pass
