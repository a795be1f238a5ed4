"""Durable state of the service: SQLite in WAL mode under --data-dir.

Tables: rollouts (request JSON, status), groups (pending/complete/leased/acked/dropped),
samples (one row per trajectory id: pending/done, status, reward, advantage), payloads (the
trajectory record, compressed JSON, on disk), leases (batch_id, expires_at, state), meta
(policy version).

Every SQLite call runs on one dedicated thread holding the only connection. Jobs that arrive
while a transaction runs are folded into the next one (group commit), each inside its own
SAVEPOINT so one failing job does not undo its neighbours. A job's result is handed back only
after COMMIT returns, so a trajectory is durable before any lease can deliver it, and a lease is
durable before its batch id reaches the trainer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from service.advantages import AdvantageConfig, compute_advantages

# Re-exported: the API and tests read stored payloads through the store's names.
from service.payload_codec import (  # noqa: F401
    CODEC,
    encode_payload,
    payload_dict,
    payloads_to_arrow,
    with_advantage,
)
from service.trajectory import Status, Trajectory, is_masked

log = logging.getLogger(__name__)
T = TypeVar("T")

DB_NAME = "rollouts.sqlite3"
MAX_JOBS_PER_TRANSACTION = 1024

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rollouts (
    id TEXT PRIMARY KEY,
    request TEXT NOT NULL,
    status TEXT NOT NULL,            -- running / completed / cancelled
    priority INTEGER NOT NULL,
    estimator TEXT NOT NULL,
    min_group_size INTEGER NOT NULL,
    drop_zero_variance INTEGER NOT NULL,
    groups_total INTEGER NOT NULL,
    samples_total INTEGER NOT NULL,
    created_at REAL NOT NULL,
    finished_at REAL
);
CREATE TABLE IF NOT EXISTS groups (
    group_id TEXT PRIMARY KEY,
    rollout_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    n_samples INTEGER NOT NULL,
    n_done INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL,             -- pending / complete / leased / acked / dropped
    priority INTEGER NOT NULL,
    ready_seq INTEGER,
    batch_id TEXT,
    version_min INTEGER,
    attempt INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS groups_ready ON groups (state, priority DESC, ready_seq);
CREATE INDEX IF NOT EXISTS groups_rollout ON groups (rollout_id, state);
CREATE INDEX IF NOT EXISTS groups_batch ON groups (batch_id);
CREATE TABLE IF NOT EXISTS samples (
    trajectory_id TEXT PRIMARY KEY,
    rollout_id TEXT NOT NULL,
    group_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    sample_index INTEGER NOT NULL,
    state TEXT NOT NULL,             -- pending / done
    status TEXT,
    reward REAL,
    version_start INTEGER,
    tokens INTEGER,
    advantage REAL
);
CREATE INDEX IF NOT EXISTS samples_group ON samples (group_id, sample_index);
CREATE INDEX IF NOT EXISTS samples_rollout ON samples (rollout_id, state);
CREATE TABLE IF NOT EXISTS payloads (
    trajectory_id TEXT PRIMARY KEY,
    codec TEXT NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS leases (
    batch_id TEXT PRIMARY KEY,
    state TEXT NOT NULL,             -- active / acked / expired
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    acked_at REAL,
    n_groups INTEGER NOT NULL
);
"""


class StoreError(Exception):
    """Base of the errors the API maps to 4xx."""


class UnknownRollout(StoreError):
    pass


class UnknownTrajectory(StoreError):
    pass


class UnknownBatch(StoreError):
    pass


class LeaseExpired(StoreError):
    pass


# ---------------------------------------------------------------- payload encoding
# The stored form of a trajectory lives in payload_codec.py (binary token arrays: see there).


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class GroupPlan:
    group_id: str
    task_id: str
    trajectory_ids: list[str]


@dataclass(frozen=True)
class CommitResult:
    duplicate: bool  # the sample was already done: this record was ignored
    group_id: str
    group_state: str | None = None  # set when this commit finished the group
    rollout_finished: bool = False
    advantages: list[float] | None = None


@dataclass
class LeasedGroup:
    group_id: str
    task_id: str
    rollout_id: str
    rows: list[tuple[str, bytes, float | None]]  # (codec, data, advantage), by sample_index


@dataclass
class Requeued:
    rollout_id: str
    group_id: str
    task_id: str
    trajectory_ids: list[str]  # new ids, by sample_index


@dataclass
class LeaseResult:
    batch_id: str | None
    expires_at: float
    groups: list[LeasedGroup]
    requeued: list[Requeued] = field(default_factory=list)
    dropped_stale: int = 0
    expired_leases: int = 0


@dataclass(frozen=True)
class AckResult:
    batch_id: str
    groups: int
    already_acked: bool


@dataclass(frozen=True)
class RolloutSummary:
    id: str
    status: Literal["running", "completed", "cancelled"]
    groups_total: int
    groups_completed: int
    samples_total: int
    samples_completed: int
    counts: dict[str, int]
    mean_reward: float | None
    created_at: float


@dataclass(frozen=True)
class PendingGroup:
    """A group with samples still to run (after a restart or a re-queue)."""

    rollout_id: str
    request_json: str
    group_id: str
    task_id: str
    samples: list[tuple[str, int]]  # (trajectory_id, sample_index)


# ---------------------------------------------------------------- the database thread


class _DbThread:
    def __init__(self, path: Path, synchronous: str) -> None:
        self._path = path
        self._synchronous = synchronous
        self._jobs: queue.SimpleQueue[
            tuple[Callable[[sqlite3.Connection], Any], concurrent.futures.Future[Any]] | None
        ] = queue.SimpleQueue()
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, name="rollouts-store", daemon=True)
        self.init: Callable[[sqlite3.Connection], None] = lambda conn: None

    def start(self) -> None:
        self._thread.start()
        self._ready.result()

    def submit(self, fn: Callable[[sqlite3.Connection], T]) -> concurrent.futures.Future[T]:
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._jobs.put((fn, fut))
        return fut

    def close(self) -> None:
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join()

    def _run(self) -> None:
        try:
            conn = connect(self._path, self._synchronous)
            self.init(conn)
        except BaseException as e:  # noqa: BLE001 - reported to the opener
            self._ready.set_exception(e)
            return
        self._ready.set_result(None)
        try:
            stop = False
            while not stop:
                first = self._jobs.get()
                if first is None:
                    break
                jobs = [first]
                while len(jobs) < MAX_JOBS_PER_TRANSACTION:
                    try:
                        nxt = self._jobs.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None:
                        stop = True
                        break
                    jobs.append(nxt)
                self._transaction(conn, jobs)
        finally:
            conn.close()

    @staticmethod
    def _transaction(
        conn: sqlite3.Connection,
        jobs: list[tuple[Callable[[sqlite3.Connection], Any], concurrent.futures.Future[Any]]],
    ) -> None:
        outcomes: list[tuple[concurrent.futures.Future[Any], bool, Any]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for fn, fut in jobs:
                if not fut.set_running_or_notify_cancel():
                    continue
                conn.execute("SAVEPOINT job")
                try:
                    result = fn(conn)
                except Exception as e:  # noqa: BLE001 - handed to the caller
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
                    outcomes.append((fut, False, e))
                else:
                    conn.execute("RELEASE job")
                    outcomes.append((fut, True, result))
            conn.execute("COMMIT")
        except BaseException as e:  # the transaction as a whole failed: nobody's work is durable
            log.exception("store transaction failed")
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            for _, fut in jobs:
                if not fut.done():
                    fut.set_exception(e)
            return
        # Only now, after COMMIT, do results become visible to callers.
        for fut, ok, value in outcomes:
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)


def connect(path: Path, synchronous: str = "FULL", readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    else:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        # Payloads are ~100 KB blobs: 64 KiB pages make them short overflow chains (and WAL
        # checkpoints rarer), ~2.5x faster commits than 4 KiB pages (docs/performance.md).
        # Takes effect only when the database is created (must precede WAL mode).
        conn.execute("PRAGMA page_size=65536")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA busy_timeout=10000")
    return conn


# ---------------------------------------------------------------- the store


class Store:
    """Async facade; every method is one job on the database thread."""

    def __init__(self, data_dir: Path, *, synchronous: str = "FULL") -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / DB_NAME
        self._synchronous = synchronous
        self._db: _DbThread | None = None
        self._seq = 0
        self._adv: dict[str, AdvantageConfig] = {}

    # -- lifecycle

    def open(self) -> None:
        """Create or reopen the database. Leases left active by a previous process are expired
        and their groups offered again; unfinished samples stay pending for the scheduler."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        db = _DbThread(self.path, self._synchronous)
        db.init = self._init
        db.start()
        self._db = db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _init(self, conn: sqlite3.Connection) -> None:
        conn.executescript(_SCHEMA)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE leases SET state='expired' WHERE state='active'")
        conn.execute("UPDATE groups SET state='complete', batch_id=NULL WHERE state='leased'")
        conn.execute("COMMIT")
        self._seq = conn.execute("SELECT COALESCE(MAX(ready_seq), 0) FROM groups").fetchone()[0]

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
        def job(conn: sqlite3.Connection) -> None:
            now = time.time()
            n_samples = sum(len(g.trajectory_ids) for g in groups)
            conn.execute(
                "INSERT INTO rollouts VALUES (?,?,?,?,?,?,?,?,?,?,NULL)",
                (
                    rollout_id,
                    request_json,
                    "running",
                    priority,
                    advantage.estimator,
                    advantage.min_group_size,
                    int(advantage.drop_zero_variance),
                    len(groups),
                    n_samples,
                    now,
                ),
            )
            conn.executemany(
                "INSERT INTO groups (group_id, rollout_id, task_id, n_samples, state, priority)"
                " VALUES (?,?,?,?,'pending',?)",
                [
                    (g.group_id, rollout_id, g.task_id, len(g.trajectory_ids), priority)
                    for g in groups
                ],
            )
            conn.executemany(
                "INSERT INTO samples (trajectory_id, rollout_id, group_id, task_id, sample_index,"
                " state) VALUES (?,?,?,?,?,'pending')",
                [
                    (tid, rollout_id, g.group_id, g.task_id, k)
                    for g in groups
                    for k, tid in enumerate(g.trajectory_ids)
                ],
            )

        await self._call(job)
        self._adv[rollout_id] = advantage

    async def rollout_summary(self, rollout_id: str) -> RolloutSummary:
        def job(conn: sqlite3.Connection) -> RolloutSummary:
            row = conn.execute(
                "SELECT status, groups_total, samples_total, created_at FROM rollouts WHERE id=?",
                (rollout_id,),
            ).fetchone()
            if row is None:
                raise UnknownRollout(rollout_id)
            status, groups_total, samples_total, created_at = row
            counts = dict(
                conn.execute(
                    "SELECT status, COUNT(*) FROM samples WHERE rollout_id=? AND state='done'"
                    " GROUP BY status",
                    (rollout_id,),
                ).fetchall()
            )
            mean = conn.execute(
                "SELECT AVG(reward) FROM samples WHERE rollout_id=? AND state='done'"
                " AND reward IS NOT NULL",
                (rollout_id,),
            ).fetchone()[0]
            groups_done = conn.execute(
                "SELECT COUNT(*) FROM groups WHERE rollout_id=? AND state!='pending'",
                (rollout_id,),
            ).fetchone()[0]
            return RolloutSummary(
                id=rollout_id,
                status=status,
                groups_total=groups_total,
                groups_completed=groups_done,
                samples_total=samples_total,
                samples_completed=sum(counts.values()),
                counts=counts,
                mean_reward=mean,
                created_at=created_at,
            )

        return await self._call(job)

    async def rollout_exists(self, rollout_id: str) -> bool:
        def job(conn: sqlite3.Connection) -> bool:
            q = "SELECT 1 FROM rollouts WHERE id=?"
            return conn.execute(q, (rollout_id,)).fetchone() is not None

        return await self._call(job)

    async def rollout_request(self, rollout_id: str) -> str:
        def job(conn: sqlite3.Connection) -> str:
            row = conn.execute("SELECT request FROM rollouts WHERE id=?", (rollout_id,)).fetchone()
            if row is None:
                raise UnknownRollout(rollout_id)
            return row[0]

        return await self._call(job)

    async def pending_groups(self) -> list[PendingGroup]:
        """Samples of running rollouts that have no committed trajectory yet."""

        def job(conn: sqlite3.Connection) -> list[PendingGroup]:
            rows = conn.execute(
                "SELECT s.rollout_id, r.request, s.group_id, s.task_id, s.trajectory_id,"
                " s.sample_index FROM samples s JOIN rollouts r ON r.id = s.rollout_id"
                " WHERE s.state='pending' AND r.status='running'"
                " ORDER BY r.priority DESC, r.created_at, s.group_id, s.sample_index"
            ).fetchall()
            out: dict[str, PendingGroup] = {}
            for rollout_id, request, group_id, task_id, tid, index in rows:
                g = out.get(group_id)
                if g is None:
                    g = out[group_id] = PendingGroup(rollout_id, request, group_id, task_id, [])
                g.samples.append((tid, index))
            return list(out.values())

        return await self._call(job)

    # -- trajectories

    async def commit_trajectory(self, trajectory: Trajectory) -> CommitResult:
        payload = encode_payload(trajectory)  # compress on the caller's side, not the db thread
        return await self._call(lambda conn: self._commit(conn, trajectory, payload))

    def _commit(self, conn: sqlite3.Connection, t: Trajectory, payload: bytes) -> CommitResult:
        row = conn.execute(
            "SELECT state, group_id, rollout_id FROM samples WHERE trajectory_id=?",
            (t.trajectory_id,),
        ).fetchone()
        if row is None:
            raise UnknownTrajectory(t.trajectory_id)
        state, group_id, rollout_id = row
        if state != "pending":
            return CommitResult(duplicate=True, group_id=group_id)
        if group_id != t.group_id or rollout_id != t.rollout_id:
            raise UnknownTrajectory(f"{t.trajectory_id}: group/rollout ids do not match")
        conn.execute(
            "INSERT OR REPLACE INTO payloads VALUES (?,?,?)", (t.trajectory_id, CODEC, payload)
        )
        conn.execute(
            "UPDATE samples SET state='done', status=?, reward=?, version_start=?, tokens=?"
            " WHERE trajectory_id=?",
            (
                t.status.value,
                t.reward,
                t.policy_version_start,
                len(t.prompt_token_ids) + len(t.response_token_ids),
                t.trajectory_id,
            ),
        )
        n_done, n_samples = conn.execute(
            "UPDATE groups SET n_done = n_done + 1,"
            " version_min = MIN(COALESCE(version_min, ?), ?) WHERE group_id=?"
            " RETURNING n_done, n_samples",
            (t.policy_version_start, t.policy_version_start, group_id),
        ).fetchone()
        if n_done < n_samples:
            return CommitResult(duplicate=False, group_id=group_id)
        state, advantages = self._complete_group(conn, rollout_id, group_id)
        finished = self._maybe_finish_rollout(conn, rollout_id)
        return CommitResult(False, group_id, state, finished, advantages)

    def _advantage_config(self, conn: sqlite3.Connection, rollout_id: str) -> AdvantageConfig:
        cfg = self._adv.get(rollout_id)
        if cfg is None:
            est, mgs, dzv = conn.execute(
                "SELECT estimator, min_group_size, drop_zero_variance FROM rollouts WHERE id=?",
                (rollout_id,),
            ).fetchone()
            cfg = self._adv[rollout_id] = AdvantageConfig(est, mgs, bool(dzv))
        return cfg

    def _complete_group(
        self, conn: sqlite3.Connection, rollout_id: str, group_id: str
    ) -> tuple[str, list[float]]:
        rows = conn.execute(
            "SELECT trajectory_id, status, reward FROM samples WHERE group_id=?"
            " ORDER BY sample_index",
            (group_id,),
        ).fetchall()
        excluded = [is_masked(status) for _, status, _ in rows]
        advantages = compute_advantages(
            [r for _, _, r in rows], excluded, self._advantage_config(conn, rollout_id)
        )
        conn.executemany(
            "UPDATE samples SET advantage=? WHERE trajectory_id=?",
            [(a, tid) for a, (tid, _, _) in zip(advantages, rows, strict=True)],
        )
        # A group with nothing but cancelled samples carries no signal: never offer it.
        if all(status == Status.cancelled.value for _, status, _ in rows):
            state = "dropped"
            conn.execute("UPDATE groups SET state='dropped' WHERE group_id=?", (group_id,))
        else:
            state = "complete"
            self._seq += 1
            conn.execute(
                "UPDATE groups SET state='complete', ready_seq=? WHERE group_id=?",
                (self._seq, group_id),
            )
        return state, advantages

    @staticmethod
    def _maybe_finish_rollout(conn: sqlite3.Connection, rollout_id: str) -> bool:
        left = conn.execute(
            "SELECT 1 FROM groups WHERE rollout_id=? AND state='pending' LIMIT 1", (rollout_id,)
        ).fetchone()
        if left is not None:
            return False
        cur = conn.execute(
            "UPDATE rollouts SET status='completed', finished_at=? WHERE id=? AND status='running'",
            (time.time(), rollout_id),
        )
        return cur.rowcount > 0

    async def cancel_rollout(self, rollout_id: str, policy_version: int) -> list[str]:
        """Mark the rollout cancelled and every unfinished sample `cancelled` (masked). Returns
        the ids of the groups this completed."""

        def job(conn: sqlite3.Connection) -> list[str]:
            cur = conn.execute(
                "UPDATE rollouts SET status='cancelled', finished_at=? WHERE id=?"
                " AND status='running'",
                (time.time(), rollout_id),
            )
            if cur.rowcount == 0:
                if conn.execute("SELECT 1 FROM rollouts WHERE id=?", (rollout_id,)).fetchone():
                    return []
                raise UnknownRollout(rollout_id)
            pending = conn.execute(
                "SELECT trajectory_id, group_id, task_id, sample_index FROM samples"
                " WHERE rollout_id=? AND state='pending'",
                (rollout_id,),
            ).fetchall()
            completed: list[str] = []
            for tid, gid, task_id, index in pending:
                t = cancelled_trajectory(tid, rollout_id, gid, task_id, index, policy_version)
                result = self._commit(conn, t, encode_payload(t))
                if result.group_state is not None:
                    completed.append(gid)
            return completed

        return await self._call(job)

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
        def job(conn: sqlite3.Connection) -> LeaseResult:
            now = time.time()
            expired = self._expire(conn, now)
            requeued: list[Requeued] = []
            dropped = 0
            if max_staleness is not None:
                dropped, requeued = self._handle_stale(
                    conn, policy_version - max_staleness, stale_policy
                )
            sql = "SELECT group_id, task_id, rollout_id FROM groups WHERE state='complete'"
            args: list[Any] = []
            if rollout_id is not None:
                sql += " AND rollout_id=?"
                args.append(rollout_id)
            sql += " ORDER BY priority DESC, ready_seq LIMIT ?"
            args.append(max_groups)
            picked = conn.execute(sql, args).fetchall()
            if not picked:
                return LeaseResult(None, 0.0, [], requeued, dropped, expired)
            batch_id = uuid.uuid4().hex
            expires_at = now + lease_s
            conn.execute(
                "INSERT INTO leases VALUES (?, 'active', ?, ?, NULL, ?)",
                (batch_id, now, expires_at, len(picked)),
            )
            ids = [g for g, _, _ in picked]
            marks = ",".join("?" * len(ids))
            conn.execute(
                f"UPDATE groups SET state='leased', batch_id=? WHERE group_id IN ({marks})",
                [batch_id, *ids],
            )
            groups = {g: LeasedGroup(g, task, r, []) for g, task, r in picked}
            for gid, adv, codec, data in conn.execute(
                "SELECT s.group_id, s.advantage, p.codec, p.data FROM samples s"
                " JOIN payloads p ON p.trajectory_id = s.trajectory_id"
                f" WHERE s.group_id IN ({marks}) ORDER BY s.group_id, s.sample_index",
                ids,
            ):
                groups[gid].rows.append((codec, data, adv))
            ordered = [groups[g] for g in ids]
            return LeaseResult(batch_id, expires_at, ordered, requeued, dropped, expired)

        return await self._call(job)

    @staticmethod
    def _expire(conn: sqlite3.Connection, now: float) -> int:
        stale = [
            b
            for (b,) in conn.execute(
                "SELECT batch_id FROM leases WHERE state='active' AND expires_at <= ?", (now,)
            )
        ]
        for b in stale:
            conn.execute("UPDATE leases SET state='expired' WHERE batch_id=?", (b,))
            conn.execute(
                "UPDATE groups SET state='complete', batch_id=NULL"
                " WHERE batch_id=? AND state='leased'",
                (b,),
            )
        return len(stale)

    def _handle_stale(
        self, conn: sqlite3.Connection, oldest_ok: int, policy: Literal["drop", "requeue"]
    ) -> tuple[int, list[Requeued]]:
        rows = conn.execute(
            "SELECT g.group_id, g.rollout_id, g.task_id, g.n_samples, g.attempt, r.status"
            " FROM groups g JOIN rollouts r ON r.id = g.rollout_id"
            " WHERE g.state='complete' AND g.version_min < ?",
            (oldest_ok,),
        ).fetchall()
        dropped = 0
        requeued: list[Requeued] = []
        for gid, rid, task_id, n, attempt, rollout_status in rows:
            if policy == "drop" or rollout_status == "cancelled":
                conn.execute("UPDATE groups SET state='dropped' WHERE group_id=?", (gid,))
                dropped += 1
                continue
            # Re-run under fresh trajectory ids: a trainer that saw the stale records (a lease
            # that expired) must not confuse them with the new ones.
            old = [
                t
                for (t,) in conn.execute(
                    "SELECT trajectory_id FROM samples WHERE group_id=?", (gid,)
                )
            ]
            conn.executemany("DELETE FROM payloads WHERE trajectory_id=?", [(t,) for t in old])
            conn.execute("DELETE FROM samples WHERE group_id=?", (gid,))
            new_ids = [sample_trajectory_id(gid, k, attempt + 1) for k in range(n)]
            conn.executemany(
                "INSERT INTO samples (trajectory_id, rollout_id, group_id, task_id, sample_index,"
                " state) VALUES (?,?,?,?,?,'pending')",
                [(t, rid, gid, task_id, k) for k, t in enumerate(new_ids)],
            )
            conn.execute(
                "UPDATE groups SET state='pending', n_done=0, version_min=NULL, ready_seq=NULL,"
                " attempt=? WHERE group_id=?",
                (attempt + 1, gid),
            )
            conn.execute(
                "UPDATE rollouts SET status='running', finished_at=NULL WHERE id=?", (rid,)
            )
            requeued.append(Requeued(rid, gid, task_id, new_ids))
        return dropped, requeued

    async def ack(self, batch_id: str) -> AckResult:
        def job(conn: sqlite3.Connection) -> AckResult:
            row = conn.execute(
                "SELECT state, expires_at, n_groups FROM leases WHERE batch_id=?", (batch_id,)
            ).fetchone()
            if row is None:
                raise UnknownBatch(batch_id)
            state, expires_at, n_groups = row
            if state == "acked":
                return AckResult(batch_id, n_groups, already_acked=True)
            if state == "expired" or expires_at <= time.time():
                raise LeaseExpired(batch_id)
            conn.execute(
                "UPDATE groups SET state='acked' WHERE batch_id=? AND state='leased'", (batch_id,)
            )
            conn.execute(
                "UPDATE leases SET state='acked', acked_at=? WHERE batch_id=?",
                (time.time(), batch_id),
            )
            return AckResult(batch_id, n_groups, already_acked=False)

        return await self._call(job)

    async def remaining_groups(self, rollout_id: str | None = None) -> int:
        """Groups that may still be delivered: not yet acked or dropped."""

        def job(conn: sqlite3.Connection) -> int:
            sql = "SELECT COUNT(*) FROM groups WHERE state NOT IN ('acked','dropped')"
            if rollout_id is None:
                return conn.execute(sql).fetchone()[0]
            return conn.execute(sql + " AND rollout_id=?", (rollout_id,)).fetchone()[0]

        return await self._call(job)

    async def group_states(self) -> dict[str, int]:
        def job(conn: sqlite3.Connection) -> dict[str, int]:
            return dict(conn.execute("SELECT state, COUNT(*) FROM groups GROUP BY state"))

        return await self._call(job)

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


# ---------------------------------------------------------------- ids and helpers


def group_id_for(rollout_id: str, index: int) -> str:
    return f"{rollout_id}.g{index}"


def sample_trajectory_id(group_id: str, index: int, attempt: int = 0) -> str:
    return f"{group_id}.s{index}" if attempt == 0 else f"{group_id}.s{index}.a{attempt}"


def cancelled_trajectory(
    trajectory_id: str,
    rollout_id: str,
    group_id: str,
    task_id: str,
    sample_index: int,
    policy_version: int,
) -> Trajectory:
    return Trajectory(
        trajectory_id=trajectory_id,
        rollout_id=rollout_id,
        group_id=group_id,
        task_id=task_id,
        sample_index=sample_index,
        policy_version_start=policy_version,
        policy_version_end=policy_version,
        prompt_token_ids=[],
        response_token_ids=[],
        loss_mask=[],
        rollout_logprobs=[],
        reward=None,
        status=Status.cancelled,
    )


def iter_trajectory_rows(
    data_dir: Path, rollout_id: str | None = None, chunk: int = 256
) -> Iterator[list[dict[str, Any]]]:
    """Committed trajectories as ARROW_SCHEMA rows, `chunk` at a time, from a read-only
    connection (safe while the service runs: WAL readers do not block the writer)."""
    path = Path(data_dir) / DB_NAME
    if not path.exists():
        raise FileNotFoundError(f"no rollouts database at {path}")
    conn = connect(path, readonly=True)
    try:
        sql = (
            "SELECT s.advantage, p.codec, p.data FROM samples s"
            " JOIN payloads p ON p.trajectory_id = s.trajectory_id WHERE s.state='done'"
        )
        args: tuple[Any, ...] = ()
        if rollout_id is not None:
            sql += " AND s.rollout_id=?"
            args = (rollout_id,)
        sql += " ORDER BY s.rollout_id, s.group_id, s.sample_index"
        cur = conn.execute(sql, args)
        while True:
            rows = cur.fetchmany(chunk)
            if not rows:
                return
            yield [payload_dict(codec, data, adv) for adv, codec, data in rows]
    finally:
        conn.close()
