"""Issue 16, task image builds without Docker: what the resolver asks the engine for (no network,
CPU and memory limits, a capped wall-clock timeout), FROM images that would be pulled refused,
and pruning by last use within a size budget. The engine-side behaviour (a build really stopped,
a fork bomb really bounded, its step containers removed) is tests/docker/test_build_controls.py."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import docker.errors
import pytest

from sandboxes.docker_adapter import build_step_containers
from sandboxes.images import (
    BASE_TAG,
    BuildSettings,
    ImageAliases,
    ImageBuildError,
    ImageResolver,
    PullRefused,
    prune_images,
    rewrite_from,
)
from sandboxes.task import EnvironmentConfig, Task, TaskConfig

LOCAL = {BASE_TAG, "rollouts-env:kept"}


class FakeApi:
    """The few Engine calls images.py makes, over an in-memory image table."""

    def __init__(self, images: list[dict[str, Any]], in_use: set[str] = frozenset()) -> None:
        self.table = {i["ref"]: i for i in images}
        self.in_use = in_use
        self.removed: list[str] = []
        self.tagged: list[str] = []

    def history(self, image_id: str) -> list[dict[str, Any]]:
        [i] = [i for i in self.table.values() if i["id"] == image_id]
        own = {"Id": image_id, "Size": i["size"] - i["shared"], "Tags": [i["ref"]]}
        return [own, {"Id": "base", "Size": i["shared"], "Tags": [BASE_TAG]}]

    def images(self, name: str) -> list[dict[str, Any]]:
        return [
            {"Id": i["id"], "RepoTags": [ref], "Size": i["size"], "Created": 0}
            for ref, i in self.table.items()
            if ref.startswith(name + ":")
        ]

    def inspect_image(self, image_id: str) -> dict[str, Any]:
        [i] = [i for i in self.table.values() if i["id"] == image_id]
        return {"Metadata": {"LastTagTime": i["used"]}}

    def remove_image(self, ref: str) -> None:
        if ref in self.in_use:
            raise docker.errors.APIError("conflict", SimpleNamespace(status_code=409))
        self.removed.append(ref)
        del self.table[ref]

    def tag(self, image: str, repository: str, tag: str) -> None:
        self.tagged.append(f"{repository}:{tag}")


class FakeAdapter:
    def __init__(self, api: FakeApi | None = None) -> None:
        self.client = SimpleNamespace(api=api or FakeApi([]))
        self.builds: list[dict[str, Any]] = []
        self.built: set[str] = set()

    async def call(self, fn: Any, *args: Any, **kw: Any) -> Any:
        return fn(*args, **kw)

    async def image_exists(self, ref: str) -> bool:
        return ref in LOCAL or ref in self.built

    async def build(self, **kw: Any) -> list[str]:
        self.builds.append(kw)
        self.built.add(kw["tag"])
        return []


def task(dockerfile: str, build_timeout_sec: float = 600.0) -> Task:
    env = replace(EnvironmentConfig(), build_timeout_sec=build_timeout_sec)
    return Task(
        id="hostile",
        path="hostile",
        instruction="x",
        config=replace(TaskConfig(), environment=env),
        environment_files={"Dockerfile": dockerfile.encode()},
        test_files={"test.sh": b"#!/bin/bash\n"},
    )


def test_builds_get_no_network_limits_and_a_capped_timeout() -> None:
    adapter = FakeAdapter()
    resolver = ImageResolver(adapter, ImageAliases(), build=BuildSettings(timeout_s=120))  # type: ignore[arg-type]
    asyncio.run(resolver.resolve(task("FROM ubuntu:24.04\nRUN sleep 100000\n", 1e9)))
    [kw] = adapter.builds
    assert kw["network_mode"] == "none"
    assert kw["memory_bytes"] == BuildSettings().memory_mb << 20 and kw["cpus"] == 2.0
    assert kw["timeout_s"] == 120  # the task's own 1e9 s is capped by the service
    assert f"FROM {BASE_TAG}" in kw["context_tar"].decode(errors="replace")
    online = ImageResolver(adapter, ImageAliases(), build=BuildSettings(network=True))  # type: ignore[arg-type]
    asyncio.run(online.resolve(task("FROM ubuntu:24.04\nRUN echo online\n")))
    assert adapter.builds[-1]["network_mode"] is None  # the engine's default network


@pytest.mark.parametrize(
    "dockerfile",
    [
        "FROM alpine:3.19\nRUN id\n",
        "ARG BASE=alpine\nFROM $BASE\n",
        "FROM ubuntu:24.04 AS a\nCOPY --from=busybox:latest /bin/sh /sh\n",
        "FROM registry.example/evil/image@sha256:00\n",
    ],
    ids=["unaliased", "arg", "copy-from", "registry"],
)
def test_a_from_that_would_be_pulled_is_refused(dockerfile: str) -> None:
    adapter = FakeAdapter()
    with pytest.raises(PullRefused, match="--allow-pull"):
        asyncio.run(rewrite_from(dockerfile, ImageAliases(), adapter))  # type: ignore[arg-type]
    resolver = ImageResolver(adapter, ImageAliases())  # type: ignore[arg-type]
    with pytest.raises(ImageBuildError, match="hostile.*not available locally"):
        asyncio.run(resolver.resolve(task(dockerfile)))
    assert adapter.builds == []  # refused before the engine was asked for anything
    allowed = asyncio.run(rewrite_from(dockerfile, ImageAliases(), adapter, allow_pull=True))  # type: ignore[arg-type]
    assert allowed.splitlines()[-1] == dockerfile.strip().splitlines()[-1]


def test_stages_scratch_and_local_images_need_no_pull() -> None:
    src = (
        "FROM ubuntu:24.04 AS build\nRUN true\nFROM scratch\nCOPY --from=build /x /x\n"
        f"COPY --from=0 /y /y\nFROM {BASE_TAG}\n"
    )
    out = asyncio.run(rewrite_from(src, ImageAliases(), FakeAdapter()))  # type: ignore[arg-type]
    assert out.splitlines()[0] == f"FROM {BASE_TAG} AS build"


def test_prune_removes_least_recently_used_first_within_the_budget() -> None:
    mb = 1 << 20

    def image(name: str, mb_size: int, used: str, shared_mb: int = 100) -> dict[str, Any]:
        return {
            "ref": name,
            "id": name,
            "size": mb_size * mb,
            "used": used,
            "shared": shared_mb * mb,
        }

    api = FakeApi(
        [
            image("rollouts-env:old", 300, "2026-01-01T00:00:00.123456789Z"),
            image("rollouts-env:busy", 300, "2026-01-02T00:00:00Z"),
            image("rollouts-env:mid", 300, "2026-01-03T00:00:00Z"),
            image("rollouts-env:new", 500, "2026-01-04T00:00:00Z", shared_mb=200),
            image("other:keep", 900, "2025-01-01T00:00:00Z"),
        ],
        in_use={"rollouts-env:busy"},
    )
    adapter = FakeAdapter(api)
    # Own sizes (without the base layers) 200 + 200 + 200 + 300 = 900 MiB; budget 500 MiB.
    would = asyncio.run(prune_images(adapter, budget_bytes=500 * mb, dry_run=True))  # type: ignore[arg-type]
    assert [i.ref for i in would] == ["rollouts-env:old", "rollouts-env:busy"]
    removed = asyncio.run(prune_images(adapter, budget_bytes=500 * mb))  # type: ignore[arg-type]
    # busy is kept (a container uses it), so the next least recently used goes instead.
    assert [i.ref for i in removed] == ["rollouts-env:old", "rollouts-env:mid"]
    assert "other:keep" in api.table and "rollouts-env:new" in api.table


def test_using_an_image_records_its_last_use() -> None:
    adapter = FakeAdapter()
    resolver = ImageResolver(adapter, ImageAliases(), build=BuildSettings(budget_bytes=None))  # type: ignore[arg-type]
    t = task("FROM ubuntu:24.04\n")
    tag = asyncio.run(resolver.resolve(t))
    asyncio.run(resolver.resolve(t))
    assert adapter.client.api.tagged == [tag]  # re-tagged once (then at most every 10 min)


def test_the_step_containers_a_build_names_are_read_from_its_output() -> None:
    a, b = "0123456789ab", "fedcba987654" + "0" * 52
    lines = [
        "Step 2/3 : RUN make",
        f" ---> Running in {a}",
        f"   ---> Running in {b[:12]}",  # not the builder's line
        f" ---> Running in {a.upper()}",
        f"Removing intermediate container {a}",
        f" ---> Running in {b}",
        f" ---> Running in {a}",  # each once
    ]
    # Candidates only: the build removes those carrying its token (a step prints what it likes).
    assert build_step_containers(lines) == [a, b]


def test_a_missing_base_image_is_built_once_on_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh machine: `rollouts serve` has built nothing yet, and the first samples of tasks
    FROM an aliased image (or naming the base image itself) all arrive at once. The base image
    is built once, before their builds need it, instead of every sample failing for want of it.
    (Building it for real is tests/docker's; here only who asks for it, and when.)"""
    built: list[str] = []

    class Fresh(FakeAdapter):
        async def image_exists(self, ref: str) -> bool:
            return ref in self.built or (ref in LOCAL and ref != BASE_TAG)

    adapter = Fresh()

    async def build_base_image(tag: str, mode: str, adapter: Fresh) -> None:
        await asyncio.sleep(0.01)  # the others ask meanwhile
        built.append(tag)
        adapter.built.add(tag)

    monkeypatch.setattr("sandboxes.images.build_base_image", build_base_image)
    resolver = ImageResolver(adapter, ImageAliases())  # type: ignore[arg-type]
    declared = replace(
        task("FROM ubuntu:24.04\n"),
        id="declared",
        config=replace(
            TaskConfig(), environment=replace(EnvironmentConfig(), docker_image=BASE_TAG)
        ),
        environment_files={},
    )

    async def first_samples() -> list[str]:
        tasks = [task("FROM ubuntu:24.04\nRUN true\n"), declared, task("FROM python:3.11\n")]
        return await asyncio.gather(*(resolver.resolve(t) for t in tasks))

    images = asyncio.run(first_samples())
    assert built == [BASE_TAG]
    assert images[1] == BASE_TAG
    assert [
        f"FROM {BASE_TAG}" in b["context_tar"].decode(errors="replace") for b in adapter.builds
    ] == [True, True]
    assert (
        asyncio.run(ImageResolver(Fresh(), ImageAliases()).resolve(task("FROM alpine\n"), BASE_TAG))
        == BASE_TAG
    )  # type: ignore[arg-type]
