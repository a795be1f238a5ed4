"""Pydantic models of the service's HTTP API (v1). Field names here are the wire contract.

Trajectories travel as `service.trajectory.Trajectory`; this module never copies its fields.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from service.advantages import AdvantageConfig
from service.policy.client import normalize_base_url
from service.sample import (
    N_SAMPLES,
    RETRY_MASKED,
    UNCALIBRATED_FALLBACK,
    AgentLimits,
    PolicyTarget,
    SamplingParams,
)
from service.trajectory import Trajectory

# Lease responses carry the number of groups not yet acknowledged (of the rollout asked for).
REMAINING_HEADER = "X-Rollouts-Remaining"


class _Strict(BaseModel):
    # Unknown fields are refused so a typo ("n_sample") is a 422 naming it, not a silent default.
    model_config = ConfigDict(extra="forbid")


class TasksSpec(_Strict):
    path: str = Field(min_length=1, max_length=4096, description="folder, Parquet, or dataset name")
    ids: list[str] | None = Field(default=None, max_length=100_000)
    limit: int | None = Field(default=None, ge=1)


# Defaults come from the dataclasses these specs turn into (service/sample.py, advantages.py).


class SamplingSpec(_Strict):
    """Sent to the policy server on every turn, every field, and recorded per trajectory. The
    ranges are vLLM's."""

    temperature: float = Field(default=SamplingParams.temperature, ge=0.0, le=10.0)
    top_p: float = Field(default=SamplingParams.top_p, gt=0.0, le=1.0)
    top_k: int = Field(default=SamplingParams.top_k, ge=-1, description="-1 or 0: off")
    min_p: float = Field(default=SamplingParams.min_p, ge=0.0, le=1.0)
    repetition_penalty: float = Field(default=SamplingParams.repetition_penalty, gt=0.0, le=10.0)
    presence_penalty: float = Field(default=SamplingParams.presence_penalty, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=SamplingParams.frequency_penalty, ge=-2.0, le=2.0)
    max_tokens: int = Field(default=SamplingParams.max_tokens, ge=1, le=1_000_000)
    seed: int | None = Field(
        default=SamplingParams.seed,
        ge=0,
        le=2**63 - 1,
        description="each sample's seed is derived from it, the task id and the sample index "
        "(recorded as the trajectory's sample_seed): the same request samples the same tokens "
        "on the same weights",
    )
    stop: list[str] | None = Field(default=SamplingParams.stop, max_length=16)

    def to_params(self) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            min_p=self.min_p,
            repetition_penalty=self.repetition_penalty,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            max_tokens=self.max_tokens,
            seed=self.seed,
            stop=list(self.stop) if self.stop else None,
        )


MAX_CHAT_TEMPLATE_KWARGS_BYTES = 4096
MAX_RETRY_MASKED = 16  # re-runs of one masked sample, at most (each a whole episode)


def check_chat_template_kwargs(v: dict[str, Any] | None) -> dict[str, Any] | None:
    """A JSON object of modest size (it is sent with every /tokenize and stored per trajectory)."""
    if v is not None and len(json.dumps(v)) > MAX_CHAT_TEMPLATE_KWARGS_BYTES:
        raise ValueError(f"at most {MAX_CHAT_TEMPLATE_KWARGS_BYTES} bytes of JSON")
    return v


def parse_chat_template_kwargs(text: str | None) -> dict[str, Any] | None:
    """`--chat-template-kwargs JSON` (or its environment variable): a JSON object; empty: none."""
    if text is None or not text.strip():
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON ({e}): {text!r}") from None
    if not isinstance(value, dict):
        raise ValueError(
            f"expected a JSON object such as '{{\"enable_thinking\": false}}', got {text!r}"
        )
    return check_chat_template_kwargs(value)


class AgentSpec(_Strict):
    max_turns: int = Field(default=AgentLimits.max_turns, ge=1, le=10_000)
    timeout_s: float | None = Field(default=AgentLimits.timeout_s, gt=0.0, le=7 * 24 * 3600)
    mask_agent_timeout: bool = AgentLimits.mask_agent_timeout
    harness: str | None = Field(
        default=AgentLimits.harness,
        pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$",
        description="the agent harness (conversation format): default, terminus-2 (when the "
        "service has a terminus-2 profile) or tools; null: the service's default (--agent)",
    )

    def to_limits(self) -> AgentLimits:
        return AgentLimits(
            max_turns=self.max_turns,
            timeout_s=self.timeout_s,
            mask_agent_timeout=self.mask_agent_timeout,
            harness=self.harness,
        )


class AdvantageSpec(_Strict):
    estimator: Literal["rloo", "rloo_n"] = AdvantageConfig.estimator
    min_group_size: int = Field(default=AdvantageConfig.min_group_size, ge=1, le=100_000)
    drop_zero_variance: bool = AdvantageConfig.drop_zero_variance

    def to_config(self) -> AdvantageConfig:
        return AdvantageConfig(
            estimator=self.estimator,
            min_group_size=self.min_group_size,
            drop_zero_variance=self.drop_zero_variance,
        )


class PolicySpec(_Strict):
    """Policy servers of the request's own (a trainer's replicas) instead of the service's:
    each URL must lie under one of the service's `--allow-policy-url` prefixes (else 403
    naming it). The service generates there token in, token out, never pauses, loads or tags
    them, and records each token's version where the engine reports one."""

    urls: list[str] = Field(min_length=1, max_length=256, description="base URLs of the servers")
    model: str | None = Field(
        default=None, min_length=1, max_length=512, description="null: the servers' only model"
    )

    @field_validator("urls")
    @classmethod
    def _url_lengths(cls, v: list[str]) -> list[str]:
        if any(not 0 < len(u) <= 2048 for u in v):
            raise ValueError("each URL: 1 to 2048 characters")
        return v

    def to_target(self) -> PolicyTarget:
        """The set, as the service keys it: URLs normalised (no trailing '/' or '/v1'), once
        each, sorted (service/policy/named.py checks them against the allow-list first)."""
        return PolicyTarget(tuple(sorted({normalize_base_url(u) for u in self.urls})), self.model)


class RolloutRequest(_Strict):
    tasks: TasksSpec
    n_samples: int = Field(default=N_SAMPLES, ge=1, le=1024)
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    agent: AgentSpec = Field(default_factory=AgentSpec)
    advantage: AdvantageSpec = Field(default_factory=AdvantageSpec)
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000, description="higher runs first")
    chat_template_kwargs: dict[str, Any] | None = Field(
        default=None,
        description=(
            'keyword arguments of the chat template, e.g. {"enable_thinking": false} for Qwen3; '
            "null: the service's default (--chat-template-kwargs)"
        ),
    )
    retry_masked: int | None = Field(
        default=None,
        ge=0,
        le=MAX_RETRY_MASKED,
        description="re-runs of a sample masked by an infrastructure fault (a fresh sandbox "
        f"each; 0: none); null: the service's --retry-masked (default {RETRY_MASKED})",
    )
    policy: PolicySpec | None = Field(
        default=None,
        description="the request's own policy servers (e.g. a trainer's replicas), each under "
        "an --allow-policy-url prefix of the service; null: the service's --policy-url",
    )
    uncalibrated: Literal["fallback", "drop"] = Field(
        default=UNCALIBRATED_FALLBACK,
        description="samples of a task whose own oracle does not score 1 unflagged through "
        "the grader (calibration, docs/reliability.md#calibration): `fallback`, graded with "
        "the tests and the agent's code in one process and flagged `unguarded`; `drop`, not "
        "run (status `cancelled`, masked)",
    )

    _check_kwargs = field_validator("chat_template_kwargs")(check_chat_template_kwargs)

    @model_validator(mode="after")
    def _group_can_have_advantages(self) -> RolloutRequest:
        # rloo_n gives every sample of a group smaller than min_group_size advantage 0: a request
        # that can never reach it would silently train on nothing.
        adv = self.advantage
        if adv.estimator == "rloo_n" and self.n_samples < adv.min_group_size:
            raise ValueError(
                f"n_samples ({self.n_samples}) is smaller than advantage.min_group_size "
                f"({adv.min_group_size}): every rloo_n advantage would be 0; raise n_samples "
                "or lower advantage.min_group_size"
            )
        return self


class RolloutCreated(BaseModel):
    id: str


RolloutState = Literal["running", "completed", "cancelled"]


class RolloutStatus(BaseModel):
    """A rollout's progress: the store's RolloutSummary, field for field."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    status: RolloutState
    groups_total: int
    groups_completed: int
    samples_total: int
    samples_completed: int
    counts: dict[str, int] = Field(description="finished samples by trajectory status")
    mean_reward: float | None = Field(description="over finished, unmasked samples")
    created_at: float
    placement: dict[str, int] | None = Field(
        default=None,
        description="samples placed per sandbox node (Ray node id) by this process; "
        "null on the local Docker backend",
    )


class LeaseRequest(_Strict):
    max_groups: int = Field(default=64, ge=1, le=4096)
    wait_s: float = Field(
        default=30.0,
        ge=0.0,
        le=600.0,
        description="how long to wait for a complete group; not at all for a rollout_id whose "
        "groups were all acknowledged or dropped",
    )
    rollout_id: str | None = Field(default=None, max_length=200)
    lease_s: float | None = Field(
        default=None, gt=0.0, le=86_400.0, description="lease duration; server default if null"
    )
    regraded: bool = Field(
        default=False,
        description="true: lease only groups regraded after a trainer had them (their latest "
        "gradings and new advantages, docs/delivery.md); false: only groups never delivered",
    )


class Group(BaseModel):
    group_id: str
    task_id: str
    rollout_id: str
    trajectories: list[Trajectory]


class LeaseResponse(BaseModel):
    batch_id: str
    lease_expires_at: float = Field(description="unix time (seconds)")
    regraded: bool = Field(default=False, description="a batch of regraded groups")
    groups: list[Group]


class AckResponse(BaseModel):
    model_config = ConfigDict(from_attributes=True)  # from the store's AckResult

    batch_id: str
    groups: int
    already_acked: bool


class PolicyUpdate(_Strict):
    """The new policy version. With `weights_path` (a checkpoint folder the policy servers can
    read) or `lora_path` (an adapter folder, for a service started with --lora), the service
    loads it on every server first; without either, the trainer has moved the weights itself
    and the servers are only tagged (and resumed, if the service paused them)."""

    version: int = Field(ge=0, le=2**62)
    max_staleness: int | None = Field(default=None, ge=0, le=2**62)
    weights_path: str | None = Field(default=None, min_length=1, max_length=4096)
    lora_path: str | None = Field(default=None, min_length=1, max_length=4096)

    @model_validator(mode="after")
    def _one_source(self) -> PolicyUpdate:
        if self.weights_path is not None and self.lora_path is not None:
            raise ValueError("give weights_path or lora_path, not both")
        return self


class PolicyPause(_Strict):
    """keep: running requests freeze and finish after the resume; abort: they end at once and
    their partial output is continued after the resume; wait: they finish first."""

    mode: Literal["keep", "abort", "wait"] = "keep"


class PolicyServer(BaseModel):
    """One policy server as the control plane sees it."""

    model_config = ConfigDict(from_attributes=True)  # from service.policy.fleet.ServerReport

    url: str
    version: int | None = Field(description="the version it serves (its engine's tag)")
    status: Literal["serving", "paused", "out", "unknown"] = Field(
        description="out: out of rotation (reason says why); unknown: not reached yet, or it "
        "served weights the service did not give it (restarted?) and is asked again before it "
        "serves (reason says why)"
    )
    reason: str | None = None
    managed: bool | None = Field(
        description="offers vLLM's control routes (dev mode); None: not reached yet"
    )


class PolicyState(BaseModel):
    version: int
    max_staleness: int | None
    stale_policy: Literal["drop", "requeue"]
    servers: list[PolicyServer] = Field(default_factory=list)


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


class RegradeRequest(_Strict):
    """Grade a rollout's stored samples again (their kept final workspaces, fresh verifier
    containers, this service's grader)."""

    tasks_path: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="the tasks (inside the tasks roots, or a dataset name); null: the "
        "rollout's own tasks path, as it is now",
    )
    task_ids: list[str] | None = Field(
        default=None, max_length=100_000, description="only these tasks' samples; null: all"
    )


class RegradeChange(BaseModel):
    trajectory_id: str
    task_id: str
    kind: str = Field(description="e.g. 1→0, 0→1, newly flagged, masked, unmasked")
    before_reward: float | None
    after_reward: float | None
    before_status: str
    after_status: str
    added_flags: list[str]
    removed_flags: list[str]


class RegradeFailure(BaseModel):
    trajectory_id: str
    why: str


class RegradeStatus(BaseModel):
    """A rollout's latest regrade, as `rollouts regrade` reports it."""

    rollout_id: str
    state: Literal["running", "done", "failed"]
    error: str | None = Field(default=None, description="why a regrade stopped (state failed)")
    selected: int = Field(default=0, description="samples of the rollout with a payload")
    regraded: int = Field(default=0, description="new gradings recorded")
    already_graded: int = Field(
        default=0, description="latest grading already by this grader on these tests"
    )
    no_workspace: int = Field(default=0, description="no final workspace kept")
    failed: list[RegradeFailure] = Field(
        default_factory=list, description="infrastructure faults: nothing recorded"
    )
    changes: list[RegradeChange] = Field(default_factory=list)
    groups_offered: int = Field(
        default=0, description="regraded groups offered to trainers that had them"
    )
