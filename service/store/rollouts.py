"""Rollouts and their samples, as jobs on the writer's connection: create a rollout, commit a
trajectory (completing its group, with advantages, and maybe its rollout), cancel, summarise.

Each function takes the connection the writer thread holds (service/store/writer.py) and runs
inside that thread's transaction; `Store` (service/store/facade.py) is the async way in.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field

from service.advantages import AdvantageConfig, compute_advantages
from service.payload_codec import encode_payload, payload_codec
from service.store.errors import IdempotencyConflict, UnknownRollout, UnknownTrajectory
from service.store.records import CommitResult, GroupPlan, PendingGroup, RolloutSummary
from service.trajectory import Status, Trajectory, empty_trajectory, is_masked


@dataclass
class WriterState:
    """What the writer thread remembers between jobs."""

    ready_seq: int = 0  # the last order number given to a complete group (lease order)
    advantage: dict[str, AdvantageConfig] = field(default_factory=dict)  # by rollout id


def create(
    conn: sqlite3.Connection,
    rollout_id: str,
    request_json: str,
    priority: int,
    advantage: AdvantageConfig,
    groups: list[GroupPlan],
    idempotency: tuple[str, str] | None = None,
) -> str:
    """Record a rollout and its pending samples; returns its id. With `idempotency` (key,
    request digest) a key seen before returns the rollout it made instead, creating nothing;
    the same key with another digest is an IdempotencyConflict."""
    now = time.time()
    if idempotency is not None:
        key, digest = idempotency
        existing = idempotent_rollout(conn, key, digest)
        if existing is not None:
            return existing
        conn.execute("INSERT INTO idempotency VALUES (?,?,?,?)", (key, digest, rollout_id, now))
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
        [(g.group_id, rollout_id, g.task_id, len(g.trajectory_ids), priority) for g in groups],
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
    return rollout_id


def idempotent_rollout(conn: sqlite3.Connection, key: str, digest: str) -> str | None:
    """The rollout an Idempotency-Key made, if any (IdempotencyConflict: another request)."""
    row = conn.execute(
        "SELECT request_digest, rollout_id FROM idempotency WHERE key=?", (key,)
    ).fetchone()
    if row is None:
        return None
    if row[0] != digest:
        raise IdempotencyConflict(key)
    return row[1]


def summary(conn: sqlite3.Connection, rollout_id: str) -> RolloutSummary:
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


def exists(conn: sqlite3.Connection, rollout_id: str) -> bool:
    return conn.execute("SELECT 1 FROM rollouts WHERE id=?", (rollout_id,)).fetchone() is not None


def request(conn: sqlite3.Connection, rollout_id: str) -> str:
    row = conn.execute("SELECT request FROM rollouts WHERE id=?", (rollout_id,)).fetchone()
    if row is None:
        raise UnknownRollout(rollout_id)
    return row[0]


def oldest_version(conn: sqlite3.Connection, group_id: str) -> int | None:
    """The oldest policy version among the group's committed samples (None: none yet)."""
    row = conn.execute("SELECT version_min FROM groups WHERE group_id=?", (group_id,)).fetchone()
    return None if row is None else row[0]


def pending_groups(conn: sqlite3.Connection) -> list[PendingGroup]:
    """Samples of running rollouts that have no committed trajectory yet."""
    rows = conn.execute(
        "SELECT s.rollout_id, r.request, s.group_id, s.task_id, s.trajectory_id,"
        " s.sample_index FROM samples s JOIN rollouts r ON r.id = s.rollout_id"
        " WHERE s.state='pending' AND r.status='running'"
        " ORDER BY r.priority DESC, r.created_at, s.group_id, s.sample_index"
    ).fetchall()
    out: dict[str, PendingGroup] = {}
    for rollout_id, request_json, group_id, task_id, tid, index in rows:
        g = out.get(group_id)
        if g is None:
            g = out[group_id] = PendingGroup(rollout_id, request_json, group_id, task_id, [])
        g.samples.append((tid, index))
    return list(out.values())


def commit(
    conn: sqlite3.Connection, state: WriterState, t: Trajectory, payload: bytes
) -> CommitResult:
    """Store `t` (already encoded as `payload`) if its sample is still pending."""
    row = conn.execute(
        "SELECT state, group_id, rollout_id FROM samples WHERE trajectory_id=?",
        (t.trajectory_id,),
    ).fetchone()
    if row is None:
        raise UnknownTrajectory(t.trajectory_id)
    sample_state, group_id, rollout_id = row
    if sample_state != "pending":
        return CommitResult(duplicate=True, group_id=group_id)
    if group_id != t.group_id or rollout_id != t.rollout_id:
        raise UnknownTrajectory(f"{t.trajectory_id}: group/rollout ids do not match")
    conn.execute(
        "INSERT OR REPLACE INTO payloads VALUES (?,?,?)",
        (t.trajectory_id, payload_codec(t), payload),
    )
    conn.execute(
        "UPDATE samples SET state='done', status=?, reward=?, version_start=?, tokens=?"
        " WHERE trajectory_id=?",
        (
            t.status.value,
            t.reward,
            t.policy_version_start,
            t.total_tokens(),
            t.trajectory_id,
        ),
    )
    # Staleness counts from the group's oldest generated token: a sample that generated none
    # (masked before its first turn, cancelled) carries no old weights and leaves it alone.
    # Every segment of a summarized episode counts: the summary calls are trained too.
    oldest = t.oldest_version()
    n_done, n_samples = conn.execute(
        "UPDATE groups SET n_done = n_done + 1,"
        " version_min = MIN(COALESCE(version_min, ?1), COALESCE(?1, version_min))"
        " WHERE group_id=? RETURNING n_done, n_samples",
        (oldest, group_id),
    ).fetchone()
    if n_done < n_samples:
        return CommitResult(duplicate=False, group_id=group_id)
    group_state, advantages = _complete_group(conn, state, rollout_id, group_id)
    finished = _maybe_finish_rollout(conn, rollout_id)
    return CommitResult(False, group_id, group_state, finished, advantages)


def cancel(
    conn: sqlite3.Connection, state: WriterState, rollout_id: str, policy_version: int
) -> list[str]:
    """Mark the rollout cancelled and every unfinished sample `cancelled` (masked). Returns the
    ids of the groups this completed."""
    cur = conn.execute(
        "UPDATE rollouts SET status='cancelled', finished_at=? WHERE id=? AND status='running'",
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
        t = empty_trajectory(tid, rollout_id, gid, task_id, index, policy_version, Status.cancelled)
        result = commit(conn, state, t, encode_payload(t))
        if result.group_state is not None:
            completed.append(gid)
    return completed


def _advantage_config(
    conn: sqlite3.Connection, state: WriterState, rollout_id: str
) -> AdvantageConfig:
    cfg = state.advantage.get(rollout_id)
    if cfg is None:
        est, mgs, dzv = conn.execute(
            "SELECT estimator, min_group_size, drop_zero_variance FROM rollouts WHERE id=?",
            (rollout_id,),
        ).fetchone()
        cfg = state.advantage[rollout_id] = AdvantageConfig(est, mgs, bool(dzv))
    return cfg


def _complete_group(
    conn: sqlite3.Connection, state: WriterState, rollout_id: str, group_id: str
) -> tuple[str, list[float]]:
    rows = conn.execute(
        "SELECT trajectory_id, status, reward FROM samples WHERE group_id=? ORDER BY sample_index",
        (group_id,),
    ).fetchall()
    excluded = [is_masked(status) for _, status, _ in rows]
    advantages = compute_advantages(
        [r for _, _, r in rows], excluded, _advantage_config(conn, state, rollout_id)
    )
    conn.executemany(
        "UPDATE samples SET advantage=? WHERE trajectory_id=?",
        [(a, tid) for a, (tid, _, _) in zip(advantages, rows, strict=True)],
    )
    # A group with nothing but cancelled samples carries no signal: never offer it.
    if all(status == Status.cancelled.value for _, status, _ in rows):
        group_state = "dropped"
        conn.execute("UPDATE groups SET state='dropped' WHERE group_id=?", (group_id,))
    else:
        group_state = "complete"
        state.ready_seq += 1
        conn.execute(
            "UPDATE groups SET state='complete', ready_seq=? WHERE group_id=?",
            (state.ready_seq, group_id),
        )
    return group_state, advantages


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
