"""Groups out to the trainer, as jobs on the writer's connection: lease complete groups in
priority order, expire leases, drop or re-queue stale groups (a group re-queued
`max_requeues` times is dropped when stale again), ack, count what is left.

Each function takes the connection the writer thread holds (service/store/writer.py) and runs
inside that thread's transaction; `Store` (service/store/facade.py) is the async way in.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from service.store.errors import LeaseExpired, UnknownBatch
from service.store.records import (
    AckResult,
    LeasedGroup,
    LeaseResult,
    Requeued,
    sample_trajectory_id,
)


def recover(conn: sqlite3.Connection) -> None:
    """On open: leases a previous process left active are expired, their groups offered again."""
    conn.execute("UPDATE leases SET state='expired' WHERE state='active'")
    conn.execute("UPDATE groups SET state='complete', batch_id=NULL WHERE state='leased'")


# Re-runs of a group for staleness (`--stale-policy requeue`) before it is dropped instead:
# a group that is stale again after as many re-runs is one the policy outruns (a long tail
# the slots finish last); re-running it without end would spend the fleet on it for ever.
MAX_STALE_REQUEUES = 3


def lease(
    conn: sqlite3.Connection,
    *,
    max_groups: int,
    rollout_id: str | None,
    lease_s: float,
    policy_version: int,
    max_staleness: int | None,
    stale_policy: Literal["drop", "requeue"],
    max_requeues: int = MAX_STALE_REQUEUES,
) -> LeaseResult:
    now = time.time()
    expired = _expire(conn, now)
    stale = _Stale()
    if max_staleness is not None:
        stale = _handle_stale(conn, policy_version - max_staleness, stale_policy, max_requeues)
    sql = "SELECT group_id, task_id, rollout_id FROM groups WHERE state='complete'"
    args: list[Any] = []
    if rollout_id is not None:
        sql += " AND rollout_id=?"
        args.append(rollout_id)
    sql += " ORDER BY priority DESC, ready_seq LIMIT ?"
    args.append(max_groups)
    picked = conn.execute(sql, args).fetchall()
    counts = (stale.requeued, stale.dropped, expired, stale.requeues_spent)
    if not picked:
        return LeaseResult(None, 0.0, [], *counts)
    batch_id, expires_at = open_lease(conn, now, lease_s, len(picked))
    ids = [g for g, _, _ in picked]
    marks = ",".join("?" * len(ids))
    conn.execute(
        f"UPDATE groups SET state='leased', batch_id=? WHERE group_id IN ({marks})",
        [batch_id, *ids],
    )
    # A trainer has these now: a later regrade of them waits for their ack, then goes out as a
    # batch of its own (regrades.py).
    conn.executemany("INSERT OR IGNORE INTO delivered_groups VALUES (?)", [(g,) for g in ids])
    ordered = leased_groups(conn, picked)
    return LeaseResult(batch_id, expires_at, ordered, *counts)


def open_lease(
    conn: sqlite3.Connection, now: float, lease_s: float, groups: int
) -> tuple[str, float]:
    """A new active lease of `groups` groups: (batch_id, expires_at)."""
    batch_id = uuid.uuid4().hex
    expires_at = now + lease_s
    conn.execute(
        "INSERT INTO leases VALUES (?, 'active', ?, ?, NULL, ?)",
        (batch_id, now, expires_at, groups),
    )
    return batch_id, expires_at


def leased_groups(
    conn: sqlite3.Connection, picked: list[tuple[str, str, str]]
) -> list[LeasedGroup]:
    """The (group_id, task_id, rollout_id) groups with their samples' payloads and advantages,
    in that order."""
    groups = {g: LeasedGroup(g, task, r, []) for g, task, r in picked}
    ids = list(groups)
    for gid, adv, codec, data in conn.execute(
        "SELECT s.group_id, s.advantage, p.codec, p.data FROM samples s"
        " JOIN payloads p ON p.trajectory_id = s.trajectory_id"
        f" WHERE s.group_id IN ({','.join('?' * len(ids))}) ORDER BY s.group_id, s.sample_index",
        ids,
    ):
        groups[gid].rows.append((codec, data, adv))
    return [groups[g] for g in ids]


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
            "UPDATE groups SET state='complete', batch_id=NULL WHERE batch_id=? AND state='leased'",
            (b,),
        )
    return len(stale)


@dataclass
class _Stale:
    """What a lease did with stale groups."""

    dropped: int = 0  # dropped (drop policy, a cancelled rollout, or requeues spent)
    requeued: list[Requeued] = field(default_factory=list)
    requeues_spent: int = 0  # of the dropped: stale again after max_requeues re-runs


def _handle_stale(
    conn: sqlite3.Connection,
    oldest_ok: int,
    policy: Literal["drop", "requeue"],
    max_requeues: int,
) -> _Stale:
    rows = conn.execute(
        "SELECT g.group_id, g.rollout_id, g.task_id, g.n_samples, g.attempt, r.status"
        " FROM groups g JOIN rollouts r ON r.id = g.rollout_id"
        " WHERE g.state='complete' AND g.version_min < ?",
        (oldest_ok,),
    ).fetchall()
    out = _Stale()
    for gid, rid, task_id, n, attempt, rollout_status in rows:
        spent = policy == "requeue" and attempt >= max_requeues
        if policy == "drop" or rollout_status == "cancelled" or spent:
            conn.execute("UPDATE groups SET state='dropped' WHERE group_id=?", (gid,))
            out.dropped += 1
            out.requeues_spent += spent
            continue
        # Re-run under fresh trajectory ids: a trainer that saw the stale records (a lease
        # that expired) must not confuse them with the new ones.
        old = [
            t for (t,) in conn.execute("SELECT trajectory_id FROM samples WHERE group_id=?", (gid,))
        ]
        conn.executemany("DELETE FROM payloads WHERE trajectory_id=?", [(t,) for t in old])
        conn.execute("DELETE FROM samples WHERE group_id=?", (gid,))
        # Gradings a regrade staged for the old records go with them (regrades.py).
        conn.execute("DELETE FROM staged_gradings WHERE group_id=?", (gid,))
        conn.execute("UPDATE regraded_groups SET settled = gradings WHERE group_id=?", (gid,))
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
        conn.execute("UPDATE rollouts SET status='running', finished_at=NULL WHERE id=?", (rid,))
        out.requeued.append(Requeued(rid, gid, task_id, new_ids))
    return out


def ack(conn: sqlite3.Connection, batch_id: str) -> AckResult:
    row = conn.execute(
        "SELECT state, expires_at, n_groups FROM leases WHERE batch_id=?", (batch_id,)
    ).fetchone()
    if row is None:
        raise UnknownBatch(batch_id)
    state, expires_at, n_groups = row
    if state == "acked":
        return AckResult(batch_id, n_groups, already_acked=True)
    if state in ("expired", "released") or expires_at <= time.time():
        raise LeaseExpired(batch_id)
    conn.execute("UPDATE groups SET state='acked' WHERE batch_id=? AND state='leased'", (batch_id,))
    conn.execute(
        "UPDATE leases SET state='acked', acked_at=? WHERE batch_id=?", (time.time(), batch_id)
    )
    return AckResult(batch_id, n_groups, already_acked=False)


def release(conn: sqlite3.Connection, batch_id: str) -> int:
    """Hand an active lease back at once (its client went away before it could receive it):
    its groups are offered again. Returns how many; 0 if the lease was no longer active."""
    cur = conn.execute(
        "UPDATE leases SET state='released' WHERE batch_id=? AND state='active'", (batch_id,)
    )
    if cur.rowcount == 0:
        return 0
    return conn.execute(
        "UPDATE groups SET state='complete', batch_id=NULL WHERE batch_id=? AND state='leased'",
        (batch_id,),
    ).rowcount


def purge(conn: sqlite3.Connection, cutoff: float, limit: int) -> int:
    """Delete up to `limit` payloads of groups acknowledged (or dropped, with their rollout
    finished) before `cutoff`, and Idempotency-Keys older than it. Their sample rows stay, so
    rollout summaries keep their counts. Returns the number of payloads deleted."""
    conn.execute("DELETE FROM idempotency WHERE created_at < ?", (cutoff,))
    return conn.execute(
        "DELETE FROM payloads WHERE trajectory_id IN ("
        " SELECT s.trajectory_id FROM leases l"
        " JOIN groups g ON g.batch_id = l.batch_id AND g.state = 'acked'"
        " JOIN samples s ON s.group_id = g.group_id"
        " JOIN payloads p ON p.trajectory_id = s.trajectory_id"
        " WHERE l.state = 'acked' AND l.acked_at < ?"
        " UNION ALL"
        " SELECT s.trajectory_id FROM rollouts r"
        " JOIN groups g ON g.rollout_id = r.id AND g.state = 'dropped'"
        " JOIN samples s ON s.group_id = g.group_id"
        " JOIN payloads p ON p.trajectory_id = s.trajectory_id"
        " WHERE r.status != 'running' AND r.finished_at < ?"
        " LIMIT ?)",
        (cutoff, cutoff, limit),
    ).rowcount


def remaining_groups(conn: sqlite3.Connection, rollout_id: str | None) -> int:
    """Groups that may still be delivered: not yet acked or dropped."""
    sql = "SELECT COUNT(*) FROM groups WHERE state NOT IN ('acked','dropped')"
    if rollout_id is None:
        return conn.execute(sql).fetchone()[0]
    return conn.execute(sql + " AND rollout_id=?", (rollout_id,)).fetchone()[0]


def group_states(conn: sqlite3.Connection) -> dict[str, int]:
    return dict(conn.execute("SELECT state, COUNT(*) FROM groups GROUP BY state"))
