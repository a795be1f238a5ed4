"""Leases with waiting: offer complete groups, wait up to wait_s for one, apply max_staleness
(drop, or hand stale groups back to the scheduler to run again)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from service.metrics import Metrics
from service.store import LeaseResult, Requeued, Store
from service.store.leases import MAX_STALE_REQUEUES

POLL_S = 1.0  # lease expiry is noticed by polling at most this late


@dataclass
class PolicyVersion:
    """The current policy version (tagged on new turns) and the staleness bound: a stale group
    is dropped, or re-run (requeue) up to `max_requeues` times and then dropped."""

    version: int = 0
    max_staleness: int | None = None
    stale_policy: Literal["drop", "requeue"] = "drop"
    max_requeues: int = MAX_STALE_REQUEUES


class Leasing:
    def __init__(
        self,
        store: Store,
        policy: PolicyVersion,
        requeue: Callable[[list[Requeued]], Awaitable[None]],
        *,
        lease_ttl_s: float,
        metrics: Metrics | None = None,
    ) -> None:
        self.store = store
        self.policy = policy
        self.requeue = requeue
        self.lease_ttl_s = lease_ttl_s
        self.metrics = metrics
        self._ready = asyncio.Event()

    def notify(self) -> None:
        """A group became complete (or was released): wake waiting leases."""
        self._ready.set()

    async def lease(
        self,
        max_groups: int,
        rollout_id: str | None,
        wait_s: float,
        lease_s: float | None,
        regraded: bool = False,
    ) -> LeaseResult | None:
        """Complete groups, or with `regraded` groups regraded after a trainer had them."""
        deadline = time.monotonic() + wait_s
        while True:
            self._ready.clear()
            # Shielded: a long poll cancelled (its client gone) while the store re-queued stale
            # groups must still hand them to the scheduler, or they would wait, pending in the
            # store but in no queue, until the next restart.
            result = await asyncio.shield(
                self._lease_once(max_groups, rollout_id, lease_s or self.lease_ttl_s, regraded)
            )
            if result.batch_id is not None:
                return result
            left = deadline - time.monotonic()
            # A rollout whose every group was acknowledged or dropped will never offer another
            # (a stale group re-run is not acknowledged yet): waiting would only hold the
            # trainer up. Regraded groups may still come, from a regrade.
            if rollout_id is not None and not regraded and left > 0:
                if await self.store.remaining_groups(rollout_id) == 0:
                    left = 0
            if left <= 0:
                if self.metrics is not None:
                    self.metrics.leases.labels("empty").inc()
                return None
            try:
                await asyncio.wait_for(self._ready.wait(), timeout=min(left, POLL_S))
            except TimeoutError:
                pass

    async def _lease_once(
        self, max_groups: int, rollout_id: str | None, lease_s: float, regraded: bool
    ) -> LeaseResult:
        if regraded:
            result = await self.store.lease_regraded(
                max_groups=max_groups, rollout_id=rollout_id, lease_s=lease_s
            )
        else:
            result = await self.store.lease(
                max_groups=max_groups,
                rollout_id=rollout_id,
                lease_s=lease_s,
                policy_version=self.policy.version,
                max_staleness=self.policy.max_staleness,
                stale_policy=self.policy.stale_policy,
                max_requeues=self.policy.max_requeues,
            )
        self._count(result)
        if result.requeued:
            await self.requeue(result.requeued)
        return result

    def _count(self, result: LeaseResult) -> None:
        if self.metrics is None:
            return
        m = self.metrics
        if result.batch_id is not None:
            m.leases.labels("granted").inc()
        if result.expired_leases:
            m.leases.labels("expired").inc(result.expired_leases)
        if result.dropped_stale > result.requeues_spent:
            m.groups_dropped_stale.labels("drop").inc(result.dropped_stale - result.requeues_spent)
        if result.requeues_spent:
            m.groups_dropped_stale.labels("requeue_limit").inc(result.requeues_spent)
        if result.requeued:
            m.groups_dropped_stale.labels("requeue").inc(len(result.requeued))
