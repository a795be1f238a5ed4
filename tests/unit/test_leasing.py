"""service/leasing.py: a long poll that is cancelled (its client went away) at any point still
hands the groups the store re-queued to the scheduler."""

from __future__ import annotations

import asyncio

from service.leasing import Leasing, PolicyVersion
from service.store import LeaseResult, Requeued

STALE = Requeued("r1", "g1", "t1", ["new-0", "new-1"])


class StaleOnce:
    """A store whose first lease re-queues one stale group (committed in the store), then
    finds nothing."""

    def __init__(self) -> None:
        self.leases = 0

    async def lease(self, **_: object) -> LeaseResult:
        self.leases += 1
        await asyncio.sleep(0)
        return LeaseResult(None, 0.0, [], requeued=[STALE] if self.leases == 1 else [])


async def test_a_cancelled_long_poll_still_requeues_what_the_store_requeued() -> None:
    handed: list[Requeued] = []
    entered, release = asyncio.Event(), asyncio.Event()

    async def requeue(groups: list[Requeued]) -> None:
        entered.set()
        await release.wait()  # the scheduler is busy: the poll is cancelled meanwhile
        handed.extend(groups)

    store = StaleOnce()
    leasing = Leasing(store, PolicyVersion(), requeue, lease_ttl_s=600)  # type: ignore[arg-type]
    poll = asyncio.create_task(leasing.lease(8, None, wait_s=30, lease_s=None))
    await asyncio.wait_for(entered.wait(), 5)
    poll.cancel()
    await asyncio.sleep(0.05)
    assert poll.cancelled()
    release.set()
    for _ in range(100):
        if handed:
            break
        await asyncio.sleep(0.01)
    assert handed == [STALE]
    assert store.leases == 1


class Delivered:
    """A store with no group ready, and `left` groups of the rollout not yet acknowledged."""

    def __init__(self, left: int) -> None:
        self.left = left

    async def lease(self, **_: object) -> LeaseResult:
        return LeaseResult(None, 0.0, [])

    async def remaining_groups(self, rollout_id: str | None = None) -> int:
        return self.left


async def _noop(groups: list[Requeued]) -> None:
    pass


async def test_a_rollout_with_nothing_left_answers_at_once_without_waiting() -> None:
    done = Leasing(Delivered(0), PolicyVersion(), _noop, lease_ttl_s=600)  # type: ignore[arg-type]
    t0 = asyncio.get_running_loop().time()
    assert await done.lease(8, "r1", wait_s=30, lease_s=None) is None
    assert asyncio.get_running_loop().time() - t0 < 5
    # Groups still to come: the poll waits them out (here briefly).
    busy = Leasing(Delivered(1), PolicyVersion(), _noop, lease_ttl_s=600)  # type: ignore[arg-type]
    t0 = asyncio.get_running_loop().time()
    assert await busy.lease(8, "r1", wait_s=0.5, lease_s=None) is None
    assert asyncio.get_running_loop().time() - t0 >= 0.5
    # Without a rollout id new rollouts may come: it waits too.
    t0 = asyncio.get_running_loop().time()
    assert await done.lease(8, None, wait_s=0.5, lease_s=None) is None
    assert asyncio.get_running_loop().time() - t0 >= 0.5
