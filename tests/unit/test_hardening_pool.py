"""Issue 16, the warm pool: idle containers expire after a TTL, so images and isolation settings
nobody asks for any more stop holding containers (before, two per key were kept forever).

The pool's clock is the test's (sandboxes.pool reads `time.monotonic` only): a container's age
is what the test sets, however slowly the machine runs. The sweeper still sleeps in real time
between passes, at most the TTL (short for that reason); the clock counts its readings, so the
test can wait for a pass that saw the time it set."""

from __future__ import annotations

import asyncio
import itertools
import time
from types import SimpleNamespace
from typing import Any

import pytest

import sandboxes.pool
from sandboxes.pool import ContainerPool, PoolSettings, pool_key

TTL = 0.05
EPS = TTL / 100  # just short of an age, or just past it


class FakeAdapter:
    """Creates, starts and removes containers in memory."""

    def __init__(self) -> None:
        self._ids = itertools.count()
        self.alive: set[str] = set()

    async def create_container(self, args: dict[str, Any]) -> str:
        cid = f"c{next(self._ids)}-{args['image']}"
        self.alive.add(cid)
        return cid

    async def start(self, cid: str) -> None:
        pass

    async def remove(self, cid: str) -> None:
        self.alive.discard(cid)


class Clock:
    """Stands still until `now` is set; counts its readings."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.readings = 0

    def monotonic(self) -> float:
        self.readings += 1
        return self.now


def args(image: str) -> dict[str, Any]:
    return {"image": image, "labels": {}, "host_config": {}}


A, B = pool_key(args("img-a")), pool_key(args("img-b"))


async def until(check: Any, what: str) -> None:
    deadline = time.monotonic() + 5
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def test_idle_containers_expire_after_the_ttl(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(sandboxes.pool, "time", SimpleNamespace(monotonic=clock.monotonic))
    adapter = FakeAdapter()
    settings = PoolSettings(
        warm_per_key=2, idle_ttl_s=TTL, create_rate=1000, create_burst=1000, create_jitter_s=0
    )
    pool = ContainerPool(adapter, "test", settings)  # type: ignore[arg-type]

    def idle() -> dict[str, list[str]]:
        return {k: list(v) for k, v in pool._idle.items()}

    async def one_sweep() -> None:
        """Until the sweeper has looked at the clock as it is now (nothing else reads it)."""
        seen = clock.readings
        await until(lambda: clock.readings > seen, "a pass of the sweeper")

    t0 = clock.now
    try:
        used = [(await pool.acquire(args(image)))[0] for image in ("img-a", "img-b")]
        await until(lambda: sorted(map(len, idle().values())) == [2, 2], "two refills per image")
        assert len(adapter.alive) == 6
        old_a, old_b = idle()[A], idle()[B]
        # img-a stays in use: both of its idle containers are taken and refilled, later.
        clock.now = t0 + 0.6 * TTL
        used += [(await pool.acquire(args("img-a")))[0] for _ in range(2)]
        assert set(used[2:]) == set(old_a)  # taken warm, not created
        await until(lambda: len(idle()[A]) == 2, "img-a's refills")
        fresh_a = idle()[A]
        # Just short of the TTL img-b's pair is kept ...
        clock.now = t0 + TTL - EPS
        await one_sweep()
        assert idle() == {A: fresh_a, B: old_b}
        # ... and just past it, it expires, while img-a's refills, younger, stay.
        clock.now = t0 + TTL + EPS
        await until(lambda: B not in pool._idle, "img-b's pair to expire")
        assert idle() == {A: fresh_a}
        assert set(pool._templates) == {A}  # img-b is forgotten; img-a is still asked for
        await until(lambda: adapter.alive == set(used) | set(fresh_a), "img-b's pair removed")
        # Nobody asks any more: img-a's refills expire a TTL after they became idle.
        clock.now = t0 + 0.6 * TTL + TTL - EPS
        await one_sweep()
        assert idle() == {A: fresh_a}
        clock.now = t0 + 0.6 * TTL + TTL + EPS
        await until(lambda: not pool._idle, "img-a's refills to expire")
        # The containers in use were never touched.
        await until(lambda: adapter.alive == set(used), "img-a's refills removed")
        assert pool._templates == {}  # no key is remembered once nothing of it is kept
    finally:
        await pool.aclose()
    assert adapter.alive == set()
