"""`Store`: the async way into the database. Each method is one job on the writer thread
(service/store/writer.py), whose result comes back after its transaction commits; the SQL lives
in rollouts.py (rollouts, samples, commits), leases.py (leases, acks, staleness), workspaces.py
(final workspaces kept for regrading) and regrades.py (gradings, regraded groups' offers)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from service.advantages import AdvantageConfig
from service.payload_codec import encode_payload
from service.store import leases, regrades, rollouts, workspaces
from service.store.records import (
    AckResult,
    CommitResult,
    GroupPlan,
    LeaseResult,
    PendingGroup,
    RolloutSummary,
)
from service.store.schema import DB_NAME, SCHEMA, connect
from service.store.writer import DbThread
from service.trajectory import Grading, Trajectory

T = TypeVar("T")
log = logging.getLogger(__name__)
PURGE_BATCH = 2000
# An older database without incremental auto-vacuum is converted (VACUUM) on open only while
# it is this small; a bigger one reuses freed pages but does not shrink.
VACUUM_ON_OPEN_MAX_BYTES = 1 << 30


class Store:
    """Async facade; every method is one job on the database thread."""

    def __init__(self, data_dir: Path, *, synchronous: str = "FULL", recover: bool = True) -> None:
        """`recover`: on open, end the leases a previous process left (False: another process,
        a running service, still holds them; `rollouts regrade` on its data dir)."""
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / DB_NAME
        self._synchronous = synchronous
        self._recover = recover
        self._workspace_bytes = 0  # what kept workspaces added, for the disk estimate
        self._db: DbThread | None = None
        self._state = rollouts.WriterState()
        self._payload_bytes = 0  # committed payload sizes, for the disk estimate
        self._payloads = 0

    # -- lifecycle

    def open(self) -> None:
        """Create or reopen the database. Leases left active by a previous process are expired
        and their groups offered again; regraded groups left unsettled are settled; unfinished
        samples stay pending for the scheduler."""
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
        if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
            if self.path.stat().st_size <= VACUUM_ON_OPEN_MAX_BYTES:
                conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
                conn.execute("VACUUM")
            else:
                log.warning("%s: no incremental auto-vacuum; space freed by retention is "
                            "reused, not returned to the file system", self.path)  # fmt: skip
        n, total = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(data)), 0) FROM payloads"
        ).fetchone()
        self._payloads, self._payload_bytes = n, total
        self._workspace_bytes = conn.execute(
            "SELECT COALESCE(SUM(stored), 0) FROM workspaces"
        ).fetchone()[0]
        seq = conn.execute("SELECT COALESCE(MAX(ready_seq), 0) FROM groups").fetchone()[0]
        self._state.ready_seq = seq
        # A regrade killed between recording gradings and settling their group: settle it now
        # (gradings and advantages together; a group out to a trainer waits for its ack). Only
        # then does a store opened beside a running service (`recover` off) write on open.
        if self._recover or regrades.unsettled(conn):
            conn.execute("BEGIN IMMEDIATE")
            if self._recover:
                leases.recover(conn)
                regrades.recover(conn)
            for group_id in regrades.unsettled(conn):
                regrades.settle(conn, self._state, group_id)
            conn.execute("COMMIT")

    def _submit(
        self, fn: Callable[[sqlite3.Connection], T], *, bare: bool = False
    ) -> concurrent.futures.Future[T]:
        if self._db is None:
            raise RuntimeError("store is not open")
        return self._db.submit(fn, bare=bare)

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await asyncio.wrap_future(self._submit(fn))

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
        *,
        idempotency: tuple[str, str] | None = None,
    ) -> str:
        """The rollout's id: `rollout_id`, or with `idempotency` (key, request digest) the
        rollout that key already made (then nothing is created; IdempotencyConflict when the
        digest differs)."""
        created = await self._call(
            lambda conn: rollouts.create(
                conn, rollout_id, request_json, priority, advantage, groups, idempotency
            )
        )
        if created == rollout_id:
            self._state.advantage[rollout_id] = advantage
        return created

    async def idempotent_rollout(self, key: str, digest: str) -> str | None:
        """The rollout an Idempotency-Key made (None: unused; IdempotencyConflict: the key
        was used for another request)."""
        return await self._call(lambda conn: rollouts.idempotent_rollout(conn, key, digest))

    async def rollout_summary(self, rollout_id: str) -> RolloutSummary:
        return await self._call(lambda conn: rollouts.summary(conn, rollout_id))

    async def rollout_exists(self, rollout_id: str) -> bool:
        return await self._call(lambda conn: rollouts.exists(conn, rollout_id))

    async def rollout_request(self, rollout_id: str) -> str:
        return await self._call(lambda conn: rollouts.request(conn, rollout_id))

    async def oldest_version(self, group_id: str) -> int | None:
        """The oldest policy version among the group's committed samples (None: none yet)."""
        return await self._call(lambda conn: rollouts.oldest_version(conn, group_id))

    async def pending_groups(self) -> list[PendingGroup]:
        """Samples of running rollouts that have no committed trajectory yet."""
        return await self._call(rollouts.pending_groups)

    # -- trajectories

    async def commit_trajectory(self, trajectory: Trajectory) -> CommitResult:
        payload = encode_payload(trajectory)  # compress on the caller's side, not the db thread
        # Its final workspace (KeptWorkspace), if kept: in the same transaction.
        kept: workspaces.KeptWorkspace | None = trajectory._workspace

        def job(conn: sqlite3.Connection) -> tuple[CommitResult, int]:
            result = rollouts.commit(conn, self._state, trajectory, payload)
            if kept is None or result.duplicate:
                return result, 0
            return result, workspaces.put_or_skip(conn, trajectory.trajectory_id, kept)

        result, kept_bytes = await self._call(job)
        if not result.duplicate:
            self._payloads += 1
            self._payload_bytes += len(payload)
            self._workspace_bytes += kept_bytes
        return result

    def mean_payload_bytes(self) -> float | None:
        """The mean size of the payloads committed (None before the first)."""
        return self._payload_bytes / self._payloads if self._payloads else None

    def mean_workspace_bytes(self) -> float:
        """What a trajectory's kept workspace added to the store on average (0 before any)."""
        return self._workspace_bytes / self._payloads if self._payloads else 0.0

    # -- final workspaces and regrades (workspaces.py, regrades.py)

    async def known_blobs(self, digests: list[str]) -> set[str]:
        """Which of these workspace blobs the store holds already."""
        return await self._call(lambda conn: workspaces.known(conn, digests))

    async def load_workspace(self, trajectory_id: str) -> workspaces.StoredWorkspace | None:
        """A kept workspace rebuilt (None: none kept), read and decompressed on a worker
        thread through a read-only connection, not on the writer."""

        def read() -> workspaces.StoredWorkspace | None:
            conn = connect(self.path, readonly=True)
            try:
                return workspaces.load(conn, trajectory_id)
            finally:
                conn.close()

        return await asyncio.to_thread(read)

    async def workspace_stats(self) -> workspaces.WorkspaceStats:
        return await self._call(workspaces.stats)

    async def regrade_candidates(
        self, rollout_id: str | None, task_ids: list[str] | None
    ) -> list[regrades.Candidate]:
        return await self._call(lambda conn: regrades.candidates(conn, rollout_id, task_ids))

    async def grading_history(self, trajectory_id: str) -> list[dict[str, Any]]:
        """A trajectory's gradings, oldest first (dicts of Grading's fields)."""
        return await self._call(lambda conn: regrades.grading_history(conn, trajectory_id))

    async def record_grading(
        self, trajectory_id: str, grading: Grading, output: str
    ) -> regrades.Recorded | None:
        """Record a regrade's grading, served once its group is settled (None: this grader
        already graded these tests)."""
        return await self._call(lambda conn: regrades.record(conn, trajectory_id, grading, output))

    async def settle_regraded(self, group_ids: list[str]) -> list[regrades.Settled]:
        """Serve groups' new gradings with their advantages recomputed, and offer those a
        trainer had (a group out to a trainer waits for its ack)."""

        def job(conn: sqlite3.Connection) -> list[regrades.Settled]:
            done = [regrades.settle(conn, self._state, g) for g in group_ids]
            return [s for s in done if s is not None]

        return await self._call(job)

    async def lease_regraded(
        self, *, max_groups: int, rollout_id: str | None, lease_s: float
    ) -> LeaseResult:
        """Lease regraded groups (see regrades.py); released at once if the caller leaves."""
        fut = self._submit(
            lambda conn: regrades.lease(
                conn, max_groups=max_groups, rollout_id=rollout_id, lease_s=lease_s
            )
        )
        try:
            return await asyncio.shield(asyncio.wrap_future(fut))
        except asyncio.CancelledError:
            fut.add_done_callback(self._release_granted)
            raise

    async def remaining_regraded(self, rollout_id: str | None = None) -> int:
        return await self._call(lambda conn: regrades.remaining(conn, rollout_id))

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
        max_requeues: int = leases.MAX_STALE_REQUEUES,
    ) -> LeaseResult:
        """Lease complete groups. If the caller is cancelled (its client went away) while the
        job runs, a lease the job still grants is released at once, never left to expire."""
        fut = self._submit(
            lambda conn: leases.lease(
                conn,
                max_groups=max_groups,
                rollout_id=rollout_id,
                lease_s=lease_s,
                policy_version=policy_version,
                max_staleness=max_staleness,
                stale_policy=stale_policy,
                max_requeues=max_requeues,
            )
        )
        try:
            return await asyncio.shield(asyncio.wrap_future(fut))
        except asyncio.CancelledError:
            fut.add_done_callback(self._release_granted)
            raise

    def _release_granted(self, fut: concurrent.futures.Future[LeaseResult]) -> None:
        if fut.cancelled() or fut.exception() is not None or self._db is None:
            return
        batch_id = fut.result().batch_id
        if batch_id is not None:
            self._db.submit(lambda conn: _release(conn, batch_id))

    async def release(self, batch_id: str) -> int:
        """Offer an active lease's groups again now (its client is gone); how many."""
        return await self._call(lambda conn: _release(conn, batch_id))

    async def ack(self, batch_id: str) -> AckResult:
        def job(conn: sqlite3.Connection) -> AckResult:
            result = leases.ack(conn, batch_id)
            regrades.ack(conn, batch_id)  # a batch of regraded groups
            # Regrades of these groups waited for this ack: served and offered now.
            for group_id in regrades.unsettled(conn, batch_id):
                regrades.settle(conn, self._state, group_id)
            return result

        return await self._call(job)

    async def remaining_groups(self, rollout_id: str | None = None) -> int:
        """Groups that may still be delivered: not yet acked or dropped."""
        return await self._call(lambda conn: leases.remaining_groups(conn, rollout_id))

    async def group_states(self) -> dict[str, int]:
        return await self._call(leases.group_states)

    # -- retention

    async def purge(self, retention_s: float, now: float | None = None) -> int:
        """Delete the payloads of groups acknowledged (or dropped) more than `retention_s`
        ago, in short jobs so commits and leases interleave, then give the space back to the
        file system. Returns the number of payloads deleted."""
        cutoff = (time.time() if now is None else now) - retention_s
        total = 0
        while True:
            n = await self._call(lambda conn: leases.purge(conn, cutoff, PURGE_BATCH))
            total += n
            if n < PURGE_BATCH:
                break
        # Kept workspaces go with their payloads (and blobs with their last workspace).
        gone = 0
        while True:
            n = await self._call(lambda conn: workspaces.purge_orphans(conn, PURGE_BATCH))
            gone += n
            if n < PURGE_BATCH:
                break
        if gone:
            self._workspace_bytes = await self._call(
                lambda conn: conn.execute(
                    "SELECT COALESCE(SUM(stored), 0) FROM workspaces"
                ).fetchone()[0]
            )
        if total or gone:
            await self.reclaim()
        return total

    async def reclaim(self) -> None:
        """Return free pages to the file system and cut the WAL back (outside a transaction)."""

        def job(conn: sqlite3.Connection) -> None:
            # executescript steps the pragma to its end (a plain execute frees one page).
            conn.executescript("PRAGMA incremental_vacuum;")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

        await asyncio.wrap_future(self._submit(job, bare=True))

    def disk_bytes(self) -> int:
        """The database's files (main, WAL, shared memory) on disk."""
        total = 0
        for suffix in ("", "-wal", "-shm"):
            try:
                total += (self.path.parent / (self.path.name + suffix)).stat().st_size
            except OSError:
                pass
        return total

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


def _release(conn: sqlite3.Connection, batch_id: str) -> int:
    """A lease handed back at once: its groups, or its regraded groups, offered again."""
    return leases.release(conn, batch_id) + regrades.release(conn, batch_id)
