"""Reading committed trajectories back out of the database file, bypassing the writer thread:
Parquet export and scripts read while the service runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from service.payload_codec import payload_dict
from service.store.schema import DB_NAME, connect


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
