"""What store calls return (plain dataclasses) and how group and trajectory ids are formed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class GroupPlan:
    group_id: str
    task_id: str
    trajectory_ids: list[str]


@dataclass(frozen=True)
class CommitResult:
    duplicate: bool  # the sample was already done: this record was ignored
    group_id: str
    group_state: str | None = None  # set when this commit finished the group
    rollout_finished: bool = False
    advantages: list[float] | None = None


@dataclass
class LeasedGroup:
    group_id: str
    task_id: str
    rollout_id: str
    rows: list[tuple[str, bytes, float | None]]  # (codec, data, advantage), by sample_index


@dataclass
class Requeued:
    rollout_id: str
    group_id: str
    task_id: str
    trajectory_ids: list[str]  # new ids, by sample_index


@dataclass
class LeaseResult:
    batch_id: str | None
    expires_at: float
    groups: list[LeasedGroup]
    requeued: list[Requeued] = field(default_factory=list)
    dropped_stale: int = 0
    expired_leases: int = 0
    requeues_spent: int = 0  # of dropped_stale: stale again after their last allowed re-run


@dataclass(frozen=True)
class AckResult:
    batch_id: str
    groups: int
    already_acked: bool


@dataclass(frozen=True)
class RolloutSummary:
    id: str
    status: Literal["running", "completed", "cancelled"]
    groups_total: int
    groups_completed: int
    samples_total: int
    samples_completed: int
    counts: dict[str, int]
    mean_reward: float | None
    created_at: float


@dataclass(frozen=True)
class PendingGroup:
    """A group with samples still to run (after a restart or a re-queue)."""

    rollout_id: str
    request_json: str
    group_id: str
    task_id: str
    samples: list[tuple[str, int]]  # (trajectory_id, sample_index)


def group_id_for(rollout_id: str, index: int) -> str:
    return f"{rollout_id}.g{index}"


def sample_trajectory_id(group_id: str, index: int, attempt: int = 0) -> str:
    return f"{group_id}.s{index}" if attempt == 0 else f"{group_id}.s{index}.a{attempt}"
