"""OCI runtimes: which ones the Docker Engine offers, and refusing one it does not.

Every agent and verifier container runs under the runtime the sandbox settings name (`runc`,
the engine's usual default, or `runsc`: gVisor's user-space kernel between the tested code and
the host's, see docs/reliability.md). The engine only knows the runtimes registered in its
daemon.json; asking for another fails at the first container, so the service checks at start.
"""

from __future__ import annotations

from sandboxes.docker_adapter import DockerAdapter


class UnknownRuntime(ValueError):
    """The configured runtime is not registered with the Docker Engine."""


async def engine_runtimes(adapter: DockerAdapter) -> tuple[list[str], str]:
    """(the runtimes the engine offers, its default one)."""
    info = await adapter.call(lambda: adapter.client.info())
    return sorted(info.get("Runtimes") or {}), str(info.get("DefaultRuntime") or "runc")


async def require_runtime(adapter: DockerAdapter, name: str | None) -> None:
    """Raise UnknownRuntime, with what to do about it, unless the engine offers `name` (None:
    the engine's default, always there)."""
    if name is None:
        return
    offered, _default = await engine_runtimes(adapter)
    if name not in offered:
        how = (
            "run scripts/runsc_setup.sh"
            if name == "runsc"
            else 'add it under "runtimes" in /etc/docker/daemon.json and send dockerd SIGHUP'
        )
        raise UnknownRuntime(
            f"the Docker Engine has no runtime {name!r} (it offers {', '.join(offered)}): {how}"
        )
