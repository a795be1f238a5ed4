"""Sandboxes on the nodes of a Ray cluster: the second `SandboxBackend` (see backend.py).

The service process stays one process (its store, API and token data stay in it); what moves
out is the sandboxes. Every node that offers the custom resource `rollouts_sandbox` (its value:
how many sandboxes the node may run at once) gets one executor actor (`ray_executor.py`),
pinned to the node, driving the node's own Docker Engine. This backend:

- **places** each sample on a node with a free slot, preferring a node that already has the
  task's image, then the least loaded; when every slot is taken it waits (up to
  `placement_timeout_s`) for one to free or for a node to join;
- hands the episode a `RaySandbox` that forwards exec and send_keys to the executor;
  `get_workspace` leaves the tar on the node and returns a `RemoteWorkspace` (its digest), and
  `verify` grades it on that node, so only outcomes, digests and verifier evidence cross the
  wire; to keep it for regrading (`snapshot`), only the files the service's store lacks come
  over (the final workspaces live in the service's store, not on nodes that come and go);
- **polls** the cluster's node table: a node that joins gets an executor and adds capacity at
  once; a node that dies ends its in-flight calls at once with `SandboxLost` (masked:
  `sandbox_error`), and the survivors remove what it left on their engine, if they share it;
- bounds every remote call with a timeout (its own timeout plus a margin), so nothing hangs;
- keeps per-node counts for `/metrics` and `GET /v1/rollouts/{id}` (`stats`, `placement`).

Executors restart after a crash (`max_restarts`); the sandboxes the crashed one held end as
`SandboxLost`, and the restarted one reaps their containers. Ray is imported only when this
backend starts: `pip install rollouts[ray]`.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sandboxes.backend import (
    AgentCausedSandboxFault,
    ExecResult,
    KnownBlobs,
    SandboxExited,
    SandboxUnusable,
    Upload,
    Verdict,
    VerifyResult,
    WorkspaceTooLarge,
    WorkspaceUnreadable,
)
from sandboxes.images import BuildSettings, env_tag
from sandboxes.ray_executor import BackendFactory, ExecutorConfig, SandboxExecutor
from sandboxes.task import Task
from sandboxes.workspace_snapshot import Snapshot, SnapshotError, snapshot_of

log = logging.getLogger(__name__)

RESOURCE = "rollouts_sandbox"
_AGENT_FAULTS: dict[str, type[AgentCausedSandboxFault]] = {
    cls.__name__: cls
    for cls in (
        AgentCausedSandboxFault,
        WorkspaceTooLarge,
        WorkspaceUnreadable,
        SandboxExited,
        SandboxUnusable,
    )
}
# Create failures that belong to the task (its image, its settings), not to the node: they do
# not send the node into a cool-down.
_TASK_ERRORS = frozenset(
    {"ImageError", "ImageBuildError", "PullRefused", "IsolationError", "BuildFailed"}
)


class RemoteSandboxError(RuntimeError):
    """A sandbox call failed on its node for a reason outside the agent's reach (masked).
    `error_class`: the class name of the executor's exception, when there was one."""

    error_class: str | None = None


class SandboxLost(RemoteSandboxError):
    """The node or its executor went away (died, removed, restarted, or stopped answering)."""


class NoSandboxCapacity(RemoteSandboxError):
    """No node had a free slot within the placement timeout."""


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class RaySettings:
    address: str = "auto"  # `ray.init(address=...)`; ignored when Ray is already initialised
    namespace: str | None = None
    resource: str = RESOURCE
    poll_s: float = 2.0  # how often the node table is read (joins and deaths)
    ping_timeout_s: float = 10.0
    call_margin_s: float = 30.0  # on top of a call's own timeout (exec, send_keys, verify)
    control_timeout_s: float = 120.0  # archive, destroy, reap, close
    start_timeout_s: float = 900.0  # executor start: reaping, building the base image
    create_timeout_s: float = 900.0  # one create: may build the task's image
    placement_timeout_s: float = 1800.0  # waiting for a free slot
    max_restarts: int = 3  # executor restarts after a crash (Ray actor restarts)
    restart_backoff_s: float = 30.0  # between attempts to start a node's executor
    failure_cooldown_s: float = 5.0  # a node whose create failed gets no new samples this long
    workspace_ttl_s: float = 900.0  # a slot held by a workspace never verified is freed after


@dataclass(eq=False)
class _Node:
    node_id: str
    address: str
    capacity: int
    actor: Any
    in_use: int = 0
    placed: int = 0
    failures: int = 0
    restarts: int = 0
    alive: bool = True
    ready: bool = False
    healthy: bool = True
    incarnation: str | None = None
    error: str | None = None
    images: set[str] = field(default_factory=set)
    cooldown_until: float = 0.0
    start_failed_at: float = 0.0
    dead: asyncio.Event = field(default_factory=asyncio.Event)
    starting: asyncio.Task[None] | None = None
    pinging: asyncio.Task[None] | None = None

    def free(self) -> int:
        return self.capacity - self.in_use

    def usable(self, now: float) -> bool:
        return (
            self.alive
            and self.ready
            and self.healthy
            and self.error is None
            and self.free() > 0
            and now >= self.cooldown_until
        )

    def describe(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "alive": self.alive,
            "ready": self.ready and self.healthy and self.error is None,
            "capacity": self.capacity,
            "in_use": self.in_use,
            "placed": self.placed,
            "failures": self.failures,
            "restarts": self.restarts,
            "error": self.error,
        }


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
        backend: RayBackend,
        node: _Node,
        sandbox_id: str,
        labels: dict[str, str],
        create_s: float,
    ) -> None:
        self.id = sandbox_id
        self.node_id = node.node_id
        self.labels = labels
        self.create_s = create_s
        self.workspace_notes: list[str] = []
        self._backend = backend
        self._node = node
        self.holds_slot = True  # until destroyed, or handed to its archived workspace

    async def _call(self, method: str, timeout_s: float, *args: Any) -> Any:
        actor_method = getattr(self._node.actor, method)
        outcome = await self._backend._call(
            self._node, actor_method.remote(self.id, *args), timeout_s, method
        )
        return self._backend._unwrap(self._node, outcome)

    async def exec(
        self, command: str, timeout_s: float, upload: Upload | None = None
    ) -> ExecResult:
        margin = self._backend.settings.call_margin_s
        return await self._call("exec", timeout_s + margin, command, timeout_s, upload)

    async def send_keys(self, keystrokes: str, wait_s: float) -> str:
        margin = self._backend.settings.call_margin_s
        return await self._call("send_keys", wait_s + margin, keystrokes, wait_s)

    async def get_workspace(self) -> bytes:
        s = self._backend.settings
        key, digest, size, notes, manifest = await self._call(
            "archive", s.control_timeout_s + s.call_margin_s
        )
        self.workspace_notes = list(notes)
        ws = RemoteWorkspace(digest.encode())
        ws.node_id, ws.key, ws.size, ws.digest = self.node_id, key, size, digest
        ws.manifest = manifest
        if self.holds_slot:  # the verifier's container takes the sandbox's place on the node
            self.holds_slot = False
            self._backend._hold_workspace(self._node, key)
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
        self.executor_config = ExecutorConfig(
            backend=backend_settings,
            build=build or BuildSettings(),
            ensure_base_image=ensure_base_image,
            reap_interval_s=reap_interval_s,
            workspace_ttl_s=self.settings.workspace_ttl_s,
            backend_factory=backend_factory,
        )
        self.nodes: dict[str, _Node] = {}
        self._changed: asyncio.Condition | None = None
        self._poller: asyncio.Task[None] | None = None
        self._start_lock: asyncio.Lock | None = None
        self._started = False
        self._closed = False
        self._owns_ray = False
        self._actor_class: Any = None
        self._background: set[asyncio.Task[Any]] = set()
        self._workspaces: dict[str, tuple[_Node, float]] = {}  # key -> (node, since): slots
        self._by_rollout: collections.OrderedDict[str, collections.Counter[str]] = (
            collections.OrderedDict()
        )
        self.node_of: collections.OrderedDict[str, str] = collections.OrderedDict()
        self.placement_waits = 0

    # ---- start, poll, stop ---------------------------------------------------------------

    async def start(self) -> None:
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._started:
                return
            if self._closed:
                raise RuntimeError("the Ray sandbox backend is closed")
            import ray

            if not ray.is_initialized():
                # ray.init makes SIGTERM a bare sys.exit; the host process (uvicorn: a graceful
                # shutdown that closes the executors and their containers) keeps its own.
                saved = {}
                if threading.current_thread() is threading.main_thread():
                    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
                ray.init(
                    address=self.settings.address,
                    namespace=self.settings.namespace,
                    log_to_driver=False,
                )
                for sig, handler in saved.items():
                    if handler is not None:
                        signal.signal(sig, handler)
                self._owns_ray = True
            self._actor_class = ray.remote(SandboxExecutor)
            self._changed = asyncio.Condition()
            await self.poll()
            self._poller = asyncio.ensure_future(self._poll_loop())
            self._started = True

    async def _poll_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.settings.poll_s)
            try:
                await self.poll()
            except Exception as e:  # noqa: BLE001 - the GCS may be briefly unreachable
                log.warning("reading the Ray node table failed: %s", e)

    async def poll(self) -> None:
        """Read the node table once: executors for new nodes, deaths, health, stale slots."""
        import ray

        table = await asyncio.to_thread(ray.nodes)
        seen: set[str] = set()
        for entry in table:
            node_id = entry["NodeID"]
            seen.add(node_id)
            capacity = int((entry.get("Resources") or {}).get(self.settings.resource, 0))
            node = self.nodes.get(node_id)
            if entry.get("Alive") and capacity >= 1 and node is None:
                self._add_node(node_id, entry.get("NodeManagerAddress", ""), capacity)
            elif not entry.get("Alive") and node is not None and node.alive:
                await self._node_died(node, "Ray reports the node dead")
        for node in list(self.nodes.values()):
            if node.alive and node.node_id not in seen:
                await self._node_died(node, "the node left the cluster")
        now = time.monotonic()
        for node in self.nodes.values():  # in the background: a slow node delays no poll
            if not node.alive:
                continue
            if node.ready and (node.pinging is None or node.pinging.done()):
                node.pinging = self._spawn(self._ping(node))
            elif not node.ready and node.starting is not None and node.starting.done():
                if now - node.start_failed_at >= self.settings.restart_backoff_s:
                    node.starting = self._spawn(self._start_executor(node))  # try again
        self._expire_workspaces()

    def _new_executor(self, node_id: str, capacity: int) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return self._actor_class.options(
            num_cpus=0,
            max_restarts=self.settings.max_restarts,
            max_task_retries=0,  # a sandbox call is not idempotent: fail it, mask the sample
            max_concurrency=10_000,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(self.executor_config, capacity)

    def _add_node(self, node_id: str, address: str, capacity: int) -> None:
        node = _Node(node_id, address, capacity, self._new_executor(node_id, capacity))
        self.nodes[node_id] = node
        node.starting = self._spawn(self._start_executor(node))
        log.info("sandbox node %s (%s) joined: %d slots", node_id[:12], address, capacity)

    def _replace_executor(self, node: _Node) -> None:
        log.warning("sandbox node %s: starting a new executor", node.node_id[:12])
        node.actor = self._new_executor(node.node_id, node.capacity)
        node.ready = False
        node.restarts += 1
        node.starting = self._spawn(self._start_executor(node))

    async def _start_executor(self, node: _Node) -> None:
        import ray

        try:
            info = await self._call(
                node, node.actor.start.remote(), self.settings.start_timeout_s, "start"
            )
        except Exception as e:  # noqa: BLE001
            node.error = f"executor did not start: {e}"
            node.start_failed_at = time.monotonic()
            log.warning("sandbox node %s: %s", node.node_id[:12], node.error)
            if isinstance(e.__cause__, ray.exceptions.ActorDiedError) and node.alive:
                self._replace_executor(node)  # restarts exhausted (or it never came up)
            return
        node.incarnation = info["incarnation"]
        node.images.update(info.get("images") or [])
        node.error = info.get("error")
        node.ready = True
        await self._notify()

    async def _ping(self, node: _Node) -> None:
        import ray

        try:
            info = await self._call(
                node, node.actor.ping.remote(), self.settings.ping_timeout_s, "ping"
            )
        except Exception as e:
            if node.healthy:
                log.warning("sandbox node %s does not answer: %s", node.node_id[:12], e)
            node.healthy = False
            if isinstance(e.__cause__, ray.exceptions.ActorDiedError) and node.alive:
                # Out of restarts while its node lives on: a fresh executor takes over.
                self._replace_executor(node)
            return
        if node.incarnation is not None and info["incarnation"] != node.incarnation:
            node.restarts += 1
            log.warning("sandbox executor on node %s restarted", node.node_id[:12])
        node.incarnation = info["incarnation"]
        was = (node.healthy, node.error)
        node.healthy, node.error = True, info.get("error")
        if was != (node.healthy, node.error):
            await self._notify()

    async def _node_died(self, node: _Node, why: str) -> None:
        node.alive = False
        node.dead.set()
        log.warning("sandbox node %s is gone: %s", node.node_id[:12], why)
        for key, (n, _) in list(self._workspaces.items()):
            if n is node:
                del self._workspaces[key]
        node.in_use = 0
        await self._notify()
        # Survivors sharing its engine (several nodes on one machine) remove its leftovers.
        for other in self.nodes.values():
            if other.alive and other.ready:
                self._spawn(self._quiet_call(other, "reap", [node.node_id]))

    async def _quiet_call(self, node: _Node, method: str, *args: Any) -> Any:
        try:
            ref = getattr(node.actor, method).remote(*args)
            return await self._call(node, ref, self.settings.control_timeout_s, method)
        except Exception as e:  # noqa: BLE001 - best effort
            log.debug("%s on node %s failed: %s", method, node.node_id[:12], e)
            return None

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _notify(self) -> None:
        if self._changed is not None:
            async with self._changed:
                self._changed.notify_all()

    async def aclose(self) -> None:
        """Stop polling; every executor removes its containers; survivors sweep dead nodes'."""
        if self._closed:
            return
        self._closed = True
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        if self._background:  # closing the executors below removes what these would
            _, pending = await asyncio.wait(list(self._background), timeout=10.0)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        live = [n for n in self.nodes.values() if n.alive]
        dead = [n.node_id for n in self.nodes.values() if not n.alive]
        if dead:
            await asyncio.gather(*(self._quiet_call(n, "reap", dead) for n in live))
        await asyncio.gather(*(self._quiet_call(n, "close") for n in live))
        if self._actor_class is not None:
            import ray

            for node in self.nodes.values():
                try:
                    ray.kill(node.actor, no_restart=True)
                except Exception:  # noqa: BLE001 - already dead
                    pass
            if self._owns_ray:
                ray.shutdown()
        await self._notify()

    async def __aenter__(self) -> RayBackend:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ---- remote calls ---------------------------------------------------------------------

    async def _call(self, node: _Node, ref: Any, timeout_s: float, what: str) -> Any:
        """Await one remote call: its result, or SandboxLost when the node dies, the actor
        fails or the call outlives `timeout_s` (then it is cancelled on the executor)."""
        import ray

        result = asyncio.ensure_future(asyncio.wrap_future(ref.future()))
        died = asyncio.ensure_future(node.dead.wait())
        try:
            done, _ = await asyncio.wait(
                {result, died}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        except BaseException:  # cancelled by the caller (e.g. the rollout was cancelled)
            result.cancel()
            died.cancel()
            _cancel(ref)
            raise
        died.cancel()
        if result in done:
            try:
                return result.result()
            except ray.exceptions.RayError as e:
                node.failures += 1
                raise SandboxLost(
                    f"{what} on node {node.node_id[:12]} failed: {type(e).__name__}: {e}"
                ) from e
        result.cancel()
        _cancel(ref)
        node.failures += 1
        if node.dead.is_set():
            raise SandboxLost(f"node {node.node_id[:12]} ({node.address}) died during {what}")
        raise SandboxLost(f"{what} on node {node.node_id[:12]} timed out after {timeout_s:.0f} s")

    def _unwrap(self, node: _Node, outcome: tuple[Any, ...]) -> Any:
        if outcome[0] == "ok":
            return outcome[1]
        _, kind, name, message = outcome
        if kind == "agent":
            raise _AGENT_FAULTS.get(name, AgentCausedSandboxFault)(message)
        node.failures += 1
        error = (SandboxLost if kind == "lost" else RemoteSandboxError)(
            f"on node {node.node_id[:12]}: {message}"
        )
        error.error_class = name
        raise error

    # ---- placement ------------------------------------------------------------------------

    def _pick(self, key: str | None, now: float) -> _Node | None:
        usable = [n for n in self.nodes.values() if n.usable(now)]
        if not usable:
            return None
        return min(
            usable,
            key=lambda n: (
                key is not None and key not in n.images,
                n.in_use / n.capacity,
                n.placed,
            ),
        )

    async def _acquire(self, key: str | None, node: _Node | None = None) -> _Node:
        """A slot: on `node` if given (it must be alive), else on the best node."""
        await self.start()
        assert self._changed is not None
        deadline = time.monotonic() + self.settings.placement_timeout_s
        async with self._changed:
            waited = False
            while True:
                if self._closed:
                    raise SandboxLost("the Ray sandbox backend is closed")
                now = time.monotonic()
                if node is not None:
                    if not node.alive:
                        raise SandboxLost(f"node {node.node_id[:12]} is gone")
                    chosen = node if node.free() > 0 else None
                else:
                    chosen = self._pick(key, now)
                if chosen is not None:
                    chosen.in_use += 1
                    return chosen
                if not waited:
                    waited = True
                    self.placement_waits += 1
                remaining = deadline - now
                if remaining <= 0:
                    waited_s = self.settings.placement_timeout_s
                    raise NoSandboxCapacity(
                        f"no sandbox node had a free slot for {waited_s:.0f} s "
                        f"({self.capacity()} slots on {self.live_nodes()} nodes)"
                    )
                # Woken by a freed slot or a joining node; the timeout re-checks cool-downs.
                try:
                    await asyncio.wait_for(self._changed.wait(), timeout=min(remaining, 1.0))
                except TimeoutError:
                    pass

    def _release(self, node: _Node) -> None:
        if node.alive and node.in_use > 0:
            node.in_use -= 1
        self._spawn(self._notify())

    def _hold_workspace(self, node: _Node, key: str) -> None:
        self._workspaces[key] = (node, time.monotonic())

    def _expire_workspaces(self) -> None:
        now = time.monotonic()
        for key, (node, since) in list(self._workspaces.items()):
            if now - since > self.settings.workspace_ttl_s:
                del self._workspaces[key]
                self._release(node)
                self._spawn(self._quiet_call(node, "drop_workspace", key))

    def _record_placement(self, node: _Node, labels: dict[str, str]) -> None:
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
        node = await self._acquire(key)
        self._record_placement(node, labels)
        ref = node.actor.create.remote(task, labels)
        outcome = None
        try:
            outcome = await self._call(node, ref, self.settings.create_timeout_s, "create")
            sandbox_id, create_s = self._unwrap(node, outcome)
        except BaseException as e:
            self._release(node)
            if outcome is None and node.alive:  # cancelled or timed out: it may still come
                self._spawn(self._reclaim(node, ref))
            if getattr(e, "error_class", None) not in _TASK_ERRORS and isinstance(
                e, RemoteSandboxError
            ):
                node.cooldown_until = time.monotonic() + self.settings.failure_cooldown_s
            raise
        node.images.add(key)
        return RaySandbox(self, node, sandbox_id, dict(labels), create_s)

    async def _reclaim(self, node: _Node, ref: Any) -> None:
        """Remove the sandbox of a create whose caller gave up, should it still be made."""
        try:
            outcome = await asyncio.wait_for(
                asyncio.wrap_future(ref.future()), self.settings.create_timeout_s
            )
        except BaseException:  # noqa: BLE001 - failed or cancelled: nothing was made
            return
        if outcome[0] == "ok" and node.alive:
            await self._quiet_call(node, "destroy", outcome[1][0])

    async def destroy(self, sandbox: RaySandbox) -> None:  # type: ignore[override]
        if sandbox.holds_slot:
            sandbox.holds_slot = False
            self._release(sandbox._node)
        node = sandbox._node
        if node.alive:
            self._spawn(self._quiet_call(node, "destroy", sandbox.id))

    async def verify(
        self, task: Task, workspace_tar: bytes, labels: dict[str, str]
    ) -> VerifyResult:
        """On the node holding the workspace (a `RemoteWorkspace`), else on a placed node.
        Never raises: a lost node is an `infrastructure` verdict (masked)."""
        margin = self.settings.call_margin_s
        timeout_s = task.config.verifier_timeout_sec + self.settings.create_timeout_s + margin
        t0 = time.monotonic()
        held = None
        if isinstance(workspace_tar, RemoteWorkspace):
            held = self._workspaces.pop(workspace_tar.key, None)
            node = self.nodes.get(workspace_tar.node_id)
            payload: str | bytes = workspace_tar.key
            try:
                if node is None:
                    raise SandboxLost(f"node {workspace_tar.node_id[:12]} is unknown")
                if held is None:  # its slot expired or the node died: take one again
                    node = await self._acquire(None, node)
            except Exception as e:
                return VerifyResult(None, Verdict.infrastructure, f"verifier node: {e}")
        else:
            try:
                node = await self._acquire(image_key(task, self.image_override))
            except Exception as e:
                return VerifyResult(None, Verdict.infrastructure, f"verifier node: {e}")
            payload = bytes(workspace_tar)
        try:
            ref = node.actor.verify.remote(task, payload, labels)
            result: VerifyResult = await self._call(node, ref, timeout_s, "verify")
        except SandboxLost as e:
            return VerifyResult(None, Verdict.infrastructure, f"[rollouts] {e}")
        finally:
            self._release(node)
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
        node = self.nodes.get(ws.node_id)
        if node is None or not node.alive:
            raise SandboxLost(f"node {ws.node_id[:12]} is gone")
        ref = node.actor.workspace_blobs.remote(ws.key, missing)
        outcome = await self._call(node, ref, self.settings.control_timeout_s, "workspace_blobs")
        blobs: dict[str, bytes] = self._unwrap(node, outcome)
        if set(blobs) != set(missing) or not await asyncio.to_thread(_blobs_match, blobs):
            raise SnapshotError(f"node {ws.node_id[:12]} sent other files than were asked for")
        snap.blobs = blobs
        return snap

    # ---- health and placement, for /metrics and the API -----------------------------------

    def capacity(self) -> int:
        return sum(n.capacity for n in self.nodes.values() if n.alive)

    def live_nodes(self) -> int:
        return sum(1 for n in self.nodes.values() if n.alive)

    async def ready(self) -> bool:
        """Some node can take a sandbox."""
        return any(
            n.alive and n.ready and n.healthy and n.error is None for n in self.nodes.values()
        )

    def stats(self) -> dict[str, Any]:
        """Per node (by Ray node id): capacity, in use, placed, failures, restarts, alive."""
        nodes = {nid: n.describe() for nid, n in self.nodes.items()}
        return {
            "nodes": nodes,
            "capacity": self.capacity(),
            "in_use": sum(n.in_use for n in self.nodes.values() if n.alive),
            "placement_waits": self.placement_waits,
        }

    def placement(self, rollout_id: str) -> dict[str, int]:
        """Samples of this rollout placed per node."""
        return dict(self._by_rollout.get(rollout_id, {}))


def _blobs_match(blobs: dict[str, bytes]) -> bool:
    return all(hashlib.sha256(data).hexdigest() == d for d, data in blobs.items())


def _cancel(ref: Any) -> None:
    import ray

    try:
        ray.cancel(ref)
    except Exception:  # noqa: BLE001 - already finished or its actor is gone
        pass
