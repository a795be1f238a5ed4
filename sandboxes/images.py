"""Sandbox images: the offline base image, FROM aliases, and per-task environment builds.

No registry is reachable in the places this runs, so the base image is debootstrapped from the
Debian mirror the machine's apt already uses and `docker import`ed. Task Dockerfiles whose FROM
image cannot be pulled (`ubuntu:24.04`, `python:3.11`, ...) are rewritten to the local base
through an alias table. Built environments are cached by the task's `env_hash`, with one build
per hash even when many coroutines ask at once.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import logging
import os
import re
import shutil
import tempfile
import tomllib
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from sandboxes.docker_adapter import BuildFailed, DockerAdapter, default_adapter
from sandboxes.isolation import LABEL_MANAGED
from sandboxes.task import Task
from sandboxes.workspace_tar import build_tar

log = logging.getLogger(__name__)

BASE_TAG = "rollouts-base:bookworm"
BASE_SUITE = "bookworm"
BASE_PACKAGES = ["bash", "coreutils", "python3", "python3-pytest", "tmux", "procps"]
ROOTFS_DIR = Path(__file__).parent / "rootfs"
APT_SOURCES = [Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d")]
ALIASES_ENV = "ROLLOUTS_IMAGE_ALIASES"

BuildMode = Literal["auto", "debootstrap", "dockerfile"]


class ImageError(RuntimeError):
    pass


class ImageBuildError(ImageError):
    pass


# ---- the Debian mirror ----------------------------------------------------------------------


def _sources_files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += sorted(f for f in p.iterdir() if f.suffix in (".list", ".sources"))
        elif p.is_file():
            files.append(p)
    return files


def find_debian_mirror(paths: list[Path] | None = None, suite: str = BASE_SUITE) -> str:
    """The URL of the apt source serving `suite` main (deb822 `.sources` or one-line `.list`)."""
    for f in _sources_files(paths or APT_SOURCES):
        text = f.read_text(errors="replace")
        if f.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for line in stanza.splitlines():
                    if line.startswith("#") or ":" not in line:
                        continue
                    k, _, v = line.partition(":")
                    fields[k.strip().lower()] = v.strip()
                if (
                    "deb" in fields.get("types", "").split()
                    and suite in fields.get("suites", "").split()
                    and "main" in fields.get("components", "").split()
                    and fields.get("enabled", "yes").lower() != "no"
                ):
                    return fields["uris"].split()[0]
        else:
            for line in text.splitlines():
                parts = re.sub(r"\[[^\]]*\]", "", line.split("#", 1)[0]).split()
                if (
                    len(parts) >= 4
                    and parts[0] == "deb"
                    and parts[2] == suite
                    and "main" in parts[3:]
                ):
                    return parts[1]
    raise ImageError(
        f"no apt source serving Debian {suite} main in {[str(p) for p in paths or APT_SOURCES]}"
    )


# ---- the base image -------------------------------------------------------------------------

_IMPORT_CHANGES = [
    'CMD ["/bin/bash"]',
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    "WORKDIR /app",
]


async def _run(*cmd: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        tail = out.decode(errors="replace")[-4000:]
        raise ImageBuildError(f"{cmd[0]} failed ({proc.returncode}):\n{tail}")


async def _ensure_debootstrap() -> None:
    if shutil.which("debootstrap"):
        return
    if os.geteuid() != 0:
        raise ImageBuildError("debootstrap is not installed and installing it needs root")
    await _run("apt-get", "install", "-y", "--no-install-recommends", "debootstrap")


async def build_base_debootstrap(tag: str, adapter: DockerAdapter) -> None:
    if os.geteuid() != 0:
        raise ImageBuildError("debootstrap mode needs root (it creates device nodes and chroots)")
    await _ensure_debootstrap()
    mirror = find_debian_mirror()
    with tempfile.TemporaryDirectory(prefix="rollouts-rootfs-") as tmp:
        rootfs = os.path.join(tmp, "rootfs")
        log.info("debootstrap %s from %s", BASE_SUITE, mirror)
        await _run(
            "debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
            BASE_SUITE, rootfs, mirror,
        )  # fmt: skip
        # Smaller image: package lists and caches are rebuilt by any `apt-get update`.
        for sub in ("var/lib/apt/lists", "var/cache/apt"):
            for entry in Path(rootfs, sub).glob("*"):
                if entry.is_file():
                    entry.unlink()
                elif entry.is_dir() and entry.name != "partial":
                    shutil.rmtree(entry, ignore_errors=True)
        Path(rootfs, "app").mkdir(exist_ok=True)
        tarball = os.path.join(tmp, "rootfs.tar")
        await _run("tar", "--numeric-owner", "-C", rootfs, "-cf", tarball, ".")
        repo, _, image_tag = tag.rpartition(":") if ":" in tag else (tag, "", "latest")
        await adapter.import_image(tarball, repo, image_tag, _IMPORT_CHANGES)


async def build_base_dockerfile(tag: str, adapter: DockerAdapter) -> None:
    try:
        await adapter.build(
            path=str(ROOTFS_DIR), dockerfile="Dockerfile.base", tag=tag, timeout_s=1800,
            labels={LABEL_MANAGED: "true"},
        )  # fmt: skip
    except BuildFailed as e:
        raise ImageBuildError(f"building {tag} from Dockerfile.base failed: {e}") from e


async def registry_reachable(adapter: DockerAdapter) -> bool:
    if await adapter.image_exists("debian:bookworm-slim"):
        return True
    return await adapter.try_pull("debian:bookworm-slim", timeout_s=30)


async def build_base_image(
    tag: str = BASE_TAG, mode: BuildMode = "auto", adapter: DockerAdapter | None = None
) -> str:
    """Build the base image; returns the mode used."""
    adapter = adapter or default_adapter()
    if mode == "auto":
        mode = "dockerfile" if await registry_reachable(adapter) else "debootstrap"
    if mode == "dockerfile":
        await build_base_dockerfile(tag, adapter)
    else:
        await build_base_debootstrap(tag, adapter)
    return mode


async def ensure_base_image(
    tag: str = BASE_TAG,
    mode: BuildMode = "auto",
    adapter: DockerAdapter | None = None,
    on_build: Callable[[str], None] | None = None,
) -> None:
    """Build the base image unless it exists; `on_build` hears about it first (it takes a
    minute, and a user should know why the first run waits)."""
    adapter = adapter or default_adapter()
    if not await adapter.image_exists(tag):
        if on_build is not None:
            on_build(tag)
        await build_base_image(tag, mode, adapter)


# ---- FROM aliases ---------------------------------------------------------------------------


class ImageAliases(BaseModel):
    """Glob pattern -> local image, for FROM images that cannot be pulled here."""

    aliases: dict[str, str] = Field(
        default_factory=lambda: {
            "ubuntu:*": BASE_TAG,
            "ubuntu": BASE_TAG,
            "debian:*": BASE_TAG,
            "debian": BASE_TAG,
            "python:3*": BASE_TAG,
        }
    )

    def lookup(self, image: str) -> str | None:
        for pattern, target in self.aliases.items():
            if fnmatch.fnmatchcase(image, pattern):
                return target
        return None


def load_aliases(source: str | None = None) -> ImageAliases:
    """From `source` or $ROLLOUTS_IMAGE_ALIASES: a .toml/.json file, or inline JSON.

    The file holds `{"aliases": {"pattern": "image"}}` (TOML: an `[aliases]` table).
    """
    source = source if source is not None else os.environ.get(ALIASES_ENV)
    if not source:
        return ImageAliases()
    try:
        if source.lstrip().startswith("{"):
            data = json.loads(source)
        elif source.endswith(".toml"):
            data = tomllib.loads(Path(source).read_text())
        else:
            data = json.loads(Path(source).read_text())
        return ImageAliases.model_validate(data)
    except (OSError, ValueError, ValidationError) as e:
        raise ImageError(f"{ALIASES_ENV}: invalid image alias table {source!r}: {e}") from e


_FROM = re.compile(r"^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$", re.IGNORECASE)


async def rewrite_from(dockerfile: str, aliases: ImageAliases, adapter: DockerAdapter) -> str:
    """Map FROM images that are not available locally through `aliases` (stages kept)."""
    stages: set[str] = set()
    lines = []
    for line in dockerfile.splitlines():
        m = _FROM.match(line)
        if m:
            image = m.group(3)
            rest = m.group(4)
            target = aliases.lookup(image)
            if image.lower() not in stages and target and not await adapter.image_exists(image):
                line = f"{m.group(1)}{m.group(2)}{target}{rest}"
            as_match = re.search(r"\bAS\s+(\S+)", rest, re.IGNORECASE)
            if as_match:
                stages.add(as_match.group(1).lower())
        lines.append(line)
    return "\n".join(lines) + "\n"


# ---- per-task images ------------------------------------------------------------------------


def env_tag(env_hash: str) -> str:
    return f"rollouts-env:{env_hash}"


class ImageResolver:
    """Which image a task runs in: override, then docker_image, then a cached env build."""

    def __init__(self, adapter: DockerAdapter | None = None, aliases: ImageAliases | None = None):
        self.adapter = adapter or default_adapter()
        self.aliases = aliases or load_aliases()
        self._locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._known: set[str] = set()  # images seen to exist: saves an inspect per sample

    async def _exists(self, ref: str) -> bool:
        if ref in self._known:
            return True
        if await self.adapter.image_exists(ref):
            self._known.add(ref)
            return True
        return False

    async def resolve(self, task: Task, override: str | None = None) -> str:
        if override:
            if not await self._exists(override):
                raise ImageError(f"task {task.id}: --image {override!r} does not exist locally")
            return override
        declared = task.config.environment.docker_image
        if declared:
            if await self._exists(declared):
                return declared
            if "Dockerfile" not in task.environment_files:
                alias = self.aliases.lookup(declared)
                if alias and await self._exists(alias):
                    return alias
                raise ImageError(
                    f"task {task.id}: docker_image {declared!r} is not available locally and "
                    "cannot be pulled; use --image IMAGE to run it in a local image"
                )
        if "Dockerfile" not in task.environment_files:
            raise ImageError(
                f"task {task.id}: no docker_image and no environment/Dockerfile; use --image IMAGE"
            )
        return await self._build_env(task)

    async def _build_env(self, task: Task) -> str:
        tag = env_tag(task.env_hash)
        async with self._locks[task.env_hash]:
            if await self._exists(tag):
                return tag
            files = dict(task.environment_files)
            dockerfile = files["Dockerfile"].decode("utf-8", errors="replace")
            files["Dockerfile"] = (
                await rewrite_from(dockerfile, self.aliases, self.adapter)
            ).encode()
            log.info("building %s for task %s", tag, task.id)
            try:
                await self.adapter.build(
                    context_tar=build_tar(files),
                    tag=tag,
                    timeout_s=task.config.environment.build_timeout_sec,
                    labels={LABEL_MANAGED: "true", "rollouts.env_hash": task.env_hash},
                )
            except Exception as e:
                tail = "\n".join(getattr(e, "log", [])[-15:])
                raise ImageBuildError(
                    f"task {task.id}: building environment/Dockerfile failed: {e}\n{tail}\n"
                    f"Use --image IMAGE (e.g. --image {BASE_TAG}) to run the task in a "
                    "prebuilt image instead."
                ) from e
            self._known.add(tag)
            return tag


_default_resolver: ImageResolver | None = None


async def resolve_image(task: Task, override: str | None = None) -> str:
    """The image `task` runs in (see ImageResolver.resolve); one shared cache per process."""
    global _default_resolver
    if _default_resolver is None:
        _default_resolver = ImageResolver()
    return await _default_resolver.resolve(task, override)
