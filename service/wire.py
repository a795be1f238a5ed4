"""Pydantic models of the service's HTTP API (v1). Field names here are the wire contract.

Trajectories travel as `service.trajectory.Trajectory`; this module never copies its fields.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from service.advantages import AdvantageConfig
from service.sample import AgentLimits, SamplingParams
from service.trajectory import Trajectory


class _Strict(BaseModel):
    # Unknown fields are refused so a typo ("n_sample") is a 422 naming it, not a silent default.
    model_config = ConfigDict(extra="forbid")


class TasksSpec(_Strict):
    path: str = Field(min_length=1, max_length=4096, description="folder, Parquet, or dataset name")
    ids: list[str] | None = Field(default=None, max_length=100_000)
    limit: int | None = Field(default=None, ge=1)


class SamplingSpec(_Strict):
    temperature: float = Field(default=1.0, ge=0.0, le=10.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=-1, ge=-1)
    max_tokens: int = Field(default=4096, ge=1, le=1_000_000)
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    stop: list[str] | None = Field(default=None, max_length=16)

    def to_params(self) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_tokens=self.max_tokens,
            seed=self.seed,
            stop=list(self.stop) if self.stop else None,
        )


class AgentSpec(_Strict):
    max_turns: int = Field(default=32, ge=1, le=10_000)
    timeout_s: float | None = Field(default=None, gt=0.0, le=7 * 24 * 3600)
    mask_agent_timeout: bool = False

    def to_limits(self) -> AgentLimits:
        return AgentLimits(
            max_turns=self.max_turns,
            timeout_s=self.timeout_s,
            mask_agent_timeout=self.mask_agent_timeout,
        )


class AdvantageSpec(_Strict):
    estimator: Literal["rloo", "rloo_n"] = "rloo_n"
    min_group_size: int = Field(default=4, ge=1, le=100_000)
    drop_zero_variance: bool = False

    def to_config(self) -> AdvantageConfig:
        return AdvantageConfig(
            estimator=self.estimator,
            min_group_size=self.min_group_size,
            drop_zero_variance=self.drop_zero_variance,
        )


class RolloutRequest(_Strict):
    tasks: TasksSpec
    n_samples: int = Field(default=8, ge=1, le=1024)
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    agent: AgentSpec = Field(default_factory=AgentSpec)
    advantage: AdvantageSpec = Field(default_factory=AdvantageSpec)
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000, description="higher runs first")


class RolloutCreated(BaseModel):
    id: str


RolloutState = Literal["running", "completed", "cancelled"]


class RolloutStatus(BaseModel):
    id: str
    status: RolloutState
    groups_total: int
    groups_completed: int
    samples_total: int
    samples_completed: int
    counts: dict[str, int] = Field(description="finished samples by trajectory status")
    mean_reward: float | None = Field(description="over finished, unmasked samples")
    created_at: float


class LeaseRequest(_Strict):
    max_groups: int = Field(default=64, ge=1, le=4096)
    wait_s: float = Field(default=30.0, ge=0.0, le=600.0)
    rollout_id: str | None = Field(default=None, max_length=200)
    lease_s: float | None = Field(
        default=None, gt=0.0, le=86_400.0, description="lease duration; server default if null"
    )


class Group(BaseModel):
    group_id: str
    task_id: str
    rollout_id: str
    trajectories: list[Trajectory]


class LeaseResponse(BaseModel):
    batch_id: str
    lease_expires_at: float = Field(description="unix time (seconds)")
    groups: list[Group]


class AckResponse(BaseModel):
    batch_id: str
    groups: int
    already_acked: bool


class PolicyUpdate(_Strict):
    version: int = Field(ge=0, le=2**62)
    max_staleness: int | None = Field(default=None, ge=0, le=2**62)


class PolicyState(BaseModel):
    version: int
    max_staleness: int | None
    stale_policy: Literal["drop", "requeue"]


class ReadyReport(BaseModel):
    status: Literal["ready", "not ready"]
    checks: dict[str, bool]


class ErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorResponse(BaseModel):
    """Every 4xx/5xx body: `detail` is a message or, for field errors, pydantic-style items."""

    detail: str | list[ErrorItem]
