"""What `rollouts serve-env` asks the service for each verifiers `run`: a rollout request the
service's own model accepts, the task the run names, its sampling (a field we cannot honour
refused by name) and the inference server it names. verifiers itself judges the server in
tests/e2e/test_verifiers_env.py; these need no verifiers."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from clients.verifiers_env import BadRun, EnvSettings, rollout_body, sampling_of, task_id_of
from service.wire import RolloutRequest


class Sampling:
    def __init__(self, **fields: Any) -> None:
        self.fields = fields

    def model_dump(self, exclude_none: bool = False) -> dict[str, Any]:
        return {k: v for k, v in self.fields.items() if not (exclude_none and v is None)}


def run(task_data: dict[str, Any], **sampling: Any) -> SimpleNamespace:
    return SimpleNamespace(
        task_data=task_data,
        sampling=Sampling(**sampling),
        client=SimpleNamespace(base_url="http://inference:8000/v1/"),
        model="Qwen/Qwen3-8B",
    )


def test_a_run_becomes_one_sample_on_the_server_it_names() -> None:
    settings = EnvSettings("http://svc", "/data/tasks", agent={"max_turns": 8}, retry_masked=1)
    req = run({"name": "camel-to-snake", "id": "7"}, temperature=0.7, max_tokens=64, top_k=20)
    body = rollout_body(settings, req)
    parsed = RolloutRequest.model_validate(body)  # the service's own request model
    assert parsed.tasks.path == "/data/tasks" and parsed.tasks.ids == ["camel-to-snake"]
    assert parsed.n_samples == 1 and parsed.agent.max_turns == 8 and parsed.retry_masked == 1
    assert (parsed.sampling.temperature, parsed.sampling.max_tokens) == (0.7, 64)
    assert parsed.sampling.top_k == 20
    assert body["policy"] == {"urls": ["http://inference:8000"], "model": "Qwen/Qwen3-8B"}
    settings.policy = "service"
    assert "policy" not in rollout_body(settings, req)


def test_the_task_is_named_by_name_then_id() -> None:
    assert task_id_of({"id": "gcd-of-list"}) == "gcd-of-list"
    assert task_id_of({"name": "a", "id": "b"}) == "a"
    with pytest.raises(BadRun, match=r"task_data\.name"):
        task_id_of({"prompt": "solve it"})


def test_sampling_fields_we_cannot_honour_are_refused_by_name() -> None:
    assert sampling_of({"temperature": 1.0, "reasoning_effort": None}) == {"temperature": 1.0}
    with pytest.raises(BadRun, match=r"sampling\.reasoning_effort"):
        sampling_of({"reasoning_effort": "high"})
    with pytest.raises(BadRun, match=r"sampling\.logit_bias"):
        sampling_of({"logit_bias": {"1": 2.0}})
