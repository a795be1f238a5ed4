"""Image resolution: apt mirror discovery, FROM aliases, the env-hash build cache."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from sandboxes.images import (
    BASE_TAG,
    ImageAliases,
    ImageBuildError,
    ImageError,
    ImageResolver,
    env_tag,
    find_debian_mirror,
    load_aliases,
    rewrite_from,
)


def test_find_mirror_deb822_and_one_line(tmp_path):
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "a.sources").write_text(
        "Types: deb\nURIs: http://sec.example/debian-security\nSuites: bookworm-security\n"
        "Components: main\n\nTypes: deb\nURIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n"
    )
    (d / "b.list.disabled").write_text("deb http://wrong.example/debian bookworm main\n")
    assert find_debian_mirror([d]) == "http://mirror.example/debian"
    one = tmp_path / "sources.list"
    one.write_text("# c\ndeb [arch=amd64] http://one.example/debian bookworm main contrib\n")
    assert find_debian_mirror([one]) == "http://one.example/debian"
    with pytest.raises(ImageError):
        find_debian_mirror([one], suite="trixie")


def test_alias_table_from_env_and_errors(tmp_path, monkeypatch):
    assert ImageAliases().lookup("ubuntu:24.04") == BASE_TAG
    assert ImageAliases().lookup("python:3.11-slim") == BASE_TAG
    assert ImageAliases().lookup("alpine:3") is None
    f = tmp_path / "aliases.toml"
    f.write_text('[aliases]\n"alpine:*" = "my-alpine:1"\n')
    monkeypatch.setenv("ROLLOUTS_IMAGE_ALIASES", str(f))
    assert load_aliases().lookup("alpine:3.19") == "my-alpine:1"
    with pytest.raises(ImageError, match="ROLLOUTS_IMAGE_ALIASES"):
        load_aliases('{"aliases": 3}')


@pytest.mark.docker
async def test_rewrite_from_keeps_stages_and_local_images(adapter):
    src = (
        "FROM --platform=linux/amd64 ubuntu:24.04 AS build\nRUN true\n"
        f"FROM build\nFROM {BASE_TAG}\nfrom python:3.12 as py\n"
    )
    out = await rewrite_from(src, ImageAliases(), adapter)
    assert out.splitlines() == [
        f"FROM --platform=linux/amd64 {BASE_TAG} AS build",
        "RUN true",
        "FROM build",
        f"FROM {BASE_TAG}",
        f"from {BASE_TAG} as py",
    ]


@pytest.mark.docker
async def test_resolve_builds_once_per_env_hash(adapter, example_task):
    resolver = ImageResolver(adapter)
    tags = await asyncio.gather(*(resolver.resolve(example_task) for _ in range(4)))
    assert set(tags) == {env_tag(example_task.env_hash)}
    assert await adapter.image_exists(tags[0])
    assert await resolver.resolve(example_task, override=BASE_TAG) == BASE_TAG
    with pytest.raises(ImageError, match="--image"):
        await resolver.resolve(example_task, override="no-such-image:0")


@pytest.mark.docker
async def test_build_failure_names_task_and_image_flag(adapter, example_task):
    broken = replace(
        example_task,
        id="broken-task",
        environment_files={"Dockerfile": b"FROM ubuntu:24.04\nRUN exit 7\n"},
    )
    with pytest.raises(ImageBuildError, match="broken-task") as e:
        await ImageResolver(adapter).resolve(broken)
    assert "--image" in str(e.value)
