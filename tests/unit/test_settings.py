"""Each default is defined once: the command-line flags, the HTTP request models and the
settings all read it from the same place, and the settings reach what they configure."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import BaseModel, ValidationError
from typer.testing import CliRunner

from sandboxes.pool import PoolSettings
from service.advantages import AdvantageConfig
from service.collect import CONCURRENCY
from service.policy.client import PolicyClient
from service.sample import N_SAMPLES, AgentLimits, SamplingParams
from service.settings import (
    PolicySettings,
    SandboxSettings,
    ServiceSettings,
    Settings,
    default_of,
)
from service.wire import LeaseRequest, RolloutRequest, TasksSpec

COMMANDS = Path(__file__).resolve().parents[2] / "clients" / "commands"

SERVICE_FLAGS = {
    "--host": "host",
    "--port": "port",
    "--data-dir": "data_dir",
    "--api-key": "api_key",
    "--max-concurrent-samples": "max_concurrent_samples",
    "--max-queued-samples": "max_queued_samples",
    "--stale-policy": "stale_policy",
    "--lease-ttl": "lease_ttl_s",
    "--body-timeout": "body_read_timeout_s",
}
POLICY_FLAGS = {
    "--model": "model",
    "--policy-timeout": "timeout_s",
    "--policy-retries": "max_retries",
    "--policy-backoff": "backoff_s",
    "--policy-cooldown": "cooldown_s",
}
SANDBOX_FLAGS = {
    "--image": "image",
    "--warm-containers": "warm_per_key",
    "--create-rate": "create_rate",
    "--max-concurrent-creates": "max_concurrent_creates",
}


def flag_defaults(name: str) -> dict[str, Any]:
    """{flag: default} of one `rollouts` sub-command."""
    module = __import__(f"clients.commands.{name}", fromlist=["register"])
    app = typer.Typer()
    module.register(app)
    app.command("noop")(lambda: None)  # typer needs two commands to keep names
    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    return {opt: p.default for p in command.params for opt in p.opts if opt.startswith("--")}


def same(flag_default: Any, setting: Any) -> bool:
    return (Path(flag_default) == setting) if isinstance(setting, Path) else flag_default == setting


def check(defaults: dict[str, Any], model: type[BaseModel], flags: dict[str, str]) -> None:
    for flag, field in flags.items():
        assert same(defaults[flag], default_of(model, field)), (flag, defaults[flag])


def test_serve_flags_default_to_the_settings() -> None:
    defaults = flag_defaults("serve")
    assert defaults["--port"] == ServiceSettings().port == 8080
    assert defaults["--max-queued-samples"] == 100_000
    check(defaults, ServiceSettings, SERVICE_FLAGS)
    check(defaults, PolicySettings, POLICY_FLAGS)
    check(defaults, SandboxSettings, SANDBOX_FLAGS)


def test_collect_flags_default_to_the_request_and_settings_defaults() -> None:
    defaults = flag_defaults("collect")
    request = RolloutRequest(tasks=TasksSpec(path="x"))
    assert defaults["--max-tokens"] == request.sampling.max_tokens == 4096
    assert defaults["--temperature"] == request.sampling.temperature == 1.0
    assert defaults["--max-turns"] == request.agent.max_turns == 32
    assert defaults["--n-samples"] == request.n_samples == N_SAMPLES == 8
    assert defaults["--concurrency"] == CONCURRENCY
    check(defaults, PolicySettings, POLICY_FLAGS)
    check(defaults, SandboxSettings, SANDBOX_FLAGS)


def test_pull_flags_default_to_the_lease_request() -> None:
    defaults = flag_defaults("pull")
    assert defaults["--max-groups"] == LeaseRequest().max_groups
    assert defaults["--wait"] == LeaseRequest().wait_s


def test_flag_defaults_are_never_literals() -> None:
    """A number written into a flag would be a second definition of a default."""
    own = {"--p-correct", "--out", "--log-level"}  # not settings: the stand-in, output, uvicorn
    for name in ("serve", "collect", "pull"):
        tree = ast.parse((COMMANDS / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "typer.Option"):
                continue
            flag = next(a.value for a in node.args[1:] if isinstance(a, ast.Constant))
            first = node.args[0]
            value = first.value if isinstance(first, ast.Constant) else None
            literal = not any(value is v for v in (None, ..., False))  # unset, required, off
            assert not literal or flag in own, f"{name} {flag}: default {ast.unparse(first)}"


def test_request_models_default_to_the_dataclasses() -> None:
    request = RolloutRequest(tasks=TasksSpec(path="x"))
    assert request.sampling.to_params() == SamplingParams()
    assert request.agent.to_limits() == AgentLimits()
    assert request.advantage.to_config() == AdvantageConfig()


def test_policy_and_pool_settings_reach_their_classes() -> None:
    client = PolicyClient(["http://127.0.0.1:9"])
    policy = PolicySettings()
    assert (policy.timeout_s, policy.max_retries, policy.backoff_s) == (
        client.timeout_s,
        client.max_retries,
        client.backoff_s,
    )
    assert SandboxSettings().pool() == PoolSettings()
    tuned = SandboxSettings(warm_per_key=0, max_concurrent_creates=3).pool()
    assert (tuned.warm_per_key, tuned.max_concurrent_creates) == (0, 3)


def test_flat_keywords_still_build_nested_settings() -> None:
    flat = Settings(port=9, policy_urls=["http://a, http://b/"], image="img", lease_ttl_s=5)
    nested = Settings(
        service=ServiceSettings(port=9, lease_ttl_s=5),
        policy=PolicySettings(urls=["http://a", "http://b"]),
        sandboxes=SandboxSettings(image="img"),
    )
    assert flat == nested
    assert Settings(service=ServiceSettings(port=9), host="::1").service.port == 9
    with pytest.raises(ValidationError):
        Settings(no_such_setting=1)
    with pytest.raises(ValidationError):
        Settings(policy=PolicySettings(), port=70_000)


def test_serve_flags_and_environment_fill_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    import service.app

    built: list[Settings] = []
    monkeypatch.setattr(service.app, "create_app", lambda s: built.append(s) or object())
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: None)
    app = typer.Typer()
    from clients.commands import serve

    serve.register(app)
    app.command("noop")(lambda: None)
    args = ["serve", "--host", "0.0.0.0", "--policy-retries", "7", "--warm-containers", "0"]
    args += ["--lease-ttl", "30", "--body-timeout", "4"]
    env = {"ROLLOUTS_API_KEY": "k", "ROLLOUTS_POLICY_URL": "http://a:8000,http://b:8000"}
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 0, result.output
    [s] = built
    assert s.service.api_key == "k" and s.service.host == "0.0.0.0"
    assert s.policy.urls == ["http://a:8000", "http://b:8000"]
    assert s.policy.max_retries == 7 and s.sandboxes.warm_per_key == 0
    assert s.service.lease_ttl_s == 30
    assert (s.service.body_read_timeout_s, s.service.body_idle_timeout_s) == (4, 4)
    assert s.policy.timeout_s == PolicySettings().timeout_s
