"""Sandboxes on the nodes of a Ray cluster: the second `SandboxBackend` (see backend.py).

The service process stays one process (its store, API and token data stay in it); what moves
out is the sandboxes. Every node that offers the custom resource `rollouts_sandbox` gets one
executor actor (`ray_executor.py`), pinned to the node, driving the node's own Docker Engine;
`ray_cluster.py` keeps those nodes (joins, deaths, health, slots, placement, remote calls with
timeouts). This backend is the `SandboxBackend` over them:

- `create` places the sample on a node (preferring one that has the task's image) and hands
  the episode a `RaySandbox` that forwards exec and send_keys to the executor; a node whose
  create failed for its own reasons gets no new samples for a while;
- `get_workspace` leaves the tar on the node and returns a `RemoteWorkspace` (its digest), and
  `verify` grades it on that node, so only outcomes, digests and verifier evidence cross the
  wire; to keep it for regrading (`snapshot`), only the files the service's store lacks come
  over (the final workspaces live in the service's store, not on nodes that come and go);
- keeps per-node counts for `/metrics` and `GET /v1/rollouts/{id}` (`stats`, `placement`).

Executors restart after a crash (`max_restarts`); the sandboxes the crashed one held end as
`SandboxLost`, and the restarted one reaps their containers. Ray is imported only when this
backend starts: `pip install rollouts[ray]`.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import time
from typing import Any

from sandboxes.backend import (
    LABEL_CALIBRATION,
    ExecResult,
    KnownBlobs,
    Upload,
    Verdict,
    VerifyResult,
)
from sandboxes.images import BuildSettings, env_tag
from sandboxes.ray_cluster import (
    RayCluster,
    RaySettings,
    RemoteSandboxError,
    SandboxLost,
    SandboxNode,
)
from sandboxes.ray_executor import BackendFactory, ExecutorConfig
from sandboxes.task import Task
from sandboxes.verifier import longest_verification_s
from sandboxes.workspace_snapshot import Snapshot, SnapshotError, snapshot_of

# Create failures that belong to the task (its image, its settings), not to the node: they do
# not send the node into a cool-down.
_TASK_ERRORS = frozenset(
    {"ImageError", "ImageBuildError", "PullRefused", "IsolationError", "BuildFailed"}
)


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


class RemoteWorkspace(bytes):
    """A workspace archived on a node and kept there: the bytes are its sha256 digest only.
    `RayBackend.verify` grades it on that node."""

    node_id: str
    key: str
    size: int
    digest: str
    manifest: dict[str, Any]  # its files by content digest (workspace_snapshot.py)


def image_key(task: Task, override: str | None) -> str:
    """The image a task runs in, as far as the service can tell without an engine."""
    return override or task.config.environment.docker_image or env_tag(task.env_hash)


class RaySandbox:
    """The episode's handle on a sandbox held by a node's executor."""

    def __init__(
        self,
        cluster: RayCluster,
        node: SandboxNode,
        sandbox_id: str,
        labels: dict[str, str],
        create_s: float,
    ) -> None:
        self.id = sandbox_id
        self.node_id = node.node_id
        self.labels = labels
        self.create_s = create_s
        self.workspace_notes: list[str] = []
        self._cluster = cluster
        self._node = node
        self.holds_slot = True  # until destroyed, or handed to its archived workspace

    async def _call(self, method: str, timeout_s: float, *args: Any) -> Any:
        actor_method = getattr(self._node.actor, method)
        outcome = await self._cluster.call(
            self._node, actor_method.remote(self.id, *args), timeout_s, method
        )
        return self._cluster.unwrap(self._node, outcome)

    async def exec(
        self, command: str, timeout_s: float, upload: Upload | None = None
    ) -> ExecResult:
        margin = self._cluster.settings.call_margin_s
        return await self._call("exec", timeout_s + margin, command, timeout_s, upload)

    async def send_keys(self, keystrokes: str, wait_s: float) -> str:
        margin = self._cluster.settings.call_margin_s
        return await self._call("send_keys", wait_s + margin, keystrokes, wait_s)

    async def get_workspace(self) -> bytes:
        s = self._cluster.settings
        key, digest, size, notes, manifest = await self._call(
            "archive", s.control_timeout_s + s.call_margin_s
        )
        self.workspace_notes = list(notes)
        ws = RemoteWorkspace(digest.encode())
        ws.node_id, ws.key, ws.size, ws.digest = self.node_id, key, size, digest
        ws.manifest = manifest
        if self.holds_slot:  # the verifier's container takes the sandbox's place on the node
            self.holds_slot = False
            self._cluster.hold_workspace(self._node, key)
        return ws


class RayBackend:
    """`SandboxBackend` over the executors of a Ray cluster. Start with `start()` (or let the
    first `create` do it); `aclose()` removes every container the executors created."""

    def __init__(
        self,
        settings: RaySettings | None = None,
        backend_settings: Any = None,
        build: BuildSettings | None = None,
        *,
        backend_factory: BackendFactory | None = None,
        ensure_base_image: bool = True,
        reap_interval_s: float = 30.0,
    ) -> None:
        """`backend_settings`: the Docker backend's `BackendSettings` for every node;
        `backend_factory`: another backend behind the executors (tests, simulations)."""
        self.settings = settings or RaySettings()
        self.image_override: str | None = getattr(backend_settings, "image_override", None)
        executor_config = ExecutorConfig(
            backend=backend_settings,
            build=build or BuildSettings(),
            ensure_base_image=ensure_base_image,
            reap_interval_s=reap_interval_s,
            workspace_ttl_s=self.settings.workspace_ttl_s,
            backend_factory=backend_factory,
        )
        self.cluster = RayCluster(self.settings, executor_config)
        self._by_rollout: collections.OrderedDict[str, collections.Counter[str]] = (
            collections.OrderedDict()
        )
        self.node_of: collections.OrderedDict[str, str] = collections.OrderedDict()

    async def start(self) -> None:
        await self.cluster.start()

    async def aclose(self) -> None:
        """Every executor removes its containers; survivors sweep dead nodes'."""
        await self.cluster.aclose()

    async def __aenter__(self) -> RayBackend:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _record_placement(self, node: SandboxNode, labels: dict[str, str]) -> None:
        node.placed += 1
        rollout = labels.get("rollouts.rollout_id")
        if rollout:
            counts = self._by_rollout.setdefault(rollout, collections.Counter())
            counts[node.node_id] += 1
            self._by_rollout.move_to_end(rollout)
            while len(self._by_rollout) > 1000:
                self._by_rollout.popitem(last=False)
        trajectory = labels.get("rollouts.trajectory_id")
        if trajectory:
            self.node_of[trajectory] = node.node_id
            while len(self.node_of) > 100_000:
                self.node_of.popitem(last=False)

    # ---- SandboxBackend -------------------------------------------------------------------

    async def create(self, task: Task, labels: dict[str, str]) -> RaySandbox:
        key = image_key(task, self.image_override)
        node = await self.cluster.acquire(key, beyond_capacity=_calibration(labels))
        self._record_placement(node, labels)
        ref = node.actor.create.remote(task, labels)
        outcome = None
        try:
            outcome = await self.cluster.call(node, ref, self.settings.create_timeout_s, "create")
            sandbox_id, create_s = self.cluster.unwrap(node, outcome)
        except BaseException as e:
            self.cluster.release(node)
            if outcome is None and node.alive:  # cancelled or timed out: it may still come
                self.cluster.spawn(self._reclaim(node, ref))
            if getattr(e, "error_class", None) not in _TASK_ERRORS and isinstance(
                e, RemoteSandboxError
            ):
                node.cooldown_until = time.monotonic() + self.settings.failure_cooldown_s
            raise
        node.images.add(key)
        return RaySandbox(self.cluster, node, sandbox_id, dict(labels), create_s)

    async def _reclaim(self, node: SandboxNode, ref: Any) -> None:
        """Remove the sandbox of a create whose caller gave up, should it still be made."""
        try:
            outcome = await asyncio.wait_for(
                asyncio.wrap_future(ref.future()), self.settings.create_timeout_s
            )
        except BaseException:  # noqa: BLE001 - failed or cancelled: nothing was made
            return
        if outcome[0] == "ok" and node.alive:
            await self.cluster.quiet_call(node, "destroy", outcome[1][0])

    async def destroy(self, sandbox: RaySandbox) -> None:  # type: ignore[override]
        if sandbox.holds_slot:
            sandbox.holds_slot = False
            self.cluster.release(sandbox._node)
        node = sandbox._node
        if node.alive:
            self.cluster.spawn(self.cluster.quiet_call(node, "destroy", sandbox.id))

    async def verify(
        self, task: Task, workspace_tar: bytes, labels: dict[str, str], plain: bool = False
    ) -> VerifyResult:
        """On the node holding the workspace (a `RemoteWorkspace`), else on a placed node.
        Never raises: a lost node is an `infrastructure` verdict (masked)."""
        margin = self.settings.call_margin_s
        limit_s = longest_verification_s(task.config.verifier_timeout_sec)
        timeout_s = limit_s + self.settings.create_timeout_s + margin
        t0 = time.monotonic()
        held = None
        if isinstance(workspace_tar, RemoteWorkspace):
            held = self.cluster.take_workspace(workspace_tar.key)
            node = self.cluster.nodes.get(workspace_tar.node_id)
            payload: str | bytes = workspace_tar.key
            try:
                if node is None:
                    raise SandboxLost(f"node {workspace_tar.node_id[:12]} is unknown")
                if held is None:  # its slot expired or the node died: take one again
                    node = await self.cluster.acquire(None, node, _calibration(labels))
            except Exception as e:
                return VerifyResult(None, Verdict.infrastructure, f"verifier node: {e}")
        else:
            try:
                node = await self.cluster.acquire(
                    image_key(task, self.image_override), beyond_capacity=_calibration(labels)
                )
            except Exception as e:
                return VerifyResult(None, Verdict.infrastructure, f"verifier node: {e}")
            payload = bytes(workspace_tar)
        try:
            ref = node.actor.verify.remote(task, payload, labels, plain)
            result: VerifyResult = await self.cluster.call(node, ref, timeout_s, "verify")
        except SandboxLost as e:
            return VerifyResult(None, Verdict.infrastructure, f"[rollouts] {e}")
        finally:
            self.cluster.release(node)
        result.durations.setdefault("remote_s", time.monotonic() - t0)
        return result

    async def snapshot(self, workspace_tar: bytes, known: KnownBlobs) -> Snapshot:
        """A workspace kept on its node: its manifest came with it; the files `known` lacks
        are fetched from the node (checked against their digests). Plain bytes: split here."""
        if not isinstance(workspace_tar, RemoteWorkspace):
            return await snapshot_of(workspace_tar, known)
        ws = workspace_tar
        snap = Snapshot(ws.digest, ws.size, ws.manifest)
        have = await known(snap.digests)
        missing = [d for d in snap.digests if d not in have]
        if not missing:
            return snap
        node = self.cluster.nodes.get(ws.node_id)
        if node is None or not node.alive:
            raise SandboxLost(f"node {ws.node_id[:12]} is gone")
        ref = node.actor.workspace_blobs.remote(ws.key, missing)
        outcome = await self.cluster.call(
            node, ref, self.settings.control_timeout_s, "workspace_blobs"
        )
        blobs: dict[str, bytes] = self.cluster.unwrap(node, outcome)
        if set(blobs) != set(missing) or not await asyncio.to_thread(_blobs_match, blobs):
            raise SnapshotError(f"node {ws.node_id[:12]} sent other files than were asked for")
        snap.blobs = blobs
        return snap

    # ---- health and placement, for /metrics and the API -----------------------------------

    async def ready(self) -> bool:
        """Some node can take a sandbox."""
        return any(
            n.alive and n.ready and n.healthy and n.error is None
            for n in self.cluster.nodes.values()
        )

    def stats(self) -> dict[str, Any]:
        """Per node (by Ray node id): capacity, in use, placed, failures, restarts, alive."""
        cluster = self.cluster
        nodes = {nid: n.describe() for nid, n in cluster.nodes.items()}
        return {
            "nodes": nodes,
            "capacity": cluster.capacity(),
            "in_use": sum(n.in_use for n in cluster.nodes.values() if n.alive),
            "placement_waits": cluster.placement_waits,
        }

    def placement(self, rollout_id: str) -> dict[str, int]:
        """Samples of this rollout placed per node."""
        return dict(self._by_rollout.get(rollout_id, {}))


def _blobs_match(blobs: dict[str, bytes]) -> bool:
    return all(hashlib.sha256(data).hexdigest() == d for d, data in blobs.items())


def _calibration(labels: dict[str, str]) -> bool:
    """A calibration's sandbox: placed even where every slot is taken (ray_cluster.py)."""
    return labels.get(LABEL_CALIBRATION) == "true"
