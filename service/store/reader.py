"""Reading committed trajectories back out of the database file, bypassing the writer thread:
Parquet export, the web view and scripts read while the service runs."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.payload_codec import payload_dict
from service.store.schema import DB_NAME, connect


def _readonly(data_dir: Path) -> sqlite3.Connection:
    path = Path(data_dir) / DB_NAME
    if not path.exists():
        raise FileNotFoundError(f"no rollouts database at {path}")
    return connect(path, readonly=True)


def iter_trajectory_rows(
    data_dir: Path, rollout_id: str | None = None, chunk: int = 256
) -> Iterator[list[dict[str, Any]]]:
    """Committed trajectories as ARROW_SCHEMA rows, `chunk` at a time, from a read-only
    connection (safe while the service runs: WAL readers do not block the writer)."""
    conn = _readonly(data_dir)
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


# ---------------------------------------------------------------- paged reads (the web view)
# The web view lists and filters from the samples table alone; a payload is decoded only for
# the one trajectory opened, so a store of any size opens at the cost of one page.

SAMPLE_COLUMNS = (
    "trajectory_id, rollout_id, group_id, task_id, sample_index, status, reward, advantage,"
    " version_start, tokens"
)
SAMPLE_KEYS = (
    "trajectory_id", "rollout_id", "group_id", "task_id", "sample_index", "status", "reward",
    "advantage", "policy_version", "tokens",
)  # fmt: skip


@dataclass(frozen=True)
class SampleFilter:
    """Which finished samples a page holds; None: any."""

    rollout_id: str | None = None
    task_id: str | None = None
    group_id: str | None = None
    status: str | None = None
    reward_min: float | None = None
    reward_max: float | None = None


def rollout_rows(data_dir: Path) -> list[dict[str, Any]]:
    """Every rollout, newest first, with its progress, status counts, mean reward (over
    finished unmasked samples) and pass@n, in a few queries whatever the number of samples."""
    conn = _readonly(data_dir)
    try:
        rollouts = conn.execute(
            "SELECT id, status, groups_total, samples_total, created_at FROM rollouts"
            " ORDER BY created_at DESC"
        ).fetchall()
        counts: dict[str, dict[str, int]] = {}
        for rid, status, n in conn.execute(
            "SELECT rollout_id, status, COUNT(*) FROM samples WHERE state='done'"
            " GROUP BY rollout_id, status"
        ):
            counts.setdefault(rid, {})[status] = n
        means = dict(
            conn.execute(
                "SELECT rollout_id, AVG(reward) FROM samples WHERE state='done'"
                " AND reward IS NOT NULL GROUP BY rollout_id"
            ).fetchall()
        )
        # pass@n: the share of finished groups whose best reward is a pass (1.0).
        pass_at_n = dict(
            conn.execute(
                "SELECT rollout_id, AVG(best >= 1.0) FROM (SELECT rollout_id, MAX(reward) AS best"
                " FROM samples WHERE state='done' AND group_id IN"
                " (SELECT group_id FROM groups WHERE state!='pending') GROUP BY group_id)"
                " GROUP BY rollout_id"
            ).fetchall()
        )
        groups_done = dict(
            conn.execute(
                "SELECT rollout_id, COUNT(*) FROM groups WHERE state!='pending' GROUP BY rollout_id"
            ).fetchall()
        )
    finally:
        conn.close()
    return [
        {
            "id": rid,
            "status": status,
            "groups_total": groups_total,
            "groups_completed": groups_done.get(rid, 0),
            "samples_total": samples_total,
            "samples_completed": sum(counts.get(rid, {}).values()),
            "counts": counts.get(rid, {}),
            "mean_reward": means.get(rid),
            "pass_at_n": pass_at_n.get(rid),
            "created_at": created_at,
        }
        for rid, status, groups_total, samples_total, created_at in rollouts
    ]


def sample_page(
    data_dir: Path, where: SampleFilter, offset: int, limit: int
) -> tuple[int, list[dict[str, Any]]]:
    """(how many finished samples match, the `limit` of them from `offset`), in store order:
    rollout, group, sample index."""
    clauses, args = ["state='done'"], []
    for column, value in (
        ("rollout_id", where.rollout_id),
        ("task_id", where.task_id),
        ("group_id", where.group_id),
        ("status", where.status),
    ):
        if value is not None:
            clauses.append(f"{column}=?")
            args.append(value)
    if where.reward_min is not None:
        clauses.append("reward>=?")
        args.append(where.reward_min)
    if where.reward_max is not None:
        clauses.append("reward<=?")
        args.append(where.reward_max)
    sql_where = " WHERE " + " AND ".join(clauses)
    conn = _readonly(data_dir)
    try:
        total = conn.execute("SELECT COUNT(*) FROM samples" + sql_where, args).fetchone()[0]
        rows = conn.execute(
            f"SELECT {SAMPLE_COLUMNS} FROM samples{sql_where}"
            " ORDER BY rollout_id, group_id, sample_index LIMIT ? OFFSET ?",
            [*args, limit, offset],
        ).fetchall()
    finally:
        conn.close()
    return total, [dict(zip(SAMPLE_KEYS, row, strict=True)) for row in rows]


def reward_by_version(data_dir: Path) -> list[tuple[int, float, int]]:
    """(policy version a sample started on, mean reward, scored samples), by version."""
    conn = _readonly(data_dir)
    try:
        return conn.execute(
            "SELECT version_start, AVG(reward), COUNT(*) FROM samples WHERE state='done'"
            " AND reward IS NOT NULL GROUP BY version_start ORDER BY version_start"
        ).fetchall()
    finally:
        conn.close()


def task_ids(data_dir: Path, limit: int) -> list[str]:
    """Up to `limit` task ids that have samples, sorted."""
    conn = _readonly(data_dir)
    try:
        rows = conn.execute(
            "SELECT DISTINCT task_id FROM samples ORDER BY task_id LIMIT ?", (limit,)
        ).fetchall()
    finally:
        conn.close()
    return [task for (task,) in rows]


def trajectory_row(data_dir: Path, trajectory_id: str) -> dict[str, Any] | None:
    """One committed trajectory as an ARROW_SCHEMA row (None: unknown, unfinished, or its
    payload deleted by retention)."""
    conn = _readonly(data_dir)
    try:
        row = conn.execute(
            "SELECT s.advantage, p.codec, p.data FROM samples s JOIN payloads p"
            " ON p.trajectory_id = s.trajectory_id WHERE s.trajectory_id=? AND s.state='done'",
            (trajectory_id,),
        ).fetchone()
    finally:
        conn.close()
    if row is None:
        return None
    advantage, codec, data = row
    return payload_dict(codec, data, advantage)
