"""Where the web view's trajectories come from: a data dir (the store, read through
service/store/reader.py, safe while the service writes) or an exported Parquet file.

Listing and filtering read the small columns only (the store's samples table; the file's
scalar columns); one trajectory's payload is read when it is opened.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sandboxes.calibration import CALIBRATION_FILE, read_calibrations
from sandboxes.verifier import default_grader
from service.store.reader import (
    SampleFilter,
    reward_by_version,
    rollout_rows,
    sample_page,
    task_ids,
    trajectory_row,
)
from service.trajectory import Trajectory
from service.ui.models import (
    RolloutRow,
    SamplePage,
    SampleQuery,
    SampleRow,
    UncalibratedTask,
    VersionReward,
)

MAX_TASKS = 1000


class Source(Protocol):
    label: str

    def rollouts(self) -> list[RolloutRow]: ...
    def reward_by_version(self) -> list[VersionReward]: ...
    def tasks(self) -> list[str]: ...
    def samples(self, q: SampleQuery) -> SamplePage: ...
    def trajectory(self, trajectory_id: str) -> Trajectory | None: ...
    def uncalibrated(self) -> list[UncalibratedTask]: ...


def _filter(q: SampleQuery) -> SampleFilter:
    return SampleFilter(q.rollout_id, q.task_id, q.group_id, q.status, q.reward_min, q.reward_max)


class StoreSource:
    """A data dir; every call opens its own read-only connection."""

    def __init__(self, data_dir: Path, label: str, calibrations: Path | None = None) -> None:
        """`calibrations`: the calibration cache (default: the data dir's)."""
        self.data_dir = Path(data_dir)
        self.label = label
        self.calibrations = calibrations or self.data_dir / CALIBRATION_FILE

    def uncalibrated(self) -> list[UncalibratedTask]:
        """The cache's uncalibrated tasks with this code's grader (older graders' are stale)."""
        version = default_grader().version
        return [
            UncalibratedTask(
                task_id=c.task_id, why=c.why, output=c.output, setting=c.setting, at=c.at
            )
            for c in sorted(read_calibrations(self.calibrations), key=lambda c: c.task_id)
            if not c.calibrated and c.grader_version == version
        ]

    def rollouts(self) -> list[RolloutRow]:
        return [RolloutRow.model_validate(r) for r in rollout_rows(self.data_dir)]

    def reward_by_version(self) -> list[VersionReward]:
        return [
            VersionReward(version=v, mean_reward=m, n=n)
            for v, m, n in reward_by_version(self.data_dir)
        ]

    def tasks(self) -> list[str]:
        return task_ids(self.data_dir, MAX_TASKS)

    def samples(self, q: SampleQuery) -> SamplePage:
        total, rows = sample_page(self.data_dir, _filter(q), q.offset, q.limit)
        return SamplePage(
            total=total, offset=q.offset, rows=[SampleRow.model_validate(r) for r in rows]
        )

    def trajectory(self, trajectory_id: str) -> Trajectory | None:
        row = trajectory_row(self.data_dir, trajectory_id)
        return None if row is None else Trajectory.model_validate(row)


# The file's columns a listing needs; the token, message and verifier columns stay on disk.
_LIST_COLUMNS = [
    "trajectory_id", "rollout_id", "group_id", "task_id", "sample_index", "status", "reward",
    "advantage", "policy_version_start",
]  # fmt: skip


class ParquetSource:
    """An exported file: its scalar columns are read once; a trajectory is read from its row
    group when opened."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.label = f"file {self.path.name}"
        self._file = pq.ParquetFile(self.path)
        # The routes run in a thread pool; one reader of the open file at a time.
        self._reading = threading.Lock()
        self._table = self._file.read(columns=_LIST_COLUMNS).sort_by(
            [("rollout_id", "ascending"), ("group_id", "ascending"), ("sample_index", "ascending")]
        )
        # trajectory id -> (row group, row within it), for opening one without the rest.
        self._where: dict[str, tuple[int, int]] = {}
        for group in range(self._file.num_row_groups):
            ids = self._file.read_row_group(group, columns=["trajectory_id"]).column(0)
            for i, tid in enumerate(ids.to_pylist()):
                self._where[tid] = (group, i)

    def uncalibrated(self) -> list[UncalibratedTask]:
        return []  # a file holds trajectories, not calibrations

    def rollouts(self) -> list[RolloutRow]:
        out = []
        for rid in pc.unique(self._table["rollout_id"]).to_pylist():
            rows = self._table.filter(pc.equal(self._table["rollout_id"], rid))
            statuses = rows["status"].to_pylist()
            counts = {s: statuses.count(s) for s in sorted(set(statuses))}
            rewards = [r for r in rows["reward"].to_pylist() if r is not None]
            groups = len(pc.unique(rows["group_id"]))
            best = rows.group_by("group_id").aggregate([("reward", "max")])["reward_max"]
            passed = [b >= 1.0 for b in best.to_pylist() if b is not None]
            out.append(
                RolloutRow(
                    id=rid, status="exported", groups_total=groups, groups_completed=groups,
                    samples_total=rows.num_rows, samples_completed=rows.num_rows, counts=counts,
                    mean_reward=sum(rewards) / len(rewards) if rewards else None,
                    pass_at_n=sum(passed) / len(passed) if passed else None, created_at=None,
                )
            )  # fmt: skip
        return out

    def reward_by_version(self) -> list[VersionReward]:
        scored = self._table.filter(pc.is_valid(self._table["reward"]))
        stats = scored.group_by("policy_version_start").aggregate(
            [("reward", "mean"), ("reward", "count")]
        )
        return sorted(
            (
                VersionReward(version=v, mean_reward=m, n=n)
                for v, m, n in zip(
                    stats["policy_version_start"].to_pylist(),
                    stats["reward_mean"].to_pylist(),
                    stats["reward_count"].to_pylist(),
                    strict=True,
                )
            ),
            key=lambda r: r.version,
        )

    def tasks(self) -> list[str]:
        return sorted(pc.unique(self._table["task_id"]).to_pylist())[:MAX_TASKS]

    def samples(self, q: SampleQuery) -> SamplePage:
        t = self._table
        mask = pa.array([True] * t.num_rows)
        for column in ("rollout_id", "task_id", "group_id", "status"):
            value = getattr(q, column)
            if value is not None:
                mask = pc.and_(mask, pc.equal(t[column], value))
        if q.reward_min is not None:
            mask = pc.and_kleene(mask, pc.greater_equal(t["reward"], q.reward_min))
        if q.reward_max is not None:
            mask = pc.and_kleene(mask, pc.less_equal(t["reward"], q.reward_max))
        hits = t.filter(pc.fill_null(mask, False))
        rows = hits.slice(q.offset, q.limit).to_pylist()
        return SamplePage(
            total=hits.num_rows,
            offset=q.offset,
            rows=[
                SampleRow(**{k: r[k] for k in _LIST_COLUMNS[:-1]},
                          policy_version=r["policy_version_start"], tokens=None)
                for r in rows
            ],
        )  # fmt: skip

    def trajectory(self, trajectory_id: str) -> Trajectory | None:
        where = self._where.get(trajectory_id)
        if where is None:
            return None
        group, i = where
        with self._reading:
            row = self._file.read_row_group(group).slice(i, 1).to_pylist()[0]
        return Trajectory.model_validate(row)
