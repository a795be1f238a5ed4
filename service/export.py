"""Committed trajectories of a data dir -> one Parquet file in the shared schema, streamed."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from service.store import iter_trajectory_rows
from service.trajectory import ARROW_SCHEMA

ROWS_PER_GROUP = 256


def export_parquet(data_dir: Path, out: Path, rollout_id: str | None = None) -> int:
    """Stream rows into Parquet row groups (memory holds one chunk). Written to a temporary
    name and renamed, so a reader never sees half a file. Returns the number of rows."""
    tmp = out.with_name(out.name + ".partial")
    n = 0
    with pq.ParquetWriter(tmp, ARROW_SCHEMA) as writer:
        for rows in iter_trajectory_rows(data_dir, rollout_id, chunk=ROWS_PER_GROUP):
            writer.write_table(pa.Table.from_pylist(rows, schema=ARROW_SCHEMA))
            n += len(rows)
    os.replace(tmp, out)
    return n
