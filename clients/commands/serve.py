"""`rollouts serve`: the rollout service (FastAPI on uvicorn). Flag defaults are the settings'."""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

import typer
from pydantic import ValidationError

from clients.commands import options
from clients.commands.agent import agent_settings, describe
from clients.commands.doctor import refuse_unknown_runtime
from clients.commands.shared_settings import invalid, policy_settings, sandbox_settings
from service.settings import ServiceSettings, Settings, default_of
from service.wire import parse_chat_template_kwargs

_service = partial(default_of, ServiceSettings)


def _datasets(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise typer.BadParameter(f"expected NAME=PATH, got {item!r}", param_hint="--dataset")
        out[name] = path
    return out


def _template_kwargs(text: str | None) -> dict:
    try:
        return parse_chat_template_kwargs(text) or {}
    except ValueError as e:
        raise ValueError(f"--chat-template-kwargs: {e}") from None


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve(
        host: str = typer.Option(_service("host"), "--host"),
        port: int = typer.Option(_service("port"), "--port", min=0, max=65535),
        policy_url: list[str] = options.POLICY_URL,
        allow_policy_url: list[str] = typer.Option(
            None,
            "--allow-policy-url",
            help="A prefix of policy servers rollout requests may name as their own "
            "(`policy.urls`, e.g. a trainer's vLLM replicas), such as http://10.0.0.5:8000 or "
            "http://trainer-host (any port: name each); repeatable. Scheme, host, port and "
            "path are compared as parsed; other URLs get 403.",
        ),
        model: str = options.MODEL,
        data_dir: Path = typer.Option(_service("data_dir"), "--data-dir"),
        api_key: str = typer.Option(_service("api_key"), "--api-key", envvar="ROLLOUTS_API_KEY"),
        max_concurrent_samples: int = typer.Option(
            _service("max_concurrent_samples"), "--max-concurrent-samples", min=1
        ),
        adaptive_concurrency: bool = typer.Option(
            _service("adaptive_concurrency"),
            "--adaptive-concurrency/--fixed-concurrency",
            help="Let the samples in flight find their level under --max-concurrent-samples "
            "(grow while throughput grows, back off on latency or failures).",
        ),
        max_queued_samples: int = typer.Option(
            _service("max_queued_samples"), "--max-queued-samples", min=1
        ),
        retry_masked: int = options.RETRY_MASKED,
        image: str = options.IMAGE,
        runtime: str = options.RUNTIME,
        dataset: list[str] = typer.Option(
            None, "--dataset", help="NAME=PATH: lets requests say tasks.path=NAME (repeatable)."
        ),
        tasks_root: list[Path] = typer.Option(
            None,
            "--tasks-root",
            help="A folder (or Parquet file) requests may name paths inside (repeatable); "
            "no other path on this host can be named.",
        ),
        allowed_host: list[str] = typer.Option(
            None,
            "--allowed-host",
            help="A name browsers may reach the service by, beside loopback and --host "
            "(repeatable; '*': any). Other Host headers get 421 (DNS rebinding).",
        ),
        retention_s: float = typer.Option(
            _service("retention_s"),
            "--retention",
            min=0.0,
            help="Seconds acknowledged payloads are kept.",
        ),
        disk_reserve_mb: int = typer.Option(
            _service("disk_reserve_mb"),
            "--disk-reserve",
            min=0,
            help="MiB of the data disk new work may not use (503 instead).",
        ),
        keep_workspaces: bool = options.KEEP_WORKSPACES,
        stale_policy: str = typer.Option(
            _service("stale_policy"),
            "--stale-policy",
            help="drop|requeue groups older than max_staleness.",
        ),
        max_stale_requeues: int = typer.Option(
            _service("max_stale_requeues"),
            "--max-stale-requeues",
            min=0,
            help="With --stale-policy requeue: re-runs of a stale group before it is dropped.",
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
        policy_timeout_s: float = options.POLICY_TIMEOUT,
        policy_retries: int = options.POLICY_RETRIES,
        policy_backoff_s: float = options.POLICY_BACKOFF,
        policy_cooldown_s: float = options.POLICY_COOLDOWN,
        policy_pause_poll_s: float = options.POLICY_PAUSE_POLL,
        policy_update_retries: int = options.POLICY_UPDATE_RETRIES,
        policy_max_hold_s: float = options.POLICY_MAX_HOLD,
        lora: str = options.LORA,
        warm_containers: int = options.WARM_CONTAINERS,
        create_rate: float = options.CREATE_RATE,
        max_concurrent_creates: int = options.MAX_CONCURRENT_CREATES,
        warm_ttl_s: float = options.WARM_TTL,
        build_network: bool = options.BUILD_NETWORK,
        allow_pull: bool = options.ALLOW_PULL,
        build_cpus: float = options.BUILD_CPUS,
        build_memory_mb: int = options.BUILD_MEMORY,
        build_timeout_s: float = options.BUILD_TIMEOUT,
        image_budget_gb: float = options.IMAGE_BUDGET,
        ray_address: str = options.RAY_ADDRESS,
        chat_template_kwargs: str = options.CHAT_TEMPLATE_KWARGS,
        agent: str = options.AGENT,
        agent_profile: list[Path] = options.AGENT_PROFILE,
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
                    adaptive_concurrency=adaptive_concurrency,
                    max_queued_samples=max_queued_samples, retry_masked=retry_masked,
                    datasets=_datasets(dataset or []),
                    stale_policy=stale_policy, max_stale_requeues=max_stale_requeues,
                    lease_ttl_s=lease_ttl_s,
                    body_read_timeout_s=body_timeout_s,
                    body_idle_timeout_s=min(_service("body_idle_timeout_s"), body_timeout_s),
                    tasks_roots=tasks_root or [], allowed_hosts=allowed_host or [],
                    retention_s=retention_s,
                    disk_reserve_mb=disk_reserve_mb, keep_workspaces=keep_workspaces,
                ),
                policy=policy_settings(
                    policy_url=policy_url, model=model, policy_timeout_s=policy_timeout_s,
                    policy_retries=policy_retries, policy_backoff_s=policy_backoff_s,
                    policy_cooldown_s=policy_cooldown_s, policy_pause_poll_s=policy_pause_poll_s,
                    policy_update_retries=policy_update_retries, lora=lora,
                    policy_max_hold_s=policy_max_hold_s,
                    chat_template_kwargs=_template_kwargs(chat_template_kwargs),
                    allow_policy_url=allow_policy_url,
                ),
                sandboxes=sandbox_settings(
                    image=image, runtime=runtime, warm_containers=warm_containers,
                    create_rate=create_rate, max_concurrent_creates=max_concurrent_creates,
                    warm_ttl_s=warm_ttl_s, build_network=build_network, allow_pull=allow_pull,
                    build_cpus=build_cpus, build_memory_mb=build_memory_mb,
                    build_timeout_s=build_timeout_s, image_budget_gb=image_budget_gb,
                    ray_address=ray_address,
                ),
                agent=agent_settings(agent, agent_profile or []),
            )  # fmt: skip
            settings.service.check_exposure()
            if not settings.policy.urls and not settings.policy.allow_urls:
                raise ValueError(
                    "no policy server: pass --policy-url (or set ROLLOUTS_POLICY_URL), or "
                    "--allow-policy-url for requests that name their own"
                )
        except ValidationError as e:
            invalid(e)
        except ValueError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        for line in describe(settings.agent):
            typer.echo(line, err=True)
        if not settings.sandboxes.ray_address:  # on Ray, each node's executor checks its engine
            refuse_unknown_runtime(settings.sandboxes.runtime)
        # The service's own loggers (a resumed rollout, each concurrency window's decision):
        # uvicorn configures only its own.
        logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(message)s")
        uvicorn.run(create_app(settings), host=host, port=port, log_level=log_level)
