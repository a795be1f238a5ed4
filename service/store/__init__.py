"""Durable state of the service: SQLite in WAL mode under --data-dir, one writer thread.

The package, one job per module:
- schema.py: the database file, its tables, opening a connection;
- writer.py: the thread holding the only writable connection, with group commit (a result is
  handed back only after COMMIT, so a trajectory is durable before any lease can deliver it,
  and a lease is durable before its batch id reaches the trainer);
- rollouts.py: rollouts and samples (create, commit with group advantages, cancel, summary);
- leases.py: groups out to the trainer (lease, expiry, staleness, ack);
- workspaces.py: final workspaces kept for regrading (manifests, blobs stored once);
- regrades.py: gradings recorded by regrades, regraded groups settled and offered again;
- facade.py: `Store`, the async way in (each method one job on the writer thread);
- records.py: what those calls return, and the group/trajectory id scheme;
- reader.py: committed trajectories read back through a read-only connection (export);
- disk.py: the data disk as a budget (new work refused before the disk fills);
- errors.py: what the API maps to 4xx (and DiskFull to 503).

Everything callers use is re-exported here: `from service.store import Store, ...`.
"""

from service.payload_codec import (
    CODEC,
    encode_payload,
    payload_dict,
    payloads_to_arrow,
    with_advantage,
)
from service.store.disk import DiskBudget
from service.store.errors import (
    DiskFull,
    IdempotencyConflict,
    LeaseExpired,
    StoreError,
    UnknownBatch,
    UnknownRollout,
    UnknownTrajectory,
)
from service.store.facade import Store
from service.store.reader import iter_trajectory_rows
from service.store.records import (
    AckResult,
    CommitResult,
    GroupPlan,
    LeasedGroup,
    LeaseResult,
    PendingGroup,
    Requeued,
    RolloutSummary,
    group_id_for,
    sample_trajectory_id,
)
from service.store.schema import DB_NAME, connect
from service.store.writer import MAX_JOBS_PER_TRANSACTION

__all__ = [
    "CODEC",
    "DB_NAME",
    "MAX_JOBS_PER_TRANSACTION",
    "AckResult",
    "CommitResult",
    "DiskBudget",
    "DiskFull",
    "GroupPlan",
    "IdempotencyConflict",
    "LeaseExpired",
    "LeaseResult",
    "LeasedGroup",
    "PendingGroup",
    "Requeued",
    "RolloutSummary",
    "Store",
    "StoreError",
    "UnknownBatch",
    "UnknownRollout",
    "UnknownTrajectory",
    "connect",
    "encode_payload",
    "group_id_for",
    "iter_trajectory_rows",
    "payload_dict",
    "payloads_to_arrow",
    "sample_trajectory_id",
    "with_advantage",
]
