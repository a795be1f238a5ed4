"""The sandbox nodes of a Ray cluster and their slots, for the Ray backend (ray_backend.py).

Every node that offers the custom resource `rollouts_sandbox` (its value: how many sandboxes
the node may run at once) gets one executor actor (`ray_executor.py`), pinned to the node.
`RayCluster`:

- **polls** the cluster's node table: a node that joins gets an executor and adds capacity at
  once; a node that dies ends its in-flight calls at once with `SandboxLost` (masked:
  `sandbox_error`), and the survivors remove what it left on their engine, if they share it;
- starts executors, pings them, and starts a fresh one when Ray's restarts (`max_restarts`)
  are spent while its node lives;
- **places** each sample on a node with a free slot, preferring a node that already has the
  task's image, then the least loaded; when every slot is taken it waits (up to
  `placement_timeout_s`) for one to free or for a node to join; a workspace kept on its node
  holds its slot until verified (or `workspace_ttl_s`). A calibration's sandbox (the task's
  oracle, `LABEL_CALIBRATION`) is placed beyond the slots when none is free: the task's
  samples wait for its result holding their slots, so waiting for theirs would deadlock (a
  few at a time: the calibrator bounds them);
- bounds every remote call with a timeout (its own timeout plus a margin), so nothing hangs,
  and turns an executor's outcome into its value or the exception it stands for.

Ray is imported only inside functions: without the `ray` extra nothing here loads it.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sandboxes.backend import (
    AgentCausedSandboxFault,
    SandboxExited,
    SandboxUnusable,
    WorkspaceTooLarge,
    WorkspaceUnreadable,
)
from sandboxes.ray_executor import ExecutorConfig, SandboxExecutor

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


class RemoteSandboxError(RuntimeError):
    """A sandbox call failed on its node for a reason outside the agent's reach (masked).
    `error_class`: the class name of the executor's exception, when there was one."""

    error_class: str | None = None


class SandboxLost(RemoteSandboxError):
    """The node or its executor went away (died, removed, restarted, or stopped answering)."""


class NoSandboxCapacity(RemoteSandboxError):
    """No node had a free slot within the placement timeout."""


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
class SandboxNode:
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

    def usable(self, now: float, beyond_capacity: bool = False) -> bool:
        return (
            self.alive
            and self.ready
            and self.healthy
            and self.error is None
            and (beyond_capacity or self.free() > 0)
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


class RayCluster:
    """The cluster's sandbox nodes, their executors and their slots. Start with `start()`;
    `aclose()` has every executor remove the containers it created."""

    def __init__(self, settings: RaySettings, executor_config: ExecutorConfig) -> None:
        self.settings = settings
        self.executor_config = executor_config
        self.nodes: dict[str, SandboxNode] = {}
        self._changed: asyncio.Condition | None = None
        self._poller: asyncio.Task[None] | None = None
        self._start_lock: asyncio.Lock | None = None
        self._started = False
        self._closed = False
        self._owns_ray = False
        self._actor_class: Any = None
        self._background: set[asyncio.Task[Any]] = set()
        self._workspaces: dict[str, tuple[SandboxNode, float]] = {}  # key -> (node, since): slots
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
                node.pinging = self.spawn(self._ping(node))
            elif not node.ready and node.starting is not None and node.starting.done():
                if now - node.start_failed_at >= self.settings.restart_backoff_s:
                    node.starting = self.spawn(self._start_executor(node))  # try again
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
        node = SandboxNode(node_id, address, capacity, self._new_executor(node_id, capacity))
        self.nodes[node_id] = node
        node.starting = self.spawn(self._start_executor(node))
        log.info("sandbox node %s (%s) joined: %d slots", node_id[:12], address, capacity)

    def _replace_executor(self, node: SandboxNode) -> None:
        log.warning("sandbox node %s: starting a new executor", node.node_id[:12])
        node.actor = self._new_executor(node.node_id, node.capacity)
        node.ready = False
        node.restarts += 1
        node.starting = self.spawn(self._start_executor(node))

    async def _start_executor(self, node: SandboxNode) -> None:
        import ray

        try:
            info = await self.call(
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

    async def _ping(self, node: SandboxNode) -> None:
        import ray

        try:
            info = await self.call(
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

    async def _node_died(self, node: SandboxNode, why: str) -> None:
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
                self.spawn(self.quiet_call(other, "reap", [node.node_id]))

    async def quiet_call(self, node: SandboxNode, method: str, *args: Any) -> Any:
        """A control call whose failure only gets logged (best effort: destroy, reap, close)."""
        try:
            ref = getattr(node.actor, method).remote(*args)
            return await self.call(node, ref, self.settings.control_timeout_s, method)
        except Exception as e:  # noqa: BLE001 - best effort
            log.debug("%s on node %s failed: %s", method, node.node_id[:12], e)
            return None

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        """Run `coro` in the background, kept referenced until it ends (`aclose` waits for it)."""
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
            await asyncio.gather(*(self.quiet_call(n, "reap", dead) for n in live))
        await asyncio.gather(*(self.quiet_call(n, "close") for n in live))
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

    # ---- remote calls ---------------------------------------------------------------------

    async def call(self, node: SandboxNode, ref: Any, timeout_s: float, what: str) -> Any:
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

    def unwrap(self, node: SandboxNode, outcome: tuple[Any, ...]) -> Any:
        """An executor's outcome tuple (ray_executor.py) as its value, or the fault it reports."""
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

    # ---- slots ----------------------------------------------------------------------------

    def pick(
        self, key: str | None, now: float, beyond_capacity: bool = False
    ) -> SandboxNode | None:
        """The best node with a free slot (any node, with `beyond_capacity`) for image `key`:
        one that has it, then the least loaded."""
        usable = [n for n in self.nodes.values() if n.usable(now, beyond_capacity)]
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

    async def acquire(
        self, key: str | None, node: SandboxNode | None = None, beyond_capacity: bool = False
    ) -> SandboxNode:
        """A slot: on `node` if given (it must be alive), else on the best node.
        `beyond_capacity`: taken even where every slot is (a calibration's sandbox)."""
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
                    chosen = node if beyond_capacity or node.free() > 0 else None
                else:
                    chosen = self.pick(key, now, beyond_capacity)
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

    def release(self, node: SandboxNode) -> None:
        if node.alive and node.in_use > 0:
            node.in_use -= 1
        self.spawn(self._notify())

    def hold_workspace(self, node: SandboxNode, key: str) -> None:
        """The workspace archived as `key` keeps its sandbox's slot until it is verified."""
        self._workspaces[key] = (node, time.monotonic())

    def take_workspace(self, key: str) -> tuple[SandboxNode, float] | None:
        """The hold of workspace `key`, ended (its slot passes to the caller); None when it
        expired or its node died."""
        return self._workspaces.pop(key, None)

    def _expire_workspaces(self) -> None:
        now = time.monotonic()
        for key, (node, since) in list(self._workspaces.items()):
            if now - since > self.settings.workspace_ttl_s:
                del self._workspaces[key]
                self.release(node)
                self.spawn(self.quiet_call(node, "drop_workspace", key))

    def capacity(self) -> int:
        return sum(n.capacity for n in self.nodes.values() if n.alive)

    def live_nodes(self) -> int:
        return sum(1 for n in self.nodes.values() if n.alive)


def _cancel(ref: Any) -> None:
    import ray

    try:
        ray.cancel(ref)
    except Exception:  # noqa: BLE001 - already finished or its actor is gone
        pass
