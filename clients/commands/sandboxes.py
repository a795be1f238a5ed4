"""`rollouts sandboxes`: housekeeping of sandbox containers."""

from __future__ import annotations

import asyncio

import typer

from sandboxes.docker_adapter import DockerUnavailable
from sandboxes.reaper import reap_orphans

app = typer.Typer(help="Sandbox containers.", no_args_is_help=True)


@app.command("gc")
def gc(
    all_owners: bool = typer.Option(
        False, "--all", help="Remove every rollouts container, also those of live processes."
    ),
) -> None:
    """Remove rollouts containers whose owner process is dead (or all of them with --all)."""
    try:
        removed = asyncio.run(reap_orphans(all_owners))
    except DockerUnavailable as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from e
    typer.echo(f"removed {removed} container(s)")
