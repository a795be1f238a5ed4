"""Regrades, as jobs on the writer's connection: which samples can be graded again, recording
a new grading on a trajectory, settling a regraded group (advantages again, and an offer to
trainers when a trainer already had the group), and leasing those offers.

A grading is appended to the trajectory's `gradings`; the latest one is what it serves (its
reward, status, flags, files and output), in the payload and in the samples table alike. A
regrade's gradings are staged as it records them (`record`) and served only when their group
is settled (`settle`): gradings and recomputed advantages in one transaction, so no reader ever
sees a new reward beside an old advantage. A group out to a trainer (leased, not acknowledged)
is settled only once acknowledged: every delivery of it until then serves the same grading.
Groups left unsettled (a regrade killed between the two) are settled when the store opens.
A group a trainer never had is simply served with its new grades; one a trainer acknowledged
is never changed behind its back: the regraded group becomes an offer of its own, leased only
by trainers that ask for regraded groups (`lease` here, under the same batch ids and ack as
ordinary leases, docs/delivery.md).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Any

import orjson

from service.advantages import compute_advantages
from service.payload_codec import decode_payload, encode_payload, payload_codec, payload_dict
from service.store import leases
from service.store.errors import UnknownTrajectory
from service.store.records import LeaseResult
from service.store.rollouts import WriterState, _advantage_config
from service.trajectory import Grading, Trajectory, is_masked


@dataclass(frozen=True)
class Candidate:
    """A finished sample a regrade may grade again (`kept`: its final workspace is stored)."""

    trajectory_id: str
    group_id: str
    rollout_id: str
    task_id: str
    kept: bool


def candidates(
    conn: sqlite3.Connection, rollout_id: str | None, task_ids: list[str] | None
) -> list[Candidate]:
    """Finished samples with their payload, of a rollout and/or tasks, in store order."""
    sql = (
        "SELECT s.trajectory_id, s.group_id, s.rollout_id, s.task_id,"
        " w.trajectory_id IS NOT NULL FROM samples s"
        " JOIN payloads p ON p.trajectory_id = s.trajectory_id"
        " LEFT JOIN workspaces w ON w.trajectory_id = s.trajectory_id WHERE s.state='done'"
    )
    args: list[Any] = []
    if rollout_id is not None:
        sql += " AND s.rollout_id=?"
        args.append(rollout_id)
    if task_ids:
        sql += f" AND s.task_id IN ({','.join('?' * len(task_ids))})"
        args.extend(task_ids)
    sql += " ORDER BY s.rollout_id, s.group_id, s.sample_index"
    return [Candidate(t, g, r, task, bool(k)) for t, g, r, task, k in conn.execute(sql, args)]


def grading_history(conn: sqlite3.Connection, trajectory_id: str) -> list[dict[str, Any]]:
    """The trajectory's gradings, oldest first: those it serves (from the payload's header
    only), then those recorded and not yet settled."""
    row = conn.execute(
        "SELECT codec, data FROM payloads WHERE trajectory_id=?", (trajectory_id,)
    ).fetchone()
    if row is None:
        raise UnknownTrajectory(f"no stored trajectory {trajectory_id!r}")
    served = orjson.loads(decode_payload(row[0], row[1]).header).get("gradings") or []
    return served + [g for g, _ in _staged(conn, trajectory_id)]


def _staged(conn: sqlite3.Connection, trajectory_id: str) -> list[tuple[dict[str, Any], str]]:
    """The trajectory's gradings recorded and not yet settled, oldest first, with outputs."""
    return [
        (orjson.loads(g), out)
        for g, out in conn.execute(
            "SELECT grading, output FROM staged_gradings WHERE trajectory_id=? ORDER BY seq",
            (trajectory_id,),
        )
    ]


def _serving(record: dict[str, Any], grading: dict[str, Any], output: str) -> Trajectory:
    """The trajectory `record` serving `grading` (appended to its gradings), checked like any
    commit."""
    return Trajectory.model_validate(
        {
            **record,
            "gradings": [*(record.get("gradings") or []), grading],
            "reward": grading["reward"],
            "status": grading["status"],
            "reward_flags": list(grading.get("reward_flags") or []),
            "verifier_files": list(grading.get("verifier_files") or []),
            "verifier_output": output,
            "tests_digest": grading.get("tests_digest") or "",
        }
    )


@dataclass(frozen=True)
class Recorded:
    """A grading recorded on a trajectory: what it served before and what it serves now."""

    trajectory_id: str
    task_id: str
    before_reward: float | None
    before_status: str
    before_flags: list[str]
    after_reward: float | None
    after_status: str
    after_flags: list[str]


def record(
    conn: sqlite3.Connection, trajectory_id: str, grading: Grading, output: str
) -> Recorded | None:
    """Record `grading` for the trajectory (None, nothing written: its latest grading already
    has this grader and these tests, so a resumed regrade adds no duplicate). It is staged, not
    served: the trajectory keeps serving its grading (and its group its advantages) until
    `settle` applies the group's new gradings and advantages together, so no lease in between
    can see a new reward beside an old advantage."""
    row = conn.execute(
        "SELECT p.codec, p.data, s.advantage, s.group_id FROM payloads p"
        " JOIN samples s ON s.trajectory_id = p.trajectory_id"
        " WHERE p.trajectory_id=? AND s.state='done'",
        (trajectory_id,),
    ).fetchone()
    if row is None:
        raise UnknownTrajectory(f"no stored trajectory {trajectory_id!r}")
    codec, data, advantage, group_id = row
    old = payload_dict(codec, data, advantage)
    staged = _staged(conn, trajectory_id)
    history = (old.get("gradings") or []) + [g for g, _ in staged]
    key = (grading.grader_version, grading.tests_digest)
    if history and (history[-1].get("grader_version"), history[-1].get("tests_digest")) == key:
        return None
    # What the trajectory will serve once settled: checked now, so settling cannot fail on it.
    before = staged[-1][0] if staged else old
    new = grading.model_dump(mode="json")
    t = _serving(old, new, output)
    conn.execute(
        "INSERT INTO staged_gradings (trajectory_id, group_id, grading, output) VALUES (?,?,?,?)",
        (trajectory_id, group_id, orjson.dumps(new).decode(), output),
    )
    conn.execute(
        "INSERT INTO regraded_groups VALUES (?, 1, 0)"
        " ON CONFLICT(group_id) DO UPDATE SET gradings = gradings + 1",
        (group_id,),
    )
    return Recorded(
        trajectory_id,
        t.task_id,
        before.get("reward"),
        before.get("status") or "",
        list(before.get("reward_flags") or []),
        t.reward,
        t.status.value,
        list(t.reward_flags),
    )


@dataclass(frozen=True)
class Settled:
    group_id: str
    advantages: list[float] | None  # recomputed (None: the group is still running, or waits)
    offered: bool  # a trainer had the group: its regrade is offered as a new batch
    # Out to a trainer (leased, or its lease ended unacknowledged): its new gradings wait,
    # unserved, until a trainer acknowledges it; that ack settles it.
    waiting: bool = False


def _out_to_trainer(conn: sqlite3.Connection, group_id: str, group_state: str) -> bool:
    """The group was handed to a trainer and not acknowledged: leased now, or back to
    `complete` after its lease expired or was released (delivered again until acked)."""
    if group_state == "leased":
        return True
    return group_state == "complete" and (
        conn.execute("SELECT 1 FROM delivered_groups WHERE group_id=?", (group_id,)).fetchone()
        is not None
    )


def _apply(conn: sqlite3.Connection, group_id: str) -> None:
    """Serve the group's staged gradings (payload and samples row), oldest first, and drop
    them. One whose payload is gone (deleted by retention) is dropped with it."""
    staged = conn.execute(
        "SELECT trajectory_id, grading, output FROM staged_gradings WHERE group_id=? ORDER BY seq",
        (group_id,),
    ).fetchall()
    for trajectory_id, grading, output in staged:
        row = conn.execute(
            "SELECT p.codec, p.data, s.advantage FROM payloads p"
            " JOIN samples s ON s.trajectory_id = p.trajectory_id WHERE p.trajectory_id=?",
            (trajectory_id,),
        ).fetchone()
        if row is None:
            continue
        t = _serving(payload_dict(*row), orjson.loads(grading), output)
        conn.execute(
            "UPDATE payloads SET codec=?, data=? WHERE trajectory_id=?",
            (payload_codec(t), encode_payload(t), trajectory_id),
        )
        conn.execute(
            "UPDATE samples SET status=?, reward=? WHERE trajectory_id=?",
            (t.status.value, t.reward, trajectory_id),
        )
    conn.execute("DELETE FROM staged_gradings WHERE group_id=?", (group_id,))


def settle(conn: sqlite3.Connection, state: WriterState, group_id: str) -> Settled | None:
    """After a regrade recorded gradings of this group: serve them, recompute its advantages
    and, when a trainer acknowledged it, offer it again as a regraded group, all in this one
    transaction. A group out to a trainer (leased and not acknowledged) waits: it keeps
    serving the grading it was delivered with until acknowledged, and the ack settles it.
    Idempotent (None: nothing recorded since it was last settled), so a regrade that was
    killed settles on resume, or when the store opens."""
    row = conn.execute(
        "SELECT gradings, settled FROM regraded_groups WHERE group_id=?", (group_id,)
    ).fetchone()
    if row is None or row[0] <= row[1]:
        return None
    rollout_id, task_id, group_state, priority, attempt = conn.execute(
        "SELECT rollout_id, task_id, state, priority, attempt FROM groups WHERE group_id=?",
        (group_id,),
    ).fetchone()
    if _out_to_trainer(conn, group_id, group_state):
        return Settled(group_id, None, False, waiting=True)
    _apply(conn, group_id)
    conn.execute("UPDATE regraded_groups SET settled = gradings WHERE group_id=?", (group_id,))
    if group_state == "pending":  # its advantages come when its last sample commits
        return Settled(group_id, None, False)
    rows = conn.execute(
        "SELECT trajectory_id, status, reward FROM samples WHERE group_id=? ORDER BY sample_index",
        (group_id,),
    ).fetchall()
    advantages = compute_advantages(
        [r for _, _, r in rows],
        [is_masked(status) for _, status, _ in rows],
        _advantage_config(conn, state, rollout_id),
    )
    conn.executemany(
        "UPDATE samples SET advantage=? WHERE trajectory_id=?",
        [(a, tid) for a, (tid, _, _) in zip(advantages, rows, strict=True)],
    )
    # Only an acknowledged group is offered: one never delivered serves its new grades when it
    # is leased, and a dropped one is never delivered.
    if group_state != "acked":
        return Settled(group_id, advantages, False)
    waiting = conn.execute(
        "SELECT 1 FROM regrade_offers WHERE group_id=? AND state='complete' AND attempt=?",
        (group_id, attempt),
    ).fetchone()
    if waiting is None:  # an offer not yet leased serves the latest grades when it is
        conn.execute(
            "INSERT INTO regrade_offers (group_id, rollout_id, task_id, priority, attempt,"
            " state, created_at) VALUES (?,?,?,?,?,'complete',?)",
            (group_id, rollout_id, task_id, priority, attempt, time.time()),
        )
    return Settled(group_id, advantages, True)


def unsettled(conn: sqlite3.Connection, batch_id: str | None = None) -> list[str]:
    """Groups with gradings not yet settled: all of them, or those of one batch."""
    sql = "SELECT r.group_id FROM regraded_groups r"
    args: list[Any] = []
    if batch_id is not None:
        sql += " JOIN groups g ON g.group_id = r.group_id AND g.batch_id = ?"
        args.append(batch_id)
    return [g for (g,) in conn.execute(sql + " WHERE r.gradings > r.settled", args)]


# ---------------------------------------------------------------- offers of regraded groups


def _refresh(conn: sqlite3.Connection, now: float) -> None:
    """Offers of leases that ended unacknowledged are offered again; offers of groups re-run
    since (another attempt), dropped, or whose payloads retention deleted, are superseded; of
    two offers of a group waiting at once, the older stays."""
    leases._expire(conn, now)
    conn.execute(
        "UPDATE regrade_offers SET state='complete', batch_id=NULL WHERE state='leased'"
        " AND batch_id IN (SELECT batch_id FROM leases WHERE state IN ('expired','released'))"
    )
    conn.execute(
        "UPDATE regrade_offers SET state='superseded' WHERE state='complete' AND ("
        " offer_id NOT IN (SELECT MIN(o.offer_id) FROM regrade_offers o"
        "  WHERE o.state='complete' GROUP BY o.group_id)"
        " OR NOT EXISTS (SELECT 1 FROM groups g WHERE g.group_id = regrade_offers.group_id"
        "  AND g.attempt = regrade_offers.attempt AND g.state != 'dropped')"
        " OR NOT EXISTS (SELECT 1 FROM samples s JOIN payloads p"
        "  ON p.trajectory_id = s.trajectory_id WHERE s.group_id = regrade_offers.group_id))"
    )


def lease(
    conn: sqlite3.Connection, *, max_groups: int, rollout_id: str | None, lease_s: float
) -> LeaseResult:
    """Lease regraded groups (their current records: latest gradings, new advantages)."""
    now = time.time()
    _refresh(conn, now)
    sql = (
        "SELECT offer_id, group_id, task_id, rollout_id FROM regrade_offers WHERE state='complete'"
    )
    args: list[Any] = []
    if rollout_id is not None:
        sql += " AND rollout_id=?"
        args.append(rollout_id)
    sql += " ORDER BY priority DESC, offer_id LIMIT ?"
    args.append(max_groups)
    picked = conn.execute(sql, args).fetchall()
    if not picked:
        return LeaseResult(None, 0.0, [])
    batch_id, expires_at = leases.open_lease(conn, now, lease_s, len(picked))
    offer_ids = [o for o, _, _, _ in picked]
    conn.execute(
        "UPDATE regrade_offers SET state='leased', batch_id=?"
        f" WHERE offer_id IN ({','.join('?' * len(offer_ids))})",
        [batch_id, *offer_ids],
    )
    groups = leases.leased_groups(conn, [(g, task, r) for _, g, task, r in picked])
    return LeaseResult(batch_id, expires_at, groups)


def ack(conn: sqlite3.Connection, batch_id: str) -> None:
    """The offers of an acknowledged batch are final (call after `leases.ack` succeeded)."""
    conn.execute(
        "UPDATE regrade_offers SET state='acked' WHERE batch_id=? AND state='leased'", (batch_id,)
    )


def release(conn: sqlite3.Connection, batch_id: str) -> int:
    """Offer again at once the offers of a released lease; how many."""
    return conn.execute(
        "UPDATE regrade_offers SET state='complete', batch_id=NULL"
        " WHERE batch_id=? AND state='leased'",
        (batch_id,),
    ).rowcount


def recover(conn: sqlite3.Connection) -> None:
    """On open: offers leased by a previous process are offered again (its leases expired)."""
    conn.execute("UPDATE regrade_offers SET state='complete', batch_id=NULL WHERE state='leased'")


def remaining(conn: sqlite3.Connection, rollout_id: str | None) -> int:
    """Regraded groups offered and not yet acknowledged."""
    sql = "SELECT COUNT(*) FROM regrade_offers WHERE state IN ('complete','leased')"
    if rollout_id is None:
        return conn.execute(sql).fetchone()[0]
    return conn.execute(sql + " AND rollout_id=?", (rollout_id,)).fetchone()[0]
