"""Issue 16's settings: each flag defaults to its setting (defined once), reaches the settings,
and the settings reach the classes they configure."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from sandboxes.images import BuildSettings
from sandboxes.pool import PoolSettings
from service.settings import SandboxSettings, ServiceSettings, Settings, default_of

SERVE_FLAGS = {
    "--retention": (ServiceSettings, "retention_s"),
    "--disk-reserve": (ServiceSettings, "disk_reserve_mb"),
    "--keep-workspaces": (ServiceSettings, "keep_workspaces"),
    "--warm-ttl": (SandboxSettings, "warm_ttl_s"),
    "--build-network": (SandboxSettings, "build_network"),
    "--allow-pull": (SandboxSettings, "allow_pull"),
    "--build-cpus": (SandboxSettings, "build_cpus"),
    "--build-memory": (SandboxSettings, "build_memory_mb"),
    "--build-timeout": (SandboxSettings, "build_timeout_s"),
    "--image-budget": (SandboxSettings, "image_budget_gb"),
}


def _command(name: str) -> tuple[typer.Typer, Any]:
    module = __import__(f"clients.commands.{name}", fromlist=["register"])
    app = typer.Typer()
    module.register(app)
    app.command("noop")(lambda: None)
    return app, typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]


def test_the_new_flags_default_to_the_settings() -> None:
    _, serve = _command("serve")
    defaults = {opt: p.default for p in serve.params for opt in p.opts}
    for flag, (model, field) in SERVE_FLAGS.items():
        assert defaults[flag] == default_of(model, field), flag
    _, collect = _command("collect")
    defaults = {opt: p.default for p in collect.params for opt in p.opts}
    for flag in ("--build-network", "--allow-pull"):
        model, field = SERVE_FLAGS[flag]
        assert defaults[flag] == default_of(model, field) is False, flag


def test_defaults_are_the_safe_ones() -> None:
    s = Settings()
    assert s.service.tasks_roots == [] and s.service.all_tasks_roots() == []
    assert s.service.retention_s == 7 * 24 * 3600 and s.service.disk_reserve_mb == 1024
    assert s.sandboxes.build() == BuildSettings()
    assert (BuildSettings().network, BuildSettings().allow_pull) == (False, False)
    assert s.sandboxes.pool() == PoolSettings() and PoolSettings().idle_ttl_s == 300
    with_datasets = ServiceSettings(tasks_roots=[Path("/a")], datasets={"d": "/b/c.parquet"})
    assert with_datasets.all_tasks_roots() == ["/a", "/b/c.parquet"]


def test_serve_flags_reach_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    import service.app

    built: list[Settings] = []
    monkeypatch.setattr(service.app, "create_app", lambda s: built.append(s) or object())
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: None)
    # The service's own loggers log at --log-level too (uvicorn configures only its own): a
    # resumed rollout, each concurrency window's decision.
    logged: list[dict[str, object]] = []
    monkeypatch.setattr(logging, "basicConfig", lambda **kw: logged.append(kw))
    app, _ = _command("serve")
    args = ["serve", "--log-level", "debug"]
    args += ["--policy-url", "http://a:8000", "--tasks-root", "/data/one"]
    args += ["--tasks-root", "/data/two", "--retention", "60", "--disk-reserve", "10"]
    args += ["--build-network", "--allow-pull", "--build-memory", "512", "--image-budget", "2"]
    args += ["--warm-ttl", "30", "--build-timeout", "90", "--build-cpus", "1.5"]
    args += ["--no-keep-workspaces"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    [s] = built
    assert s.service.tasks_roots == [Path("/data/one"), Path("/data/two")]
    assert (s.service.retention_s, s.service.disk_reserve_mb) == (60, 10)
    assert s.service.keep_workspaces is False and Settings().service.keep_workspaces is True
    build = s.sandboxes.build()
    assert build == BuildSettings(
        network=True, allow_pull=True, cpus=1.5, memory_mb=512, timeout_s=90, budget_bytes=2 << 30
    )
    assert s.sandboxes.pool().idle_ttl_s == 30
    assert [kw["level"] for kw in logged] == ["DEBUG"]


# Flags serve and collect share (clients/commands/options.py), with values that differ from
# every default.
SHARED = ["--policy-url", "http://a:8000", "--model", "m", "--policy-timeout", "7",
          "--policy-retries", "5", "--policy-backoff", "0.25", "--policy-cooldown", "9",
          "--policy-pause-poll", "0.5", "--policy-update-retries", "4", "--lora", "ad=/w/ad",
          "--image", "img:1", "--warm-containers", "3", "--create-rate", "2.5",
          "--max-concurrent-creates", "6", "--warm-ttl", "30", "--build-network",
          "--allow-pull", "--build-cpus", "1.5", "--build-memory", "512",
          "--build-timeout", "90", "--image-budget", "2"]  # fmt: skip


def test_serve_and_collect_build_the_same_settings_from_the_same_flags(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import uvicorn

    import clients.commands.collect as collect_module
    import service.app
    from service.policy.client import PolicyError

    served: list[Settings] = []
    monkeypatch.setattr(service.app, "create_app", lambda s: served.append(s) or object())
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: None)
    app, _ = _command("serve")
    result = CliRunner().invoke(app, ["serve", *SHARED])
    assert result.exit_code == 0, result.output

    collected: list[Settings] = []

    async def run(settings: Settings, *_: object) -> None:
        collected.append(settings)
        raise PolicyError("stop here")

    async def no_build(**_: object) -> None:
        return None

    monkeypatch.setattr(collect_module, "_run", run)
    monkeypatch.setattr(collect_module, "ensure_base_image", no_build)
    app, _ = _command("collect")
    tasks = str(Path(__file__).resolve().parents[2] / "examples" / "tasks")
    out = ["--out", str(tmp_path)]
    result = CliRunner().invoke(app, ["collect", "--tasks", tasks, *SHARED, *out])
    assert result.exit_code == 1 and "stop here" in result.output, result.output
    [s], [c] = served, collected
    assert c.policy == s.policy.model_copy(update={"chat_template_kwargs": {}})
    assert c.sandboxes == s.sandboxes
    assert c.sandboxes.build() == BuildSettings(
        network=True, allow_pull=True, cpus=1.5, memory_mb=512, timeout_s=90, budget_bytes=2 << 30
    )
    pool = c.sandboxes.pool()
    assert (pool.warm_per_key, pool.idle_ttl_s, pool.max_concurrent_creates) == (3, 30, 6)
    assert (c.policy.timeout_s, c.policy.max_retries, c.policy.lora) == (7, 5, "ad=/w/ad")
    assert (c.policy.pause_poll_s, c.policy.update_retries) == (0.5, 4)


@pytest.mark.parametrize("command", ["serve", "collect"])
def test_a_bad_shared_flag_names_its_setting(command: str) -> None:
    app, _ = _command(command)
    tasks = str(Path(__file__).resolve().parents[2] / "examples" / "tasks")
    args = [command, "--policy-url", "http://a:8000", "--build-memory", "8"]
    if command == "collect":
        args += ["--tasks", tasks]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "error: build_memory_mb:" in result.output, result.output
