"""What the scheduler hands the episode runner: plain dataclasses, built from the HTTP wire
models (service/wire.py) or the CLI flags.

The request defaults are defined here and nowhere else: the dataclass field defaults below,
`N_SAMPLES` and `RETRY_MASKED`. The HTTP request models (service/wire.py) and the `collect` flags
read them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from sandboxes.task import Task

N_SAMPLES = 8  # samples per task: one group, what RLOO-n compares within
# Re-runs of a sample masked by an infrastructure fault (a fresh sandbox each), so its group
# reaches the trainer with every sample graded; 0: none (the masked sample is delivered).
RETRY_MASKED = 2
# What happens to the samples of a task whose oracle does not score 1 unflagged through the
# grader (sandboxes/calibration.py): graded in the fallback, flagged `unguarded`, or not run
# (`cancelled`, masked).
UNCALIBRATED_FALLBACK = "fallback"
UNCALIBRATED_DROP = "drop"
# Sample seeds stay below 2**31 (every engine takes them), with room for a group's
# `seed + index` (vLLM seeds the choices of an n-sample request so).
_SEED_SPACE = 2**31 - 2**10


def sample_seed(seed: int | None, task_id: str, index: int) -> int | None:
    """The seed of sample `index` of task `task_id` in a request seeded with `seed`: a function
    of the three alone, so the same request samples the same tokens again (on the same weights)
    however its samples were started, and a re-run keeps its sample's seed. A group's samples
    get consecutive seeds: vLLM gives choice j of an n-sample request with seed s the seed s + j,
    so samples that start together share one request. None without a request seed."""
    if seed is None:
        return None
    digest = hashlib.sha256(f"{seed}:{task_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % _SEED_SPACE + index


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
class PolicyTarget:
    """Policy servers a rollout request names instead of the service's (a trainer's own; see
    service/policy/named.py): their base URLs, normalised and sorted, and the model (None: the
    servers' only one)."""

    urls: tuple[str, ...]
    model: str | None = None


@dataclass(frozen=True)
class SampleSpec:
    """One sample of one task in one rollout. `trajectory_id` is stable across re-runs;
    `attempt` counts them (1: the first run)."""

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
    # The sample's seed (`sample_seed`, from the request's sampling.seed); its turns' seeds are
    # derived from it. None: unseeded.
    seed: int | None = None
    attempt: int = 1
    uncalibrated: str = UNCALIBRATED_FALLBACK  # UNCALIBRATED_FALLBACK or UNCALIBRATED_DROP
    policy: PolicyTarget | None = None  # the request's own policy servers; None: the service's


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
            seed=sample_seed(sampling.seed, task.id, i),
        )
        for i in range(n_samples)
    ]
