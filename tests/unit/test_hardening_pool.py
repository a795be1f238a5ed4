"""Issue 16, the warm pool: idle containers expire after a TTL, so images and isolation settings
nobody asks for any more stop holding containers (before, two per key were kept forever)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from sandboxes.pool import ContainerPool, PoolSettings


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


def args(image: str) -> dict[str, Any]:
    return {"image": image, "labels": {}, "host_config": {}}


async def _scenario() -> None:
    adapter = FakeAdapter()
    settings = PoolSettings(
        warm_per_key=2, idle_ttl_s=0.5, create_rate=1000, create_burst=1000, create_jitter_s=0
    )
    pool = ContainerPool(adapter, "test", settings)  # type: ignore[arg-type]
    try:
        used = [(await pool.acquire(args(image)))[0] for image in ("img-a", "img-b")]
        await asyncio.sleep(0.2)  # refills: two idle containers per image
        assert sum(len(v) for v in pool._idle.values()) == 4
        assert len(adapter.alive) == 6
        # img-a stays in use: taking one refills it, and what is taken is never expired.
        for _ in range(4):
            used.append((await pool.acquire(args("img-a")))[0])
            await asyncio.sleep(0.2)
        await asyncio.sleep(0.5)  # img-b's idle pair is now older than the TTL
        idle = {k: len(v) for k, v in pool._idle.items()}
        assert sum(idle.values()) <= 2, idle  # only img-a's fresh refills remain, if any
        await asyncio.sleep(0.8)  # nobody asks any more: everything idle expires
        assert sum(len(v) for v in pool._idle.values()) == 0
        assert adapter.alive == set(used)  # the containers in use were never touched
        assert pool._templates == {}  # no key is remembered once nothing of it is kept
    finally:
        await pool.aclose()
    assert adapter.alive == set()


def test_idle_containers_expire_after_the_ttl() -> None:
    asyncio.run(_scenario())
