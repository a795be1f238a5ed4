"""What the scheduler hands the episode runner: plain dataclasses, built from the HTTP wire
models (service/wire.py) or the CLI flags.

The request defaults are defined here and nowhere else: the dataclass field defaults below and
`N_SAMPLES`. The HTTP request models (service/wire.py) and the `collect` flags read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sandboxes.task import Task

N_SAMPLES = 8  # samples per task: one group, what RLOO-n compares within


@dataclass(frozen=True)
class SamplingParams:
    """The sampling parameters of every turn. The policy client sends every one of them (vLLM
    would otherwise fill the gaps from its defaults or the model's generation_config.json), and
    each trajectory records them. The defaults sample from the model's own distribution."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: off
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    max_tokens: int = 4096  # per turn (capped to the room left in the context)
    seed: int | None = None  # per sample and turn, a seed is derived from it
    stop: list[str] | None = None


@dataclass(frozen=True)
class AgentLimits:
    max_turns: int = 32
    timeout_s: float | None = None  # None: the task's [agent] timeout_sec
    mask_agent_timeout: bool = False  # mask agent_timeout samples instead of scoring them
    # The conversation format (service/agent/harnesses: default, terminus-2, tools); None: the
    # service's default harness (--agent).
    harness: str | None = None


@dataclass(frozen=True)
class SampleSpec:
    """One sample of one task in one rollout. `trajectory_id` is stable across re-runs."""

    trajectory_id: str
    rollout_id: str
    group_id: str
    task_id: str
    sample_index: int
    sampling: SamplingParams = field(default_factory=SamplingParams)
    agent: AgentLimits = field(default_factory=AgentLimits)
    # Keyword arguments of the chat template (e.g. {"enable_thinking": False}); None: the
    # service's default (settings.policy.chat_template_kwargs).
    chat_template_kwargs: dict[str, Any] | None = None


def sample_specs(
    task: Task,
    rollout_id: str,
    n_samples: int,
    sampling: SamplingParams,
    agent: AgentLimits,
    chat_template_kwargs: dict[str, Any] | None = None,
) -> list[SampleSpec]:
    """One group of specs for driving the episode runner directly (tests, benchmarks); the
    scheduler builds its own from the store's ids."""
    group_id = f"{rollout_id}:{task.id}"
    return [
        SampleSpec(
            trajectory_id=f"{group_id}:{i}",
            rollout_id=rollout_id,
            group_id=group_id,
            task_id=task.id,
            sample_index=i,
            sampling=sampling,
            agent=agent,
            chat_template_kwargs=chat_template_kwargs,
        )
        for i in range(n_samples)
    ]
