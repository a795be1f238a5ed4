"""`rollouts view`: the web view over a data dir or an exported Parquet file, read-only, without
a running service. It listens on loopback only, so it asks for no key. With `--tokenizer` the
token view shows each token's text (without it, ids)."""

from __future__ import annotations

from pathlib import Path

import typer

from service.ui.viewer import VIEW_PORT

LOOPBACK = "127.0.0.1"


def register(app: typer.Typer) -> None:
    @app.command("view")
    def view(
        data_dir: Path = typer.Option(
            ..., "--data-dir", help="A service's --data-dir, or a Parquet file from export."
        ),
        tokenizer: Path | None = typer.Option(
            None,
            "--tokenizer",
            help="The model's byte-level BPE tokenizer (tokenizer.json, vocab.json, or their "
            "folder): the token view shows each token's text. Without it: token ids.",
        ),
        port: int = typer.Option(VIEW_PORT, "--port", min=0, max=65535),
        log_level: str = typer.Option("warning", "--log-level"),
    ) -> None:
        """Browse rollouts and trajectories in a web browser (http://127.0.0.1:PORT/ui)."""
        import uvicorn

        from service.ui.tokens import TokenizerError, TokenizerFiles
        from service.ui.viewer import create_view_app, open_source

        try:
            source = open_source(data_dir)
        except FileNotFoundError as e:
            typer.echo(f"error: --data-dir: {e}", err=True)
            raise typer.Exit(2) from None
        try:
            tokens = TokenizerFiles(tokenizer) if tokenizer is not None else None
        except TokenizerError as e:
            typer.echo(f"error: --tokenizer: {e}", err=True)
            raise typer.Exit(2) from None
        typer.echo(f"rollouts view of {source.label}: http://{LOOPBACK}:{port}/ui", err=True)
        app = create_view_app(source, tokens)
        uvicorn.run(app, host=LOOPBACK, port=port, log_level=log_level)
