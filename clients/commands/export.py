"""`rollouts export`: committed trajectories of a data dir -> one Parquet file (ARROW_SCHEMA)."""

from __future__ import annotations

from pathlib import Path

import typer

from service.export import export_parquet


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
