"""Warm pool of started containers, with rate-limited, bounded container creation.

Creating and starting a container costs a few hundred milliseconds and stresses the engine when
hundreds of samples start at once. So containers are created ahead of time per pool key (image
plus isolation settings), handed out on demand, and refilled in the background. Creates pass a
token bucket (with jitter, so a burst of samples does not hit the engine in lockstep) and a
concurrency bound. Every container id is tracked from the moment the engine returns it, even
when the caller is cancelled, so `aclose` can remove everything this process created.

Idle containers expire: one left unused for `idle_ttl_s` is removed and not replaced (refills
happen only when a container is taken), so images and isolation settings that are no longer
asked for stop costing containers.

Refills yield to verifications. A refill is ~0.3 CPU-seconds of the engine's work (create and
start), and a verification is the last step before a sample's reward: at the end of a batch,
when every sample verifies at once and the trainer waits for the last one, refills for the next
batch would take that CPU from them. So a refill waits while any verification is running, for
at most `refill_defer_s`; under steady load the pool then runs low and `acquire` creates on
demand, which costs the same CPU at the sample's start instead of its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import random
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from sandboxes.docker_adapter import DockerAdapter
from sandboxes.isolation import LABEL_BACKEND, LABEL_POOL, LABEL_POOL_KEY

log = logging.getLogger(__name__)


@dataclass
class TokenBucket:
    """`rate` tokens per second, at most `burst` saved up; `acquire` adds up to `jitter_s`."""

    rate: float
    burst: float
    jitter_s: float = 0.05
    _tokens: float = field(init=False)
    _last: float = field(init=False)
    _lock: asyncio.Lock = field(init=False, default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        self._tokens = self.burst
        self._last = time.monotonic()

    async def acquire(self) -> None:
        async with self._lock:
            while True:
                now = time.monotonic()
                self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
                self._last = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    break
                await asyncio.sleep((1 - self._tokens) / self.rate)
        if self.jitter_s > 0:
            await asyncio.sleep(random.uniform(0, self.jitter_s))


def pool_key(args: dict[str, Any]) -> str:
    """Containers are interchangeable when image and isolation settings match (labels aside)."""
    material = {k: v for k, v in args.items() if k != "labels"}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class PoolSettings:
    warm_per_key: int = 2  # idle started containers kept per key; 0 disables the pool
    idle_ttl_s: float = 300.0  # an idle container unused this long is removed, not refilled
    create_rate: float = 8.0  # container creates per second, sustained
    create_burst: float = 8.0
    create_jitter_s: float = 0.05
    max_concurrent_creates: int = 8
    refill_defer_s: float = 10.0  # longest a refill waits for running verifications to end


class ContainerPool:
    """Creates, hands out and removes containers for one backend instance."""

    def __init__(self, adapter: DockerAdapter, backend_id: str, settings: PoolSettings) -> None:
        self.adapter = adapter
        self.backend_id = backend_id
        self.settings = settings
        self._bucket = TokenBucket(
            settings.create_rate, settings.create_burst, settings.create_jitter_s
        )
        self._create_sem = asyncio.Semaphore(settings.max_concurrent_creates)
        self._idle: dict[str, list[str]] = defaultdict(list)
        self._idle_since: dict[str, float] = {}  # container id -> when it became idle
        self._sweeper: asyncio.Task[None] | None = None
        self._refilling: dict[str, int] = defaultdict(int)
        self._templates: dict[str, dict[str, Any]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._creating: set[asyncio.Future[str]] = set()  # engine create calls in flight
        self.live: set[str] = set()  # every container created and not yet removed
        self._closed = False
        self._verifying = 0  # verifications running; refills wait for 0 (see the docstring)
        self._no_verification = asyncio.Event()
        self._no_verification.set()

    def pool_labels(self) -> dict[str, str]:
        return {LABEL_POOL: "true", LABEL_BACKEND: self.backend_id}

    async def acquire(self, args: dict[str, Any], warm: bool = True) -> tuple[str, float]:
        """A started container for `args`: a warm one if available and `warm`, else a new one.
        Returns (id, seconds taken)."""
        if self._closed:
            raise RuntimeError("container pool is closed")
        t0 = time.monotonic()
        if self.settings.warm_per_key <= 0 or not warm:
            cid = await self._create_started(args)
            return cid, time.monotonic() - t0
        key = pool_key(args)
        pooled = {**args, "labels": {**args["labels"], **self.pool_labels(), LABEL_POOL_KEY: key}}
        self._templates[key] = pooled
        idle = self._idle[key]
        cid = idle.pop() if idle else None
        if cid is not None:
            self._idle_since.pop(cid, None)
        self._refill(key)
        if cid is None:
            cid = await self._create_started(pooled)
        return cid, time.monotonic() - t0

    @contextlib.asynccontextmanager
    async def verifying(self) -> AsyncIterator[None]:
        """Marks a verification running: refills wait until none is (bounded)."""
        self._verifying += 1
        self._no_verification.clear()
        try:
            yield
        finally:
            self._verifying -= 1
            if self._verifying == 0:
                self._no_verification.set()

    def _refill(self, key: str) -> None:
        missing = self.settings.warm_per_key - len(self._idle[key]) - self._refilling[key]
        for _ in range(max(0, missing)):
            self._refilling[key] += 1
            self._spawn(self._refill_one(key))

    async def _refill_one(self, key: str) -> None:
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._no_verification.wait(), self.settings.refill_defer_s)
            cid = await self._create_started(self._templates[key])
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a failed refill only costs warmth; the next acquire retries
            log.warning("warm pool refill failed: %s", e)
            return
        finally:
            self._refilling[key] -= 1
        if self._closed:
            await self.remove(cid)
        else:
            self._idle[key].append(cid)
            self._idle_since[cid] = time.monotonic()
            if self._sweeper is None or self._sweeper.done():
                self._sweeper = asyncio.ensure_future(self._expire_idle())

    async def _expire_idle(self) -> None:
        """Remove idle containers older than the TTL; ends when none is idle."""
        ttl = self.settings.idle_ttl_s
        while not self._closed:
            now = time.monotonic()
            next_due: float | None = None
            for key, cids in list(self._idle.items()):
                for cid in list(cids):
                    since = self._idle_since.get(cid, now)
                    if now - since >= ttl:
                        cids.remove(cid)
                        self._idle_since.pop(cid, None)
                        self._spawn(self.remove(cid))
                    else:
                        due = since + ttl
                        next_due = due if next_due is None else min(next_due, due)
                if not cids and not self._refilling.get(key):
                    # Nothing of this key is kept any more: forget it until it is asked for.
                    self._idle.pop(key, None)
                    self._refilling.pop(key, None)
                    self._templates.pop(key, None)
            if next_due is None:
                return
            await asyncio.sleep(max(0.05, next_due - now))

    async def _create_started(self, args: dict[str, Any]) -> str:
        await self._bucket.acquire()
        async with self._create_sem:
            fut = asyncio.ensure_future(self.adapter.create_container(args))
            self._creating.add(fut)
            fut.add_done_callback(self._creating.discard)
            try:
                cid = await asyncio.shield(fut)
            except asyncio.CancelledError:
                # The engine may still create it: track and remove it when the call returns.
                fut.add_done_callback(self._remove_when_created)
                raise
            self.live.add(cid)
            try:
                await self.adapter.start(cid)
            except BaseException:
                self._spawn(self.remove(cid))
                raise
            return cid

    def _remove_when_created(self, fut: asyncio.Future[str]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        self.live.add(fut.result())
        self._spawn(self.remove(fut.result()))

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def remove(self, cid: str) -> None:
        try:
            await self.adapter.remove(cid)
        except Exception as e:
            log.warning("removing container %s failed: %s", cid[:12], e)
            return
        self.live.discard(cid)

    def remove_in_background(self, cid: str) -> None:
        self._spawn(self.remove(cid))

    async def aclose(self) -> None:
        """Stop refilling, wait for pending work, remove every container still alive."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        for task in list(self._tasks):
            if not task.done() and task.get_coro().__qualname__.endswith("_refill_one"):  # type: ignore[union-attr]
                task.cancel()
        # Creates outlive a cancelled caller (shielded); their done-callbacks spawn removals.
        while self._tasks or self._creating:
            await asyncio.gather(*self._tasks, *self._creating, return_exceptions=True)
            await asyncio.sleep(0)  # let done-callbacks of finished creates run
        self._idle.clear()
        await asyncio.gather(*(self.remove(cid) for cid in list(self.live)), return_exceptions=True)
