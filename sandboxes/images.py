"""Sandbox images: the offline base image, FROM aliases, and per-task environment builds.

No registry is reachable in the places this runs, so the base image is debootstrapped from the
Debian mirror the machine's apt already uses and `docker import`ed. Task Dockerfiles whose FROM
image cannot be pulled (`ubuntu:24.04`, `python:3.11`, ...) are rewritten to the local base
through an alias table. Built environments are cached by the task's `env_hash`, with one build
per hash even when many coroutines ask at once.

A task's Dockerfile is code from a dataset, so it is built under `BuildSettings`: no network,
CPU and memory limits, a wall-clock timeout, and no pulls. Built images are marked on use
(re-tagged, which moves Docker's LastTagTime) and pruned least recently used first, by
`rollouts images prune` and, past a size budget, by the service after each build.
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
import time
import tomllib
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
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
DEFAULT_BUILD_MODE: BuildMode = "auto"  # a Dockerfile if a registry answers, else debootstrap
ENV_REPOSITORY = "rollouts-env"


@dataclass(frozen=True)
class BuildSettings:
    """How task environments (`environment/Dockerfile`) are built. A dataset's Dockerfile is
    code from outside: its RUN steps get no network unless `network`, and run under CPU and
    memory limits and a wall-clock timeout (the task's `build_timeout_sec`, at most
    `timeout_s`) after which the build is stopped. A FROM image that is not here and that no
    alias maps is refused unless `allow_pull`. Built images beyond `budget_bytes` are pruned,
    least recently used first (None: never)."""

    network: bool = False
    allow_pull: bool = False
    cpus: float = 2.0
    memory_mb: int = 2048
    timeout_s: float = 1800.0
    budget_bytes: int | None = 50 << 30


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
    tag: str = BASE_TAG, mode: BuildMode = DEFAULT_BUILD_MODE, adapter: DockerAdapter | None = None
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
    mode: BuildMode = DEFAULT_BUILD_MODE,
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
_COPY_FROM = re.compile(r"^\s*COPY\s+(?:--\S+\s+)*?--from=(\S+)", re.IGNORECASE)


class PullRefused(ImageError):
    """A Dockerfile names an image that is not here and that no alias maps."""


async def rewrite_from(
    dockerfile: str,
    aliases: ImageAliases,
    adapter: DockerAdapter,
    *,
    allow_pull: bool = False,
    available: Callable[[str], Awaitable[bool]] | None = None,
) -> str:
    """Map FROM images that are not available locally through `aliases` (stages kept). An
    image that is neither here nor aliased (in FROM or `COPY --from`) would be pulled from a
    registry by the build: PullRefused unless `allow_pull`. `available` says whether an image
    is here (default: the engine's answer); it is asked for each alias target too (the
    resolver's one builds the base image when it is missing)."""
    available = available or adapter.image_exists
    stages: set[str] = set()
    lines = []

    def refuse(image: str) -> PullRefused:
        return PullRefused(
            f"{image!r} is not available locally and no image alias ({ALIASES_ENV}) maps it; "
            "the service does not pull images unless started with --allow-pull"
        )

    for line in dockerfile.splitlines():
        m = _FROM.match(line)
        if m:
            image = m.group(3)
            rest = m.group(4)
            if image.lower() not in stages and image.lower() != "scratch":
                if "$" in image:  # an ARG: what it names is only known to the builder
                    if not allow_pull:
                        raise refuse(image)
                elif not await available(image):
                    target = aliases.lookup(image)
                    if target:
                        await available(target)  # a missing target fails the build, saying so
                        line = f"{m.group(1)}{m.group(2)}{target}{rest}"
                    elif not allow_pull:
                        raise refuse(image)
            as_match = re.search(r"\bAS\s+(\S+)", rest, re.IGNORECASE)
            if as_match:
                stages.add(as_match.group(1).lower())
        copy = _COPY_FROM.match(line)
        if copy and not allow_pull:
            source = copy.group(1)
            local = source.lower() in stages or source.isdigit()
            if not local and ("$" in source or not await available(source)):
                raise refuse(source)
        lines.append(line)
    return "\n".join(lines) + "\n"


# ---- per-task images ------------------------------------------------------------------------


def env_tag(env_hash: str) -> str:
    return f"rollouts-env:{env_hash}"


class ImageResolver:
    """Which image a task runs in: override, then docker_image, then a cached env build."""

    def __init__(
        self,
        adapter: DockerAdapter | None = None,
        aliases: ImageAliases | None = None,
        *,
        build: BuildSettings | None = None,
    ):
        self.adapter = adapter or default_adapter()
        self.aliases = aliases or load_aliases()
        self.build = build or BuildSettings()
        self._locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._known: set[str] = set()  # images seen to exist: saves an inspect per sample
        self._marked: dict[str, float] = {}  # env image -> when its use was last recorded
        self._prune_lock = asyncio.Lock()

    async def _exists(self, ref: str) -> bool:
        if ref in self._known:
            return True
        if await self.adapter.image_exists(ref):
            self._known.add(ref)
            return True
        return False

    async def _available(self, ref: str) -> bool:
        """Whether `ref` exists here; the base image this project builds is built now if it
        is missing (once, about a minute): a fresh machine's first sample would otherwise fail
        for want of an image no command had built yet."""
        if await self._exists(ref):
            return True
        if ref != BASE_TAG:
            return False
        async with self._locks[BASE_TAG]:
            await ensure_base_image(
                BASE_TAG,
                adapter=self.adapter,
                on_build=lambda tag: log.warning(
                    "building the base image %s (once, about a minute)", tag
                ),
            )
        self._known.add(BASE_TAG)
        return True

    async def resolve(self, task: Task, override: str | None = None) -> str:
        if override:
            if not await self._available(override):
                raise ImageError(f"task {task.id}: --image {override!r} does not exist locally")
            return override
        declared = task.config.environment.docker_image
        if declared:
            if await self._available(declared):
                return declared
            if "Dockerfile" not in task.environment_files:
                alias = self.aliases.lookup(declared)
                if alias and await self._available(alias):
                    return alias
                raise ImageError(
                    f"task {task.id}: docker_image {declared!r} is not available locally and "
                    "cannot be pulled; use --image IMAGE to run it in a local image"
                )
        if "Dockerfile" not in task.environment_files:
            raise ImageError(
                f"task {task.id}: no docker_image and no environment/Dockerfile; use --image IMAGE"
            )
        tag = await self._build_env(task)
        await self._mark_used(tag)
        return tag

    async def _mark_used(self, tag: str) -> None:
        """Re-tag the image (Docker then records the time as its LastTagTime), at most once
        every MARK_INTERVAL_S per image: the last-use order `prune_images` goes by."""
        now = time.monotonic()
        if now - self._marked.get(tag, -MARK_INTERVAL_S) < MARK_INTERVAL_S:
            return
        self._marked[tag] = now
        repository, _, name = tag.rpartition(":")
        try:
            await self.adapter.call(self.adapter.client.api.tag, tag, repository, name)
        except Exception as e:  # noqa: BLE001 - only the prune order suffers
            log.warning("recording the use of %s failed: %s", tag, e)

    async def _build_env(self, task: Task) -> str:
        tag = env_tag(task.env_hash)
        async with self._locks[task.env_hash]:
            if await self._exists(tag):
                return tag
            files = dict(task.environment_files)
            dockerfile = files["Dockerfile"].decode("utf-8", errors="replace")
            try:
                rewritten = await rewrite_from(
                    dockerfile,
                    self.aliases,
                    self.adapter,
                    allow_pull=self.build.allow_pull,
                    available=self._available,
                )
            except PullRefused as e:
                raise ImageBuildError(f"task {task.id}: environment/Dockerfile: {e}") from e
            files["Dockerfile"] = rewritten.encode()
            log.info("building %s for task %s", tag, task.id)
            b = self.build
            try:
                await self.adapter.build(
                    context_tar=build_tar(files),
                    tag=tag,
                    timeout_s=min(task.config.environment.build_timeout_sec, b.timeout_s),
                    labels={LABEL_MANAGED: "true", "rollouts.env_hash": task.env_hash},
                    network_mode=None if b.network else "none",
                    memory_bytes=b.memory_mb << 20,
                    cpus=b.cpus,
                )
            except Exception as e:
                tail = "\n".join(getattr(e, "log", [])[-15:])
                raise ImageBuildError(
                    f"task {task.id}: building environment/Dockerfile failed: {e}\n{tail}\n"
                    f"Use --image IMAGE (e.g. --image {BASE_TAG}) to run the task in a "
                    "prebuilt image instead."
                ) from e
            self._known.add(tag)
            if b.budget_bytes is not None:
                await self._mark_used(tag)  # the newest image is the last to go
                await self._prune(b.budget_bytes)
            return tag

    async def _prune(self, budget_bytes: int) -> None:
        async with self._prune_lock:
            try:
                removed = await prune_images(self.adapter, budget_bytes=budget_bytes)
            except Exception as e:  # noqa: BLE001 - retried after the next build
                log.warning("pruning task images failed: %s", e)
                return
            for image in removed:
                self._known.discard(image.ref)
                log.info("pruned %s (%d MB, over the image budget)", image.ref, image.size >> 20)


MARK_INTERVAL_S = 600.0


@dataclass(frozen=True)
class EnvImage:
    ref: str  # repository:tag
    id: str
    size: int  # bytes removing it would free (its own layers), as Docker counts them
    last_used: float  # unix time: the last re-tag (use), else its creation


def _parse_docker_time(value: str | None) -> float | None:
    """Docker's RFC 3339 times (nanoseconds, "Z"); None for missing or the zero time."""
    if not value or value.startswith("0001-"):
        return None
    head, _, frac = value.rstrip("Z").partition(".")
    digits = "".join(c for c in frac if c.isdigit())[:6]
    try:
        stamp = datetime.fromisoformat(head + (f".{digits}" if digits else "")).replace(tzinfo=UTC)
    except ValueError:
        return None
    return stamp.timestamp()


async def _own_size(adapter: DockerAdapter, image_id: str, full: int) -> int:
    """The bytes of the layers an image added over its nearest tagged ancestor (the base image,
    shared, is not counted): what removing it frees. Its full size when history tells nothing.
    (`docker system df` knows this too, but takes tens of seconds on a busy engine.)"""
    try:
        history = await adapter.call(adapter.client.api.history, image_id)
    except Exception:  # noqa: BLE001 - count it whole
        return full
    own = 0
    for i, entry in enumerate(history):
        if i and entry.get("Tags"):
            return own
        own += int(entry.get("Size") or 0)
    return full


async def list_env_images(
    adapter: DockerAdapter, repository: str = ENV_REPOSITORY
) -> list[EnvImage]:
    """The task images of `repository`, least recently used first."""
    api = adapter.client.api
    out: list[EnvImage] = []
    for image in await adapter.call(api.images, name=repository):
        tags = [t for t in image.get("RepoTags") or [] if t.startswith(repository + ":")]
        if not tags:
            continue
        info = await adapter.call(api.inspect_image, image["Id"])
        used = _parse_docker_time((info.get("Metadata") or {}).get("LastTagTime"))
        size = await _own_size(adapter, image["Id"], int(image.get("Size") or 0))
        for tag in tags:
            out.append(EnvImage(tag, image["Id"], size, used or float(image.get("Created", 0))))
    return sorted(out, key=lambda i: i.last_used)


async def prune_images(
    adapter: DockerAdapter,
    *,
    budget_bytes: int | None = None,
    unused_for_s: float | None = None,
    repository: str = ENV_REPOSITORY,
    dry_run: bool = False,
) -> list[EnvImage]:
    """Remove task images, least recently used first, while their total size is over
    `budget_bytes` or while they have not been used for `unused_for_s`. Images a container
    still uses are kept. Returns what was (or, with `dry_run`, would be) removed."""
    import docker.errors

    images = await list_env_images(adapter, repository)
    total = sum(i.size for i in images)
    now = time.time()
    removed: list[EnvImage] = []
    for image in images:
        over = budget_bytes is not None and total > budget_bytes
        stale = unused_for_s is not None and now - image.last_used > unused_for_s
        if not (over or stale):
            continue
        if not dry_run:
            try:
                await adapter.call(adapter.client.api.remove_image, image.ref)
            except docker.errors.APIError as e:
                if e.status_code in (404, 409):  # gone already, or a container uses it
                    continue
                raise
        total -= image.size
        removed.append(image)
    return removed


_default_resolver: ImageResolver | None = None


async def resolve_image(task: Task, override: str | None = None) -> str:
    """The image `task` runs in (see ImageResolver.resolve); one shared cache per process."""
    global _default_resolver
    if _default_resolver is None:
        _default_resolver = ImageResolver()
    return await _default_resolver.resolve(task, override)
