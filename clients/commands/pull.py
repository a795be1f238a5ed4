"""`rollouts pull`: lease batches from a service, write each as Parquet, then ack."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq
import typer

from clients.trainer import Batch, ServiceError, TrainerClient
from service.settings import default_of
from service.wire import LeaseRequest


def write_batch(batch: Batch, out_dir: Path) -> Path:
    """Durably: temp file, fsync, rename, fsync the folder. Only then may the batch be acked."""
    final = out_dir / f"batch-{batch.batch_id}.parquet"
    tmp = out_dir / f".batch-{batch.batch_id}.parquet.partial"
    pq.write_table(batch.to_arrow(), tmp)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    dfd = os.open(out_dir, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return final


def register(app: typer.Typer) -> None:
    @app.command("pull")
    def pull(
        url: str = typer.Option(..., "--url", help="Service base URL."),
        out: Path = typer.Option(..., "--out", help="Folder for batch-<id>.parquet files."),
        max_groups: int = typer.Option(
            default_of(LeaseRequest, "max_groups"), "--max-groups", min=1
        ),
        api_key: str = typer.Option(None, "--api-key", envvar="ROLLOUTS_API_KEY"),
        rollout: str = typer.Option(None, "--rollout", help="Only this rollout id."),
        wait_s: float = typer.Option(
            default_of(LeaseRequest, "wait_s"), "--wait", min=0.0, help="Seconds per lease call."
        ),
        follow: bool = typer.Option(
            False, "--follow", help="Keep waiting after everything is delivered."
        ),
        regraded: bool = typer.Option(
            False,
            "--regraded",
            help="Pull groups regraded after a trainer had them instead (docs/regrade.md).",
        ),
    ) -> None:
        """Pull complete groups until none remain (or forever with --follow)."""
        out.mkdir(parents=True, exist_ok=True)
        total = 0
        try:
            with TrainerClient(url, api_key) as client:
                batches = client.batches(
                    max_groups, rollout, wait_s, stop_when_done=not follow, regraded=regraded
                )
                for batch in batches:
                    path = write_batch(batch, out)
                    batch.ack()
                    total += len(batch.trajectories)
                    typer.echo(f"{path} ({len(batch.groups)} groups)")
        except ServiceError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(1) from None
        typer.echo(f"{total} trajectories pulled")
