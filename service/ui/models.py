"""The web view's JSON: what /ui/api answers (trajectories travel as service.trajectory's)."""

from __future__ import annotations

from typing import Annotated

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
    tokens: int | None = Field(
        description="prompt + response tokens, over every segment; null in a Parquet file"
    )


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


class UncalibratedTask(BaseModel):
    """A task whose own oracle the grader does not score 1 unflagged (sandboxes/calibration.py):
    its samples are graded in the fallback, flagged `unguarded`, or dropped."""

    task_id: str
    why: str = Field(description="what the oracle scored, and with which flags")
    output: str = Field(description="the end of the verifier's output for the oracle")
    setting: str = Field(description="the runtime and image override it was graded under")
    at: float = Field(description="when it was calibrated (Unix time)")


class Overview(BaseModel):
    """What the page shows first; a running service adds its live `stats` events on top."""

    source: str = Field(description="what is shown: the service, a data dir or a file")
    live: bool = Field(description="true when GET /v1/events can be followed")
    rollouts: list[RolloutRow]
    reward_by_version: list[VersionReward]
    tasks: list[str] = Field(description="task ids for the filter (at most 1,000)")
    uncalibrated: list[UncalibratedTask] = Field(
        default_factory=list, description="uncalibrated tasks, with this grader (a data dir's)"
    )


# Bounds of POST /ui/api/tokens (service/ui/tokens.py explains where the texts come from). The
# page asks for a trajectory's distinct ids in calls of at most MAX_TOKEN_IDS (the same number
# is in static/sample.js).
MAX_TOKEN_IDS = 4096
MAX_TOKEN_ID = 2**31 - 1
TokenId = Annotated[int, Field(strict=True, ge=0, le=MAX_TOKEN_ID)]


class TokenQuery(BaseModel):
    """Token ids whose text the token view shows (a trajectory's distinct ids, in calls of at
    most MAX_TOKEN_IDS)."""

    model_config = ConfigDict(extra="forbid")

    ids: list[TokenId] = Field(max_length=MAX_TOKEN_IDS)


class TokenTexts(BaseModel):
    source: str | None = Field(
        description="where the texts come from (the tokenizer files, the policy server); "
        "null: nowhere, the view shows ids"
    )
    note: str | None = Field(description="why some or all ids have no text")
    texts: dict[int, str] = Field(
        description="id -> the token's text (U+FFFD for bytes that are not a whole UTF-8 "
        "character); ids without one are left out"
    )
    partial: dict[int, str] = Field(
        description="tokens whose bytes are not whole UTF-8 characters (known from tokenizer "
        "files only): their text with each such byte written \\xNN"
    )
