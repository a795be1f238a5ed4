"""Each default is defined once: the command-line flags, the HTTP request models and the
settings all read it from the same place, and the settings reach what they configure."""

from __future__ import annotations

import ast
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import BaseModel, ValidationError
from typer.testing import CliRunner

import service.policy.client
from sandboxes.pool import PoolSettings
from service.advantages import AdvantageConfig
from service.collect import CONCURRENCY
from service.components import build_components
from service.policy.client import PolicyClient
from service.sample import N_SAMPLES, RETRY_MASKED, AgentLimits, SamplingParams
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
    "--max-stale-requeues": "max_stale_requeues",
    "--lease-ttl": "lease_ttl_s",
    "--body-timeout": "body_read_timeout_s",
    "--retry-masked": "retry_masked",
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
    assert defaults["--concurrency"] == CONCURRENCY == 8
    assert defaults["--retry-masked"] == ServiceSettings().retry_masked == RETRY_MASKED == 2
    check(defaults, PolicySettings, POLICY_FLAGS)
    check(defaults, SandboxSettings, SANDBOX_FLAGS)


def test_pull_flags_default_to_the_lease_request() -> None:
    defaults = flag_defaults("pull")
    assert defaults["--max-groups"] == LeaseRequest().max_groups == 64
    assert defaults["--wait"] == LeaseRequest().wait_s == 30.0


def _literal(e: ast.expr) -> bool:
    """A default written out: a number, a string, True, -1, Path("..."), a list of them. Not
    None (unset), ... (required), False (off), nor a name or a lookup of a settings default."""
    if isinstance(e, ast.Constant):
        return not any(e.value is v for v in (None, ..., False))
    if isinstance(e, ast.UnaryOp):
        return _literal(e.operand) or isinstance(e.operand, ast.Constant)
    if isinstance(e, ast.Call) and ast.unparse(e.func) in ("Path", "pathlib.Path"):
        return True
    if isinstance(e, ast.List | ast.Tuple | ast.Set):
        return any(_literal(x) for x in e.elts)
    return False


def literal_flag_defaults(source: str) -> list[str]:
    """Flags of typer.Option / typer.Argument calls in `source` whose default is a literal."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and ast.unparse(node.func) in OPTION_CALLS):
            continue
        default = node.args[0] if node.args else None
        default = next((k.value for k in node.keywords if k.arg == "default"), default)
        if default is not None and _literal(default):
            flag = next((a.value for a in node.args[1:] if isinstance(a, ast.Constant)), "?")
            found.append(f"{flag}={ast.unparse(default)}")
    return found


OPTION_CALLS = ("typer.Option", "typer.Argument", "Option", "Argument")


def test_flag_defaults_are_never_literals() -> None:
    """A value written into a flag would be a second definition of a default: every CLI
    module's flags default to a named constant or a settings default."""
    own = {"--p-correct=0.5", "--out=Path('out')", "--log-level='info'", "--log-level='warning'"}
    modules = sorted(COMMANDS.glob("*.py"))
    assert len(modules) >= 14  # every command module, options.py included
    found = {m.name: literal_flag_defaults(m.read_text()) for m in modules}
    bad = {name: [f for f in flags if f not in own] for name, flags in found.items()}
    assert not any(bad.values()), bad


def test_the_literal_check_sees_every_form() -> None:
    for default in ("2", "'x'", "-1", "Path('out')", "True", "[1]", "(1.5,)"):
        assert literal_flag_defaults(f"typer.Option({default}, '--f')") == [f"--f={default}"]
    for default in ("None", "...", "False", "CONCURRENCY", "_service('port')", "options.X"):
        assert literal_flag_defaults(f"typer.Option({default}, '--f')") == [], default


def test_request_models_default_to_the_dataclasses() -> None:
    """The request's defaults are the dataclasses' (written out here, so a change to either
    shows), and each field reaches its dataclass field: set to values unlike any default and
    unlike each other, every one arrives where it belongs."""
    request = RolloutRequest(tasks=TasksSpec(path="x"))
    sampling = dict(
        temperature=1.0, top_p=1.0, top_k=-1, min_p=0.0, repetition_penalty=1.0,
        presence_penalty=0.0, frequency_penalty=0.0, max_tokens=4096, seed=None, stop=None,
    )  # fmt: skip
    agent = dict(max_turns=32, timeout_s=None, mask_agent_timeout=False, harness=None)
    advantage = dict(estimator="rloo_n", min_group_size=4, drop_zero_variance=False)
    assert request.sampling.model_dump() == asdict(SamplingParams()) == sampling
    assert request.agent.model_dump() == asdict(AgentLimits()) == agent
    assert request.advantage.model_dump() == asdict(AdvantageConfig()) == advantage
    sampling = dict(
        temperature=0.3, top_p=0.8, top_k=7, min_p=0.05, repetition_penalty=1.2,
        presence_penalty=0.4, frequency_penalty=-0.6, max_tokens=99, seed=5, stop=["x"],
    )  # fmt: skip
    agent = dict(max_turns=3, timeout_s=12.0, mask_agent_timeout=True, harness="tools")
    advantage = dict(estimator="rloo", min_group_size=2, drop_zero_variance=True)
    tuned = RolloutRequest(
        tasks=TasksSpec(path="x"), sampling=sampling, agent=agent, advantage=advantage
    )
    assert tuned.sampling.to_params() == SamplingParams(**sampling)  # type: ignore[arg-type]
    assert tuned.agent.to_limits() == AgentLimits(**agent)  # type: ignore[arg-type]
    assert tuned.advantage.to_config() == AdvantageConfig(**advantage)  # type: ignore[arg-type]


class Built(Exception):
    """Stops build_components once it has made its policy client."""


async def test_policy_and_pool_settings_reach_their_classes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Settings unlike any default, and unlike each other, arrive in the policy client's
    arguments (as build_components makes it) and in the pool's settings; unset, they are the
    client's and the pool's own defaults."""
    client = PolicyClient(["http://127.0.0.1:9"])
    policy = PolicySettings()
    defaults = (600, 4, 0.5, 10.0)  # the client's keyword defaults, written out
    assert (client.timeout_s, client.max_retries, client.backoff_s) == defaults[:3]
    assert (policy.timeout_s, policy.max_retries, policy.backoff_s, policy.cooldown_s) == defaults

    made: list[dict[str, Any]] = []

    def recording(*args: Any, **kwargs: Any) -> None:
        made.append(kwargs)
        raise Built

    monkeypatch.setattr(service.policy.client, "PolicyClient", recording)
    tuned = dict(
        timeout_s=71.0, max_retries=7, backoff_s=0.25, cooldown_s=3.5, pause_poll_s=0.75,
        update_retries=9,
    )  # fmt: skip
    settings = Settings(policy=PolicySettings(urls=["http://127.0.0.1:9"], **tuned))
    with pytest.raises(Built):
        await build_components(settings)
    [kwargs] = made
    assert {k: kwargs[k] for k in tuned} == tuned

    assert SandboxSettings().pool() == PoolSettings(
        warm_per_key=2, idle_ttl_s=300.0, create_rate=8.0, create_burst=8.0,
        create_jitter_s=0.05, max_concurrent_creates=8,
    )  # fmt: skip
    sandboxes = SandboxSettings(
        warm_per_key=5, warm_ttl_s=41.0, create_rate=3.0, create_burst=6.0, create_jitter_s=0.2,
        max_concurrent_creates=11,
    )  # fmt: skip
    assert sandboxes.pool() == PoolSettings(
        warm_per_key=5, idle_ttl_s=41.0, create_rate=3.0, create_burst=6.0, create_jitter_s=0.2,
        max_concurrent_creates=11,
    )  # fmt: skip


def test_settings_take_their_groups_only() -> None:
    """One way to build settings: nested groups. A flat keyword is an error, naming it."""
    with pytest.raises(ValidationError, match="port"):
        Settings(port=9)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="no_such_setting"):
        Settings(no_such_setting=1)  # type: ignore[call-arg]


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
    assert s.policy.timeout_s == 600  # not given: the client's default
