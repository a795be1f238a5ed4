"""`rollouts export`: committed trajectories of a data dir -> one Parquet file (ARROW_SCHEMA)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import typer

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


def register(app: typer.Typer) -> None:
    @app.command("export")
    def export(
        data_dir: Path = typer.Option(..., "--data-dir", help="The service's --data-dir."),
        out: Path = typer.Option(..., "--out", help="Parquet file to write."),
        rollout: str = typer.Option(None, "--rollout", help="Only this rollout id."),
    ) -> None:
        """Export committed trajectories as Parquet (works while the service runs)."""
        try:
            n = export_parquet(data_dir, out, rollout)
        except FileNotFoundError as e:
            typer.echo(f"error: --data-dir: {e}", err=True)
            raise typer.Exit(2) from None
        typer.echo(f"{n} trajectories -> {out}")
