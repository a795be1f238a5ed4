"""The database file: its name, its tables and how a connection to it is opened.

Tables: rollouts (request JSON, status), groups (pending/complete/leased/acked/dropped),
samples (one row per trajectory id: pending/done, status, reward, advantage), payloads (the
trajectory record, compressed JSON, on disk; deleted `--retention` after their group was
acknowledged or dropped), leases (batch_id, expires_at, state: active/acked/expired/released),
idempotency (Idempotency-Key -> rollout), meta (policy version); workspaces and
workspace_blobs (final workspaces kept for regrading), delivered_groups, staged_gradings,
regraded_groups and regrade_offers (regrades, and regraded groups offered to trainers).

New databases use incremental auto-vacuum, so space freed by retention goes back to the file
system (`reclaim`), not only to SQLite's free list.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

DB_NAME = "rollouts.sqlite3"
WAL_SIZE_LIMIT = 64 << 20

SCHEMA = """
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
    state TEXT NOT NULL,             -- active / acked / expired / released
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    acked_at REAL,
    n_groups INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS leases_acked ON leases (state, acked_at);
CREATE TABLE IF NOT EXISTS idempotency (
    key TEXT PRIMARY KEY,
    request_digest TEXT NOT NULL,
    rollout_id TEXT NOT NULL,
    created_at REAL NOT NULL
);
-- Final workspaces of samples that reached verification, kept for regrading (workspaces.py):
-- a manifest per trajectory, the files by content digest, each stored once.
CREATE TABLE IF NOT EXISTS workspaces (
    trajectory_id TEXT PRIMARY KEY,
    digest TEXT NOT NULL,            -- sha256 of the tar the verifier received
    size INTEGER NOT NULL,           -- its bytes
    stored INTEGER NOT NULL,         -- bytes it added to the store: manifest and new blobs
    manifest BLOB NOT NULL,          -- compressed JSON (sandboxes/workspace_snapshot.py)
    graded_status TEXT NOT NULL,     -- the sample's status when a verifier grades it
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS workspace_blobs (
    digest TEXT PRIMARY KEY,         -- sha256 of the file's content
    refs INTEGER NOT NULL,           -- workspaces holding it; deleted at 0
    size INTEGER NOT NULL,
    codec TEXT NOT NULL,             -- zlib / raw
    data BLOB NOT NULL
);
-- Regrades (regrades.py): groups ever leased (a regrade of one not yet acked waits), the
-- gradings regrades recorded per group and how many of them are settled (served, with their
-- advantages, and offered), and the regraded groups offered to trainers that ask for them.
CREATE TABLE IF NOT EXISTS delivered_groups (group_id TEXT PRIMARY KEY);
-- Gradings a regrade recorded and its group does not serve yet: `settle` applies a group's
-- together with its advantages, in one transaction (docs/regrade.md).
CREATE TABLE IF NOT EXISTS staged_gradings (
    seq INTEGER PRIMARY KEY,         -- the order they are applied in
    trajectory_id TEXT NOT NULL,
    group_id TEXT NOT NULL,
    grading TEXT NOT NULL,           -- Grading as JSON
    output TEXT NOT NULL             -- the verifier's output
);
CREATE INDEX IF NOT EXISTS staged_gradings_group ON staged_gradings (group_id, seq);
CREATE TABLE IF NOT EXISTS regraded_groups (
    group_id TEXT PRIMARY KEY,
    gradings INTEGER NOT NULL,
    settled INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS regrade_offers (
    offer_id INTEGER PRIMARY KEY,    -- also the lease order within a priority
    group_id TEXT NOT NULL,
    rollout_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    priority INTEGER NOT NULL,
    attempt INTEGER NOT NULL,        -- the group's attempt regraded (a re-run supersedes it)
    state TEXT NOT NULL,             -- complete / leased / acked / superseded
    batch_id TEXT,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS regrade_offers_ready ON regrade_offers (state, priority DESC, offer_id);
CREATE INDEX IF NOT EXISTS regrade_offers_batch ON regrade_offers (batch_id);
"""


def connect(path: Path, synchronous: str = "FULL", readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    else:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        # Payloads are ~100 KB blobs: 64 KiB pages make them short overflow chains (and WAL
        # checkpoints rarer), ~2.5x faster commits than 4 KiB pages (docs/performance.md).
        # Takes effect only when the database is created (must precede WAL mode).
        conn.execute("PRAGMA page_size=65536")
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # also only on creation
        conn.execute("PRAGMA journal_mode=WAL")
        # After a checkpoint the WAL file is cut back to this size, not left at its peak.
        conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
        conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA busy_timeout=10000")
    return conn
