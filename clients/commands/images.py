"""`rollouts images`: build the offline sandbox base image."""

from __future__ import annotations

import asyncio
from typing import Literal

import typer

from sandboxes.images import BASE_TAG, ImageError, build_base_image

app = typer.Typer(help="Sandbox images.", no_args_is_help=True)


@app.command("build")
def build(
    tag: str = typer.Option(BASE_TAG, "--tag", help="Tag of the base image."),
    mode: str = typer.Option(
        "auto",
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
