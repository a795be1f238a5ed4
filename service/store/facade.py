"""`Store`: the async way into the database. Each method is one job on the writer thread
(service/store/writer.py), whose result comes back after its transaction commits; the SQL lives
in rollouts.py (rollouts, samples, commits) and leases.py (leases, acks, staleness)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeVar

from service.advantages import AdvantageConfig
from service.payload_codec import encode_payload
from service.store import leases, rollouts
from service.store.records import (
    AckResult,
    CommitResult,
    GroupPlan,
    LeaseResult,
    PendingGroup,
    RolloutSummary,
)
from service.store.schema import DB_NAME, SCHEMA
from service.store.writer import DbThread
from service.trajectory import Trajectory

T = TypeVar("T")


class Store:
    """Async facade; every method is one job on the database thread."""

    def __init__(self, data_dir: Path, *, synchronous: str = "FULL") -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / DB_NAME
        self._synchronous = synchronous
        self._db: DbThread | None = None
        self._state = rollouts.WriterState()

    # -- lifecycle

    def open(self) -> None:
        """Create or reopen the database. Leases left active by a previous process are expired
        and their groups offered again; unfinished samples stay pending for the scheduler."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        db = DbThread(self.path, self._synchronous)
        db.init = self._init
        db.start()
        self._db = db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _init(self, conn: sqlite3.Connection) -> None:
        conn.executescript(SCHEMA)
        conn.execute("BEGIN IMMEDIATE")
        leases.recover(conn)
        conn.execute("COMMIT")
        seq = conn.execute("SELECT COALESCE(MAX(ready_seq), 0) FROM groups").fetchone()[0]
        self._state.ready_seq = seq

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._db is None:
            raise RuntimeError("store is not open")
        return await asyncio.wrap_future(self._db.submit(fn))

    def call_sync(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """For scripts and tests without an event loop."""
        if self._db is None:
            raise RuntimeError("store is not open")
        return self._db.submit(fn).result()

    # -- rollouts

    async def create_rollout(
        self,
        rollout_id: str,
        request_json: str,
        priority: int,
        advantage: AdvantageConfig,
        groups: list[GroupPlan],
    ) -> None:
        await self._call(
            lambda conn: rollouts.create(
                conn, rollout_id, request_json, priority, advantage, groups
            )
        )
        self._state.advantage[rollout_id] = advantage

    async def rollout_summary(self, rollout_id: str) -> RolloutSummary:
        return await self._call(lambda conn: rollouts.summary(conn, rollout_id))

    async def rollout_exists(self, rollout_id: str) -> bool:
        return await self._call(lambda conn: rollouts.exists(conn, rollout_id))

    async def rollout_request(self, rollout_id: str) -> str:
        return await self._call(lambda conn: rollouts.request(conn, rollout_id))

    async def pending_groups(self) -> list[PendingGroup]:
        """Samples of running rollouts that have no committed trajectory yet."""
        return await self._call(rollouts.pending_groups)

    # -- trajectories

    async def commit_trajectory(self, trajectory: Trajectory) -> CommitResult:
        payload = encode_payload(trajectory)  # compress on the caller's side, not the db thread
        return await self._call(
            lambda conn: rollouts.commit(conn, self._state, trajectory, payload)
        )

    async def cancel_rollout(self, rollout_id: str, policy_version: int) -> list[str]:
        """Mark the rollout cancelled and every unfinished sample `cancelled` (masked). Returns
        the ids of the groups this completed."""
        return await self._call(
            lambda conn: rollouts.cancel(conn, self._state, rollout_id, policy_version)
        )

    # -- leasing

    async def lease(
        self,
        *,
        max_groups: int,
        rollout_id: str | None,
        lease_s: float,
        policy_version: int,
        max_staleness: int | None,
        stale_policy: Literal["drop", "requeue"],
    ) -> LeaseResult:
        return await self._call(
            lambda conn: leases.lease(
                conn,
                max_groups=max_groups,
                rollout_id=rollout_id,
                lease_s=lease_s,
                policy_version=policy_version,
                max_staleness=max_staleness,
                stale_policy=stale_policy,
            )
        )

    async def ack(self, batch_id: str) -> AckResult:
        return await self._call(lambda conn: leases.ack(conn, batch_id))

    async def remaining_groups(self, rollout_id: str | None = None) -> int:
        """Groups that may still be delivered: not yet acked or dropped."""
        return await self._call(lambda conn: leases.remaining_groups(conn, rollout_id))

    async def group_states(self) -> dict[str, int]:
        return await self._call(leases.group_states)

    # -- policy version (persisted so a restart keeps tagging turns correctly)

    async def get_policy(self) -> tuple[int, int | None]:
        def job(conn: sqlite3.Connection) -> tuple[int, int | None]:
            meta = dict(conn.execute("SELECT key, value FROM meta"))
            ms = meta.get("max_staleness")
            return int(meta.get("policy_version", 0)), (int(ms) if ms not in (None, "") else None)

        return await self._call(job)

    async def set_policy(self, version: int, max_staleness: int | None) -> None:
        def job(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                [
                    ("policy_version", str(version)),
                    ("max_staleness", "" if max_staleness is None else str(max_staleness)),
                ],
            )

        await self._call(job)
