"""`rollouts serve`: the rollout service (FastAPI on uvicorn)."""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import ValidationError

from service.settings import Settings


def _datasets(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise typer.BadParameter(f"expected NAME=PATH, got {item!r}", param_hint="--dataset")
        out[name] = path
    return out


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve(
        host: str = typer.Option("127.0.0.1", "--host"),
        port: int = typer.Option(8080, "--port", min=0, max=65535),
        policy_url: list[str] = typer.Option(
            None,
            "--policy-url",
            envvar="ROLLOUTS_POLICY_URL",
            help="vLLM base URL (repeatable, or comma-separated).",
        ),  # fmt: skip
        model: str = typer.Option(None, "--model", help="Default: the server's only model."),
        data_dir: Path = typer.Option(Path("rollouts-data"), "--data-dir"),
        api_key: str = typer.Option(None, "--api-key", envvar="ROLLOUTS_API_KEY"),
        max_concurrent_samples: int = typer.Option(64, "--max-concurrent-samples", min=1),
        max_queued_samples: int = typer.Option(100_000, "--max-queued-samples", min=1),
        image: str = typer.Option(None, "--image", help="Use this image for every task."),
        dataset: list[str] = typer.Option(
            None, "--dataset", help="NAME=PATH: lets requests say tasks.path=NAME (repeatable)."
        ),
        stale_policy: str = typer.Option(
            "drop", "--stale-policy", help="drop|requeue groups older than max_staleness."
        ),
        lease_ttl_s: float = typer.Option(600.0, "--lease-ttl", min=1.0, help="Seconds."),
        body_timeout_s: float = typer.Option(
            30.0, "--body-timeout", min=0.1, help="Seconds to receive a request body (else 408)."
        ),
        log_level: str = typer.Option("info", "--log-level"),
    ) -> None:
        """Serve the rollouts HTTP API (OpenAPI at /docs)."""
        import uvicorn

        from service.app import create_app

        try:
            settings = Settings(
                host=host, port=port, policy_urls=policy_url or [], model=model,
                data_dir=data_dir, api_key=api_key or None,
                max_concurrent_samples=max_concurrent_samples,
                max_queued_samples=max_queued_samples, image=image,
                datasets=_datasets(dataset or []), stale_policy=stale_policy,
                lease_ttl_s=lease_ttl_s, body_read_timeout_s=body_timeout_s,
                body_idle_timeout_s=min(10.0, body_timeout_s),
            )  # fmt: skip
            settings.check_exposure()
            if not settings.policy_urls:
                raise ValueError("no policy server: pass --policy-url or set ROLLOUTS_POLICY_URL")
        except ValidationError as e:
            err = e.errors()[0]
            field = ".".join(str(x) for x in err["loc"])
            typer.echo(f"error: {field}: {err['msg']}", err=True)
            raise typer.Exit(2) from None
        except ValueError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        uvicorn.run(create_app(settings), host=host, port=port, log_level=log_level)
