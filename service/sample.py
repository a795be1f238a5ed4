"""What the scheduler hands the episode runner: plain dataclasses, built from the HTTP wire
models (service/wire.py) or the CLI flags."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 4096  # per turn
    seed: int | None = None
    stop: list[str] | None = None


@dataclass(frozen=True)
class AgentLimits:
    max_turns: int = 32
    timeout_s: float | None = None  # None: the task's [agent] timeout_sec
    mask_agent_timeout: bool = False  # mask agent_timeout samples instead of scoring them


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
