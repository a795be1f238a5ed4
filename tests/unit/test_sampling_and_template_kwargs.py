"""Explicit sampling and chat_template_kwargs end to end without a real engine: the HTTP API's
top-level `chat_template_kwargs` reaches every sample's spec, the episode runner renders every
prompt and observation with it (or the service default) and records it and the sampling
parameters in each trajectory, and the commands parse `--chat-template-kwargs`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import ValidationError
from typer.testing import CliRunner

from clients.commands import collect as collect_command
from clients.commands import serve as serve_command
from sandboxes.task import Task
from service.episode import EpisodeRunner
from service.policy.client import PolicyClient
from service.policy.vllm_wire import SAMPLING_FIELDS
from service.sample import AgentLimits, SampleSpec, SamplingParams, sample_specs
from service.trajectory import Status, Trajectory, from_arrow, to_arrow
from service.wire import RolloutRequest, SamplingSpec, parse_chat_template_kwargs
from tests.fakes import FakeBackend
from tests.unit.test_api import AUTH, TASKS, GatedRunner, Server, make_settings, wait_status
from tests.unit.test_episode_runner import TASK, FakeVLLM, solves

OFF = {"enable_thinking": False}


async def run(
    request_kwargs: dict[str, Any] | None, default: dict[str, Any] | None
) -> tuple[FakeVLLM, list[Trajectory]]:
    vllm = FakeVLLM(solves)
    policy = PolicyClient(["http://a:8000"], transport=vllm.transport, backoff_s=0.001)
    runner = EpisodeRunner(policy, FakeBackend(), chat_template_kwargs=default)
    params = SamplingParams(seed=3, top_p=0.9, min_p=0.05, presence_penalty=0.5)
    specs = sample_specs(TASK, "r", 2, params, AgentLimits(max_turns=4), request_kwargs)
    got: list[Trajectory] = []

    async def keep(t: Trajectory) -> None:
        got.append(t)

    try:
        await runner.run_group(TASK, specs, keep)
    finally:
        await policy.aclose()
    return vllm, got


@pytest.mark.parametrize(
    ("request_kwargs", "default", "expected"),
    [(OFF, None, OFF), (None, OFF, OFF), ({}, OFF, {}), (None, None, {})],
)
async def test_kwargs_reach_every_rendering_and_the_record(
    request_kwargs: dict[str, Any] | None, default: dict[str, Any] | None, expected: dict
) -> None:
    vllm, trajs = await run(request_kwargs, default)
    assert [t.status for t in trajs] == [Status.ok, Status.ok]
    renders = [b for _, path, b in vllm.requests if path == "/tokenize" and "messages" in b]
    assert len(renders) == 1 + 3 + 2 * 2  # first prompt, template frame, observations
    assert all(b.get("chat_template_kwargs", {}) == expected for b in renders)
    for t in trajs:
        assert t.chat_template_kwargs == expected
        assert t.sampling == SamplingParams(seed=3, top_p=0.9, min_p=0.05, presence_penalty=0.5)
        (back,) = from_arrow(to_arrow([t]))
        assert (back.sampling, back.chat_template_kwargs) == (t.sampling, expected)
    for body in vllm.completions():  # every sampling field on every request
        assert set(SAMPLING_FIELDS) <= set(body)
        assert (body["top_p"], body["min_p"], body["presence_penalty"]) == (0.9, 0.05, 0.5)
        assert (body["top_k"], body["repetition_penalty"], body["frequency_penalty"]) == (-1, 1, 0)


def test_request_validation() -> None:
    req = RolloutRequest.model_validate({"tasks": {"path": "x"}, "chat_template_kwargs": OFF})
    assert req.chat_template_kwargs == OFF
    assert RolloutRequest.model_validate({"tasks": {"path": "x"}}).chat_template_kwargs is None
    for bad in ([1], "x", {"a": "y" * 5000}):
        with pytest.raises(ValidationError):
            RolloutRequest.model_validate({"tasks": {"path": "x"}, "chat_template_kwargs": bad})
    for field, value in (("min_p", 1.5), ("presence_penalty", 3), ("repetition_penalty", 0)):
        with pytest.raises(ValidationError):
            SamplingSpec.model_validate({field: value})
    assert parse_chat_template_kwargs(' {"enable_thinking": false} ') == OFF
    assert parse_chat_template_kwargs("") is None
    for bad in ("[1]", "{", "true"):
        with pytest.raises(ValueError):
            parse_chat_template_kwargs(bad)


class RecordingRunner(GatedRunner):
    def __init__(self) -> None:
        super().__init__()
        self.specs: list[SampleSpec] = []

    async def run_group(
        self,
        task: Task,
        samples: list[SampleSpec],
        on_trajectory: Callable,
        on_episode_end=None,
        on_start=None,
    ):
        self.specs += samples
        await super().run_group(task, samples, on_trajectory, on_episode_end, on_start)


def test_api_top_level_field_reaches_the_samples(tmp_path: Path) -> None:
    import httpx

    runner = RecordingRunner()
    with Server(make_settings(tmp_path), runner) as s:
        c = httpx.Client(base_url=s.url, headers=AUTH, timeout=30)
        body = {
            "tasks": {"path": TASKS, "limit": 1},
            "n_samples": 2,
            "advantage": {"min_group_size": 2},
            "chat_template_kwargs": OFF,
            "sampling": {"top_k": 20, "min_p": 0.1},
            "retry_masked": 0,  # the runner's masked sample runs once
        }
        r = c.post("/v1/rollouts", json=body)
        assert r.status_code == 202, r.text
        wait_status(c, r.json()["id"], "completed")
        r = c.post("/v1/rollouts", json={**body, "chat_template_kwargs": [1]})
        assert r.status_code == 422 and "chat_template_kwargs" in r.text
    assert [spec.chat_template_kwargs for spec in runner.specs] == [OFF, OFF]
    assert {(spec.sampling.top_k, spec.sampling.min_p) for spec in runner.specs} == {(20, 0.1)}


def _app(register: Callable[[typer.Typer], None]) -> typer.Typer:
    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # typer needs two commands to keep names
    return app


def test_commands_refuse_bad_kwargs() -> None:
    app = _app(serve_command.register)
    for value in ("[1]", "{nope"):
        result = CliRunner().invoke(
            app, ["serve", "--policy-url", "http://x", "--chat-template-kwargs", value], env={}
        )
        assert result.exit_code == 2 and "chat-template-kwargs" in result.output, result.output
    app = _app(collect_command.register)
    result = CliRunner().invoke(
        app, ["collect", "--tasks", TASKS, "--limit", "1", "--chat-template-kwargs", "[1]"], env={}
    )
    assert result.exit_code == 2 and "--chat-template-kwargs" in result.output, result.output
