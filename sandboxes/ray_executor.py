"""The sandbox executor: one Ray actor per node, running a `SandboxBackend` on that node.

`sandboxes/ray_cluster.py` starts one `SandboxExecutor` on every node of a Ray cluster that
offers the custom resource `rollouts_sandbox`, pinned to that node. The executor runs the local
Docker backend (warm pool, isolation, images, reaper) against the node's own Docker Engine and
holds that node's sandboxes by id; the service drives them through it.

What crosses the wire is small: a task (its files, a few KB), commands and their output,
keystrokes and terminal output, and outcomes. The agent's workspace stays here: `archive`
keeps the tar on the node and returns its digest and manifest (file names and content
digests), and `verify` grades it here. To keep the final workspace for regrading, the service
asks with `workspace_blobs` for just the files its store does not hold yet. Token data never
reaches an executor.

Every call returns an outcome tuple rather than raising, so the service can tell apart what
the agent caused (`("error", "agent", class name, message)`: graded, never masked), a sandbox
this executor does not hold (`"lost"`: it restarted, or the sandbox was removed), and any other
fault (`"infra"`): both masked.

Node identity. Every container carries `rollouts.node=<Ray node id>`. At start (also after a
crash, when Ray restarts the actor) the executor removes its node's containers whose owner
process is dead; so does its periodic sweep. Containers of a node Ray reports dead are removed
too when they are on this engine, which happens only when several Ray nodes share one Docker
Engine (several nodes on one machine, as in tests): with an engine per node that set is empty.
Containers of live nodes with live owners are never touched.

This module imports Ray only inside functions: without the `ray` extra nothing here loads it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from sandboxes.backend import (
    AgentCausedSandboxFault,
    Sandbox,
    SandboxBackend,
    Upload,
    Verdict,
    VerifyResult,
)
from sandboxes.images import BuildSettings
from sandboxes.runtimes import require_runtime
from sandboxes.task import Task
from sandboxes.workspace_snapshot import Snapshot, split

log = logging.getLogger(__name__)

LABEL_NODE = "rollouts.node"  # the Ray node id of the executor that created the container

# ("ok", value) | ("error", kind, exception class name, message); kind: agent | lost | infra
Outcome = tuple[Any, ...]
BackendFactory = Callable[["ExecutorConfig", str], SandboxBackend]


@dataclass
class ExecutorConfig:
    """What every executor needs, sent once when the actor is created."""

    backend: Any = None  # docker_backend.BackendSettings; None: its defaults
    build: BuildSettings = field(default_factory=BuildSettings)
    ensure_base_image: bool = True  # build the offline base image on the node if it is missing
    reap_interval_s: float = 30.0
    workspace_ttl_s: float = 900.0  # an archived workspace not verified within this is dropped
    max_workspaces: int = 256  # archived workspaces kept at most (oldest dropped first)
    # Another backend behind the same executor (tests, simulations): (config, node id) ->
    # backend. Must be importable on the nodes. None: the Docker backend.
    backend_factory: BackendFactory | None = None


def docker_backend_factory(config: ExecutorConfig, node_id: str) -> SandboxBackend:
    from sandboxes.docker_backend import BackendSettings, DockerBackend
    from sandboxes.images import ImageResolver

    settings = config.backend or BackendSettings()
    # The executor reaps by node itself (see the module docstring), never the whole engine.
    settings = replace(settings, reap_at_start=False)
    return DockerBackend(settings, resolver=ImageResolver(build=config.build))


def _ok(value: Any = None) -> Outcome:
    return ("ok", value)


def _error(e: BaseException) -> Outcome:
    kind = "agent" if isinstance(e, AgentCausedSandboxFault) else "infra"
    return ("error", kind, type(e).__name__, f"{type(e).__name__}: {e}"[:4000])


def _lost(message: str) -> Outcome:
    return ("error", "lost", "SandboxLost", message)


class SandboxExecutor:
    """The actor class (wrapped with `ray.remote` by the Ray backend). Async: Ray runs its
    methods on one event loop, many at a time."""

    def __init__(self, config: ExecutorConfig, capacity: int) -> None:
        import ray

        self.config = config
        self.capacity = capacity
        self.node_id: str = ray.get_runtime_context().get_node_id()
        # Distinguishes this process from a predecessor Ray restarted after a crash.
        self.incarnation = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.hostname = socket.gethostname()
        self._backend: SandboxBackend | None = None
        self._sandboxes: dict[str, Sandbox] = {}
        # key -> (the tar, when it was archived, its split into manifest and blobs)
        self._workspaces: dict[str, tuple[bytes, float, Snapshot]] = {}
        self._start_lock: asyncio.Lock | None = None
        self._started = False
        self._start_error: str | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._retry: asyncio.Task[None] | None = None
        self._attempted_at = 0.0
        self._closed = False
        self.counts: dict[str, int] = {"created": 0, "verified": 0, "failures": 0, "reaped": 0}

    # ---- lifecycle ------------------------------------------------------------------------

    async def start(self) -> dict[str, Any]:
        """Reap what a crashed predecessor left, make sure the base image is here; idempotent.
        Returns `info()`."""
        await self._ensure_started()
        return await self.info()

    async def _ensure_started(self) -> SandboxBackend:
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if not self._started:
                factory = self.config.backend_factory or docker_backend_factory
                self._backend = factory(self.config, self.node_id)
                if self._is_docker():
                    # A runtime this node's engine lacks fails the start, with what to do.
                    settings = self._backend.settings  # type: ignore[union-attr]
                    await require_runtime(self._backend.adapter, settings.runtime)  # type: ignore[union-attr]
                    await self._reap_own()
                    if self.config.ensure_base_image:
                        await self._ensure_base_image()
                self._started = True
                self._sweeper = asyncio.ensure_future(self._sweep_loop())
        assert self._backend is not None
        return self._backend

    def _is_docker(self) -> bool:
        return self._backend is not None and hasattr(self._backend, "adapter")

    async def _ensure_base_image(self) -> None:
        from sandboxes.images import ensure_base_image

        self._attempted_at = time.monotonic()

        override = getattr(getattr(self._backend, "settings", None), "image_override", None)
        try:
            if override:
                adapter = self._backend.adapter  # type: ignore[union-attr]
                if not await adapter.image_exists(override):
                    raise RuntimeError(f"--image {override!r} does not exist on this node")
            else:
                await ensure_base_image()
            self._start_error = None
        except Exception as e:  # reported by info(); creates still fail (masked) meanwhile
            self._start_error = f"{type(e).__name__}: {e}"
            log.warning("node %s: base image not available: %s", self.node_id[:12], e)

    async def info(self) -> dict[str, Any]:
        images: list[str] = []
        if self._is_docker():
            adapter = self._backend.adapter  # type: ignore[union-attr]
            try:
                listed = await adapter.call(adapter.client.api.images)
                images = sorted({t for i in listed for t in (i.get("RepoTags") or [])})
            except Exception as e:  # noqa: BLE001 - no list, no preference
                log.warning("listing images failed: %s", e)
        return {
            "node_id": self.node_id,
            "incarnation": self.incarnation,
            "hostname": self.hostname,
            "pid": os.getpid(),
            "capacity": self.capacity,
            "images": images,
            "error": self._start_error,
        }

    async def ping(self) -> dict[str, Any]:
        """Cheap health check: starts the executor if a restart left it unstarted, and tries
        the base image again (at most once a minute) while it is missing."""
        await self._ensure_started()
        retrying = self._retry is not None and not self._retry.done()
        if self._start_error and not retrying and time.monotonic() - self._attempted_at > 60:
            self._retry = asyncio.ensure_future(self._ensure_base_image())
        return {
            "incarnation": self.incarnation,
            "sandboxes": len(self._sandboxes),
            "workspaces": len(self._workspaces),
            "error": self._start_error,
            **self.counts,
        }

    async def close(self) -> None:
        """Remove every container this executor created, and stop."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        self._sandboxes.clear()
        self._workspaces.clear()
        if self._backend is not None:
            await self._backend.aclose()

    # ---- sandboxes ------------------------------------------------------------------------

    async def create(self, task: Task, labels: dict[str, str]) -> Outcome:
        try:
            backend = await self._ensure_started()
            t0 = time.monotonic()
            sandbox = await backend.create(task, {**labels, LABEL_NODE: self.node_id})
            self._sandboxes[sandbox.id] = sandbox
            self.counts["created"] += 1
            return _ok((sandbox.id, time.monotonic() - t0))
        except Exception as e:
            self.counts["failures"] += 1
            return _error(e)

    async def _on(self, sandbox_id: str, call: Callable[[Sandbox], Awaitable[Any]]) -> Outcome:
        sandbox = self._sandboxes.get(sandbox_id)
        if sandbox is None:
            return _lost(
                f"sandbox {sandbox_id[:12]} is not held by the executor on node "
                f"{self.node_id[:12]} (it restarted, or the sandbox was removed)"
            )
        try:
            return _ok(await call(sandbox))
        except Exception as e:
            return _error(e)

    async def exec(
        self, sandbox_id: str, command: str, timeout_s: float, upload: Upload | None = None
    ) -> Outcome:
        return await self._on(sandbox_id, lambda s: s.exec(command, timeout_s, upload))

    async def send_keys(self, sandbox_id: str, keystrokes: str, wait_s: float) -> Outcome:
        return await self._on(sandbox_id, lambda s: s.send_keys(keystrokes, wait_s))

    async def archive(self, sandbox_id: str) -> Outcome:
        """Tar /app and keep it here: returns (key, sha256, size, notes, manifest), not the
        tar (the manifest lists its files by content digest: workspace_snapshot.py)."""

        async def run(sandbox: Sandbox) -> tuple[str, str, int, list[str], dict[str, Any]]:
            data = await sandbox.get_workspace()
            snap = await asyncio.to_thread(split, data)  # our sanitized tar, not the agent's
            self._drop_old_workspaces()
            key = uuid.uuid4().hex
            self._workspaces[key] = (data, time.monotonic(), snap)
            notes = list(getattr(sandbox, "workspace_notes", []) or [])
            return key, hashlib.sha256(data).hexdigest(), len(data), notes, snap.manifest

        return await self._on(sandbox_id, run)

    async def workspace_blobs(self, key: str, digests: list[str]) -> Outcome:
        """The contents of an archived workspace's files with these digests (those the
        service's store lacks): {sha256: bytes}."""
        stored = self._workspaces.get(key)
        if stored is None:
            return _lost(f"the workspace is gone from node {self.node_id[:12]}")
        blobs = stored[2].blobs
        return _ok({d: blobs[d] for d in digests if d in blobs})

    async def get_workspace(self, sandbox_id: str) -> Outcome:
        """The tar itself, for callers that need the bytes (not used by the service)."""
        return await self._on(sandbox_id, lambda s: s.get_workspace())

    def _drop_old_workspaces(self) -> None:
        now = time.monotonic()
        for key, (_, at, _) in list(self._workspaces.items()):
            if now - at > self.config.workspace_ttl_s:
                del self._workspaces[key]
        while len(self._workspaces) >= self.config.max_workspaces:
            del self._workspaces[next(iter(self._workspaces))]

    async def drop_workspace(self, key: str) -> None:
        self._workspaces.pop(key, None)

    async def destroy(self, sandbox_id: str) -> None:
        sandbox = self._sandboxes.pop(sandbox_id, None)
        if sandbox is not None and self._backend is not None:
            await self._backend.destroy(sandbox)

    async def verify(
        self, task: Task, workspace: str | bytes, labels: dict[str, str], plain: bool = False
    ) -> VerifyResult:
        """Grade a workspace archived here (`workspace` is its key) or sent along (bytes).
        Never raises: a fault is an `infrastructure` verdict (masked)."""
        try:
            backend = await self._ensure_started()
            if isinstance(workspace, str):
                stored = self._workspaces.pop(workspace, None)
                if stored is None:
                    return VerifyResult(
                        None,
                        Verdict.infrastructure,
                        f"[rollouts] the workspace is gone from node {self.node_id[:12]} "
                        "(the executor restarted, or it expired)",
                    )
                workspace = stored[0]
            labels = {**labels, LABEL_NODE: self.node_id}
            result = await backend.verify(task, workspace, labels, plain)
            self.counts["verified"] += 1
            return result
        except Exception as e:
            self.counts["failures"] += 1
            return VerifyResult(None, Verdict.infrastructure, f"verifier on node: {e}")

    # ---- reaping --------------------------------------------------------------------------

    async def _reap_own(self) -> int:
        """This node's containers whose owner process is gone (a crashed predecessor's)."""
        from sandboxes.reaper import reap_orphans

        try:
            adapter = self._backend.adapter  # type: ignore[union-attr]
            n = await reap_orphans(adapter=adapter, extra_labels={LABEL_NODE: self.node_id})
        except Exception as e:  # noqa: BLE001 - the next sweep tries again
            log.warning("reaping node %s failed: %s", self.node_id[:12], e)
            return 0
        if n:
            log.info("node %s: reaped %d containers of a dead owner", self.node_id[:12], n)
        self.counts["reaped"] += n
        return n

    async def reap(self, dead_nodes: list[str] | None = None) -> int:
        """Remove this node's orphans and, on this engine, the containers of `dead_nodes`
        (None: the nodes Ray reports dead). Returns how many were removed."""
        if not self._is_docker():
            return 0
        n = await self._reap_own()
        if dead_nodes is None:
            dead_nodes = await asyncio.to_thread(_dead_ray_nodes)
        dead = set(dead_nodes) - {self.node_id}
        if not dead:
            return n
        from sandboxes.isolation import LABEL_MANAGED

        adapter = self._backend.adapter  # type: ignore[union-attr]
        try:
            listed = await adapter.list_containers({LABEL_MANAGED: "true"})
        except Exception as e:  # noqa: BLE001
            log.warning("listing containers failed: %s", e)
            return n
        doomed = [c["Id"] for c in listed if (c.get("Labels") or {}).get(LABEL_NODE) in dead]
        results = await asyncio.gather(
            *(adapter.remove(cid) for cid in doomed), return_exceptions=True
        )
        removed = sum(1 for r in results if not isinstance(r, BaseException))
        self.counts["reaped"] += removed
        return n + removed

    async def _sweep_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.config.reap_interval_s)
            self._drop_old_workspaces()
            try:
                await self.reap(None)
            except Exception as e:  # noqa: BLE001
                log.warning("sweep failed: %s", e)


def _dead_ray_nodes() -> list[str]:
    import ray

    return [n["NodeID"] for n in ray.nodes() if not n.get("Alive")]
