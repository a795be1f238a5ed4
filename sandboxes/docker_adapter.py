"""The one async adapter over the blocking `docker` SDK.

Every Docker Engine call of the project goes through `DockerAdapter`, which runs it on a bounded
thread pool so the event loop never blocks (docker_engine.py). Its parts, one job each: the
container calls here, exec and attach sessions (docker_streams.py), images and builds
(image_builds.py). The names callers import from here are re-exported below.
"""

from __future__ import annotations

import os
from typing import Any

import docker.errors

from sandboxes.docker_engine import DockerUnavailable
from sandboxes.docker_streams import (
    MAX_FRAME,
    CappedBuffer,
    ContainerNotRunning,
    ContainerStreams,
    OutputTooLarge,
    StreamCorrupt,
    StreamResult,
    take_frames,
)
from sandboxes.image_builds import (
    BUILD_CLEANUP_S,
    BuildFailed,
    BuildTimedOut,
    ImageBuilds,
    build_step_containers,
)

__all__ = [
    "BUILD_CLEANUP_S",
    "MAX_FRAME",
    "BuildFailed",
    "BuildTimedOut",
    "CappedBuffer",
    "ContainerNotRunning",
    "DockerAdapter",
    "DockerUnavailable",
    "OutputTooLarge",
    "StreamCorrupt",
    "StreamResult",
    "build_step_containers",
    "default_adapter",
    "take_frames",
]


class DockerAdapter(ContainerStreams, ImageBuilds):
    """Async facade over the docker SDK. One per process is enough (see `default_adapter`)."""

    # ---- containers -------------------------------------------------------------------------

    async def create_container(self, args: dict[str, Any]) -> str:
        """Create (not start) a container from `isolation.container_args` output."""

        def _create() -> str:
            api = self.client.api
            kwargs = dict(args)
            host_config = api.create_host_config(**kwargs.pop("host_config"))
            return api.create_container(host_config=host_config, **kwargs)["Id"]

        return await self.call(_create)

    async def start(self, container_id: str) -> None:
        await self.call(self.client.api.start, container_id)

    async def remove(self, container_id: str) -> None:
        """Force-remove; a container that is already gone is not an error."""

        def _rm() -> None:
            try:
                self.client.api.remove_container(container_id, force=True, v=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as e:
                # "removal already in progress" means someone else finishes the job.
                if "already in progress" not in str(e):
                    raise

        await self.call(_rm)

    async def list_containers(self, labels: dict[str, str] | list[str]) -> list[dict[str, Any]]:
        items = [f"{k}={v}" for k, v in labels.items()] if isinstance(labels, dict) else labels
        return await self.call(self.client.api.containers, all=True, filters={"label": items})

    async def inspect_container(self, container_id: str) -> dict[str, Any]:
        return await self.call(self.client.api.inspect_container, container_id)

    # ---- the engine -------------------------------------------------------------------------

    async def cpus(self) -> int | None:
        """The CPUs the engine's machine has (`docker info`), None where it does not say."""
        info = await self.call(self.client.info)
        n = info.get("NCPU")
        return n if isinstance(n, int) and n > 0 else None


_default: DockerAdapter | None = None
_default_pid: int | None = None


def default_adapter() -> DockerAdapter:
    """The process-wide adapter (re-created after fork, as thread pools do not survive it)."""
    global _default, _default_pid
    if _default is None or _default_pid != os.getpid():
        _default, _default_pid = DockerAdapter(), os.getpid()
    return _default
