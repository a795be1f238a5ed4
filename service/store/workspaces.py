"""Final workspaces kept for regrading, as jobs on the writer's connection.

A sample that reached verification keeps the workspace tar its verifier received, split by
`sandboxes/workspace_snapshot.py` into a manifest (one row in `workspaces`, per trajectory)
and files by sha256 (`workspace_blobs`, shared by every workspace that holds the same file,
counted in `refs`). The workspace is written in the transaction that commits its trajectory,
so a committed trajectory has its workspace and nothing else does; it goes when its payload
goes (retention, a staleness re-run: `purge_orphans`), and a blob goes with its last workspace.
Compression happens before the job (`pack`, on the caller's thread), never on the writer.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from sandboxes.workspace_snapshot import (
    Snapshot,
    SnapshotError,
    blob_digests,
    manifest_bytes,
    manifest_of,
    pack,
    rebuild,
    unpack,
)

log = logging.getLogger(__name__)
_CHUNK = 500  # digests per IN (...) query: under SQLite's variable limit


@dataclass
class KeptWorkspace:
    """What one trajectory's commit writes: the manifest and the blobs the store lacked when
    the snapshot was taken, compressed."""

    digest: str
    size: int
    manifest: bytes  # compressed JSON
    digests: list[str]  # every blob it references, each once
    blobs: dict[str, tuple[str, int, bytes]] = field(default_factory=dict)  # (codec, size, data)
    graded_status: str = "ok"  # the sample's status when a verifier grades it

    @property
    def new_bytes(self) -> int:
        return len(self.manifest) + sum(len(data) for _, _, data in self.blobs.values())


def pack_snapshot(snapshot: Snapshot, graded_status: str) -> KeptWorkspace:
    """Compress a snapshot for the store (CPU work: call it off the event loop)."""
    blobs = {}
    for digest, data in snapshot.blobs.items():
        codec, packed = pack(data)
        blobs[digest] = (codec, len(data), packed)
    return KeptWorkspace(
        snapshot.digest,
        snapshot.size,
        manifest_bytes(snapshot.manifest),
        snapshot.digests,
        blobs,
        graded_status,
    )


class MissingBlob(RuntimeError):
    """A blob the snapshot took for stored was deleted before the commit (retention ran in
    between): the workspace is not kept, the trajectory is committed all the same."""


def _chunks(items: list[str]) -> Iterable[list[str]]:
    for i in range(0, len(items), _CHUNK):
        yield items[i : i + _CHUNK]


def known(conn: sqlite3.Connection, digests: list[str]) -> set[str]:
    """The digests among `digests` whose blobs are stored."""
    out: set[str] = set()
    for chunk in _chunks(list(dict.fromkeys(digests))):
        marks = ",".join("?" * len(chunk))
        out.update(
            d
            for (d,) in conn.execute(
                f"SELECT digest FROM workspace_blobs WHERE digest IN ({marks})", chunk
            )
        )
    return out


def put(conn: sqlite3.Connection, trajectory_id: str, kept: KeptWorkspace) -> int:
    """Keep `kept` as the workspace of `trajectory_id` (replacing one it had); returns the
    bytes it added. MissingBlob, with nothing written, when a blob it needs is gone."""
    conn.execute("SAVEPOINT workspace")
    try:
        delete(conn, [trajectory_id])
        added = len(kept.manifest)
        have = known(conn, kept.digests)
        for digest in kept.digests:
            if digest in have:
                conn.execute("UPDATE workspace_blobs SET refs = refs + 1 WHERE digest=?", (digest,))
                continue
            if digest not in kept.blobs:
                raise MissingBlob(f"blob {digest} of {trajectory_id}'s workspace is gone")
            codec, size, data = kept.blobs[digest]
            conn.execute(
                "INSERT INTO workspace_blobs VALUES (?, 1, ?, ?, ?)", (digest, size, codec, data)
            )
            added += len(data)
        conn.execute(
            "INSERT INTO workspaces VALUES (?,?,?,?,?,?,?)",
            (
                trajectory_id,
                kept.digest,
                kept.size,
                added,
                kept.manifest,
                kept.graded_status,
                time.time(),
            ),
        )
    except BaseException:
        conn.execute("ROLLBACK TO workspace")
        conn.execute("RELEASE workspace")
        raise
    conn.execute("RELEASE workspace")
    return added


def put_or_skip(conn: sqlite3.Connection, trajectory_id: str, kept: KeptWorkspace) -> int:
    """`put`, or 0 (logged) when a blob went missing: keeping a workspace never costs its
    trajectory's commit."""
    try:
        return put(conn, trajectory_id, kept)
    except MissingBlob as e:
        log.warning("workspace not kept: %s", e)
        return 0


def delete(conn: sqlite3.Connection, trajectory_ids: list[str]) -> int:
    """Delete these trajectories' workspaces, and blobs no other workspace holds; returns how
    many workspaces were deleted."""
    deleted = 0
    for tid in trajectory_ids:
        row = conn.execute(
            "DELETE FROM workspaces WHERE trajectory_id=? RETURNING manifest", (tid,)
        ).fetchone()
        if row is None:
            continue
        deleted += 1
        digests = blob_digests(manifest_of(row[0]))
        conn.executemany(
            "UPDATE workspace_blobs SET refs = refs - 1 WHERE digest=?", [(d,) for d in digests]
        )
        for chunk in _chunks(digests):
            marks = ",".join("?" * len(chunk))
            conn.execute(
                f"DELETE FROM workspace_blobs WHERE refs <= 0 AND digest IN ({marks})", chunk
            )
    return deleted


def purge_orphans(conn: sqlite3.Connection, limit: int) -> int:
    """Delete up to `limit` workspaces whose trajectory's payload is gone (retention deleted
    it, or a staleness re-run replaced the sample). Returns how many."""
    ids = [
        tid
        for (tid,) in conn.execute(
            "SELECT w.trajectory_id FROM workspaces w WHERE NOT EXISTS"
            " (SELECT 1 FROM payloads p WHERE p.trajectory_id = w.trajectory_id) LIMIT ?",
            (limit,),
        )
    ]
    return delete(conn, ids)


@dataclass(frozen=True)
class StoredWorkspace:
    digest: str
    size: int
    graded_status: str
    tar: bytes  # rebuilt and checked against `digest`


def load(conn: sqlite3.Connection, trajectory_id: str) -> StoredWorkspace | None:
    """A trajectory's kept workspace, rebuilt (None: none kept). SnapshotError when it does not
    rebuild into the bytes that were verified."""
    row = conn.execute(
        "SELECT digest, size, manifest, graded_status FROM workspaces WHERE trajectory_id=?",
        (trajectory_id,),
    ).fetchone()
    if row is None:
        return None
    digest, size, manifest_data, graded_status = row
    manifest = manifest_of(manifest_data)
    digests = blob_digests(manifest)
    blobs: dict[str, bytes] = {}
    for chunk in _chunks(digests):
        marks = ",".join("?" * len(chunk))
        for d, bsize, codec, data in conn.execute(
            f"SELECT digest, size, codec, data FROM workspace_blobs WHERE digest IN ({marks})",
            chunk,
        ):
            blobs[d] = unpack(codec, data, bsize)
    tar = rebuild(manifest, blobs)
    if len(tar) != size:
        raise SnapshotError(f"{trajectory_id}'s workspace rebuilt to {len(tar)} bytes, not {size}")
    return StoredWorkspace(digest, size, graded_status, tar)


@dataclass(frozen=True)
class WorkspaceStats:
    workspaces: int
    blobs: int
    stored_bytes: int  # manifests and compressed blobs
    tar_bytes: int  # what the workspaces hold uncompressed, summed over workspaces
    manifest_bytes: int  # of stored_bytes, the manifests'


def stats(conn: sqlite3.Connection) -> WorkspaceStats:
    n, tars, manifests = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(size), 0), COALESCE(SUM(LENGTH(manifest)), 0)"
        " FROM workspaces"
    ).fetchone()
    blobs, blob_bytes = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(LENGTH(data)), 0) FROM workspace_blobs"
    ).fetchone()
    return WorkspaceStats(n, blobs, manifests + blob_bytes, tars, manifests)
