"""The policy and sandbox settings `serve` and `collect` build from the flags they share
(clients/commands/options.py), built in one place so both commands mean the same by each flag,
and a settings error turned into the CLI's one-line exit."""

from __future__ import annotations

from typing import Any, NoReturn

import typer
from pydantic import ValidationError

from service.settings import PolicySettings, SandboxSettings


def invalid(e: ValidationError) -> NoReturn:
    """Exit 2 with the first error, naming its setting (e.g. `sandboxes.build_timeout_s`)."""
    err = e.errors()[0]
    typer.echo(f"error: {'.'.join(str(x) for x in err['loc'])}: {err['msg']}", err=True)
    raise typer.Exit(2)


def policy_settings(
    *,
    policy_url: list[str] | None,
    model: str | None,
    policy_timeout_s: float,
    policy_retries: int,
    policy_backoff_s: float,
    policy_cooldown_s: float,
    policy_pause_poll_s: float,
    policy_update_retries: int,
    policy_max_hold_s: float,
    lora: str | None,
    chat_template_kwargs: dict[str, Any] | None = None,
    allow_policy_url: list[str] | None = None,
) -> PolicySettings:
    """Raises ValidationError."""
    return PolicySettings(
        urls=policy_url or [], model=model, timeout_s=policy_timeout_s,
        max_retries=policy_retries, backoff_s=policy_backoff_s, cooldown_s=policy_cooldown_s,
        pause_poll_s=policy_pause_poll_s, update_retries=policy_update_retries,
        max_hold_s=policy_max_hold_s,
        lora=lora or None, chat_template_kwargs=chat_template_kwargs or {},
        allow_urls=allow_policy_url or [],
    )  # fmt: skip


def sandbox_settings(
    *,
    image: str | None,
    runtime: str | None,
    warm_containers: int,
    create_rate: float,
    max_concurrent_creates: int,
    warm_ttl_s: float,
    build_network: bool,
    allow_pull: bool,
    build_cpus: float,
    build_memory_mb: int,
    build_timeout_s: float,
    image_budget_gb: float | None,
    ray_address: str | None,
) -> SandboxSettings:
    """Raises ValidationError."""
    return SandboxSettings(
        image=image, runtime=runtime or None, warm_per_key=warm_containers,
        create_rate=create_rate, max_concurrent_creates=max_concurrent_creates,
        warm_ttl_s=warm_ttl_s, build_network=build_network, allow_pull=allow_pull,
        build_cpus=build_cpus, build_memory_mb=build_memory_mb, build_timeout_s=build_timeout_s,
        image_budget_gb=image_budget_gb, ray_address=ray_address or None,
    )  # fmt: skip
