"""`rollouts serve`: the rollout service (FastAPI on uvicorn). Flag defaults are the settings'."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import typer
from pydantic import ValidationError

from service.settings import (
    PolicySettings,
    SandboxSettings,
    ServiceSettings,
    Settings,
    default_of,
)

_service = partial(default_of, ServiceSettings)
_policy = partial(default_of, PolicySettings)
_sandboxes = partial(default_of, SandboxSettings)


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
        host: str = typer.Option(_service("host"), "--host"),
        port: int = typer.Option(_service("port"), "--port", min=0, max=65535),
        policy_url: list[str] = typer.Option(
            None,
            "--policy-url",
            envvar="ROLLOUTS_POLICY_URL",
            help="vLLM base URL (repeatable, or comma-separated).",
        ),  # fmt: skip
        model: str = typer.Option(
            _policy("model"), "--model", help="Default: the server's only model."
        ),
        data_dir: Path = typer.Option(_service("data_dir"), "--data-dir"),
        api_key: str = typer.Option(_service("api_key"), "--api-key", envvar="ROLLOUTS_API_KEY"),
        max_concurrent_samples: int = typer.Option(
            _service("max_concurrent_samples"), "--max-concurrent-samples", min=1
        ),
        max_queued_samples: int = typer.Option(
            _service("max_queued_samples"), "--max-queued-samples", min=1
        ),
        image: str = typer.Option(
            _sandboxes("image"), "--image", help="Use this image for every task."
        ),
        dataset: list[str] = typer.Option(
            None, "--dataset", help="NAME=PATH: lets requests say tasks.path=NAME (repeatable)."
        ),
        stale_policy: str = typer.Option(
            _service("stale_policy"),
            "--stale-policy",
            help="drop|requeue groups older than max_staleness.",
        ),
        lease_ttl_s: float = typer.Option(
            _service("lease_ttl_s"), "--lease-ttl", min=1.0, help="Seconds."
        ),
        body_timeout_s: float = typer.Option(
            _service("body_read_timeout_s"),
            "--body-timeout",
            min=0.1,
            help="Seconds to receive a request body (else 408).",
        ),
        policy_timeout_s: float = typer.Option(
            _policy("timeout_s"), "--policy-timeout", help="Seconds per policy request."
        ),
        policy_retries: int = typer.Option(
            _policy("max_retries"), "--policy-retries", min=0, help="Retries of a failed request."
        ),
        policy_backoff_s: float = typer.Option(
            _policy("backoff_s"), "--policy-backoff", min=0.0, help="First retry delay, seconds."
        ),
        policy_cooldown_s: float = typer.Option(
            _policy("cooldown_s"),
            "--policy-cooldown",
            min=0.0,
            help="Seconds a failing policy server gets no new samples.",
        ),
        warm_containers: int = typer.Option(
            _sandboxes("warm_per_key"),
            "--warm-containers",
            min=0,
            help="Started containers kept idle per image (0: no warm pool).",
        ),
        create_rate: float = typer.Option(
            _sandboxes("create_rate"), "--create-rate", help="Container creates per second."
        ),
        max_concurrent_creates: int = typer.Option(
            _sandboxes("max_concurrent_creates"), "--max-concurrent-creates", min=1
        ),
        log_level: str = typer.Option("info", "--log-level"),
    ) -> None:
        """Serve the rollouts HTTP API (OpenAPI at /docs)."""
        import uvicorn

        from service.app import create_app

        try:
            settings = Settings(
                service=ServiceSettings(
                    host=host, port=port, data_dir=data_dir, api_key=api_key or None,
                    max_concurrent_samples=max_concurrent_samples,
                    max_queued_samples=max_queued_samples, datasets=_datasets(dataset or []),
                    stale_policy=stale_policy, lease_ttl_s=lease_ttl_s,
                    body_read_timeout_s=body_timeout_s,
                    body_idle_timeout_s=min(_service("body_idle_timeout_s"), body_timeout_s),
                ),
                policy=PolicySettings(
                    urls=policy_url or [], model=model, timeout_s=policy_timeout_s,
                    max_retries=policy_retries, backoff_s=policy_backoff_s,
                    cooldown_s=policy_cooldown_s,
                ),
                sandboxes=SandboxSettings(
                    image=image, warm_per_key=warm_containers, create_rate=create_rate,
                    max_concurrent_creates=max_concurrent_creates,
                ),
            )  # fmt: skip
            settings.service.check_exposure()
            if not settings.policy.urls:
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
