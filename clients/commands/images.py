"""`rollouts images`: build the offline sandbox base image; prune task images."""

from __future__ import annotations

import asyncio
from typing import Literal

import typer

from sandboxes.docker_adapter import default_adapter
from sandboxes.images import (
    BASE_TAG,
    DEFAULT_BUILD_MODE,
    BuildSettings,
    ImageError,
    build_base_image,
    prune_images,
)

app = typer.Typer(help="Sandbox images.", no_args_is_help=True)


@app.command("build")
def build(
    tag: str = typer.Option(BASE_TAG, "--tag", help="Tag of the base image."),
    mode: str = typer.Option(
        DEFAULT_BUILD_MODE,
        "--mode",
        help="auto (Dockerfile if a registry is reachable, else debootstrap), "
        "debootstrap, or dockerfile.",
    ),
) -> None:
    """Build the sandbox base image (Debian bookworm + bash, python3, pytest, tmux, procps)."""
    if mode not in ("auto", "debootstrap", "dockerfile"):
        typer.echo(f"error: --mode must be auto, debootstrap or dockerfile, got {mode!r}", err=True)
        raise typer.Exit(2)
    chosen: Literal["auto", "debootstrap", "dockerfile"] = mode  # type: ignore[assignment]
    try:
        used = asyncio.run(build_base_image(tag, chosen))
    except ImageError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from e
    typer.echo(f"built {tag} ({used})")


@app.command("prune")
def prune(
    budget_gb: float = typer.Option(
        None, "--budget-gb", min=0.0, help="Keep at most this many GiB of task images."
    ),
    unused_for_s: float = typer.Option(
        None, "--unused-for", min=0.0, help="Remove task images unused for this many seconds."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what would be removed."),
) -> None:
    """Remove task images (rollouts-env:*), least recently used first. Without options: down
    to the service's default image budget. Images a container still uses are kept."""
    if budget_gb is None and unused_for_s is None:
        budget_bytes = BuildSettings.budget_bytes
    else:
        budget_bytes = None if budget_gb is None else int(budget_gb * 2**30)
    removed = asyncio.run(
        prune_images(
            default_adapter(),
            budget_bytes=budget_bytes,
            unused_for_s=unused_for_s,
            dry_run=dry_run,
        )
    )
    verb = "would remove" if dry_run else "removed"
    for image in removed:
        typer.echo(f"{verb} {image.ref} ({image.size >> 20} MiB)")
    freed = sum(i.size for i in removed) >> 20
    typer.echo(f"{verb} {len(removed)} task images, {freed} MiB")
