"""The web view's JSON: what /ui/api answers (trajectories travel as service.trajectory's)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RolloutRow(BaseModel):
    id: str
    status: str = Field(description="running / completed / cancelled; `exported` in a file")
    groups_total: int
    groups_completed: int
    samples_total: int
    samples_completed: int
    counts: dict[str, int] = Field(description="finished samples by trajectory status")
    mean_reward: float | None
    pass_at_n: float | None = Field(description="finished groups whose best reward is 1.0")
    created_at: float | None


class SampleRow(BaseModel):
    """A finished sample as listed: no payload is read to make one."""

    trajectory_id: str
    rollout_id: str
    group_id: str
    task_id: str
    sample_index: int
    status: str
    reward: float | None
    advantage: float | None
    policy_version: int | None
    tokens: int | None = Field(description="prompt + response tokens; null in a Parquet file")


class SamplePage(BaseModel):
    total: int = Field(description="samples matching the filter")
    offset: int
    rows: list[SampleRow]


class SampleQuery(BaseModel):
    """The browser's filter and page (query parameters)."""

    model_config = ConfigDict(extra="forbid")

    rollout_id: str | None = Field(default=None, max_length=200)
    task_id: str | None = Field(default=None, max_length=4096)
    group_id: str | None = Field(default=None, max_length=300)
    status: str | None = Field(default=None, max_length=64)
    reward_min: float | None = None
    reward_max: float | None = None
    offset: int = Field(default=0, ge=0, le=1_000_000_000)
    limit: int = Field(default=50, ge=1, le=500)


class VersionReward(BaseModel):
    version: int
    mean_reward: float
    n: int


class Overview(BaseModel):
    """What the page shows first; a running service adds its live `stats` events on top."""

    source: str = Field(description="what is shown: the service, a data dir or a file")
    live: bool = Field(description="true when GET /v1/events can be followed")
    rollouts: list[RolloutRow]
    reward_by_version: list[VersionReward]
    tasks: list[str] = Field(description="task ids for the filter (at most 1,000)")
