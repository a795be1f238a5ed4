"""Batch collection without the HTTP service: every task times n samples, generation and
sandboxes overlapping, trajectories streamed to Parquet. `rollouts collect` is a thin CLI on it."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from sandboxes.task import Task
from service.advantages import AdvantageConfig, compute_advantages
from service.episode import EpisodeRunner
from service.sample import AgentLimits, SampleSpec, SamplingParams
from service.trajectory import ARROW_SCHEMA, Trajectory, to_arrow


@dataclass
class CollectSummary:
    trajectories: int = 0
    groups: int = 0
    masked: int = 0
    rewards: list[float] = field(default_factory=list)
    group_pass: dict[str, list[bool]] = field(default_factory=dict)
    generated_tokens: int = 0
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, t: Trajectory) -> None:
        self.trajectories += 1
        self.counts[t.status.value] = self.counts.get(t.status.value, 0) + 1
        self.generated_tokens += sum(t.loss_mask)
        if t.exclude_from_baseline or t.reward is None:
            self.masked += 1
            return
        self.rewards.append(t.reward)
        self.group_pass.setdefault(t.group_id, []).append(t.reward >= 1.0)

    @property
    def mean_reward(self) -> float | None:
        return sum(self.rewards) / len(self.rewards) if self.rewards else None

    @property
    def pass_at_1(self) -> float | None:
        return self.mean_reward

    @property
    def pass_at_n(self) -> float | None:
        groups = [any(v) for v in self.group_pass.values()]
        return sum(groups) / len(groups) if groups else None

    @property
    def trajectories_per_min(self) -> float:
        return 60.0 * self.trajectories / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.seconds if self.seconds else 0.0


class ParquetSink:
    """Appends trajectories as they complete; a crash loses at most the open row group."""

    def __init__(self, path: Path, row_group: int = 64) -> None:
        self.path = path
        self._writer = pq.ParquetWriter(str(path), ARROW_SCHEMA)
        self._pending: list[Trajectory] = []
        self._row_group = row_group

    def write(self, trajectories: list[Trajectory]) -> None:
        self._pending.extend(trajectories)
        if len(self._pending) >= self._row_group:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            self._writer.write_table(to_arrow(self._pending))
            self._pending = []

    def close(self) -> None:
        self.flush()
        self._writer.close()


def sample_specs(
    task: Task,
    rollout_id: str,
    n_samples: int,
    sampling: SamplingParams,
    agent: AgentLimits,
) -> list[SampleSpec]:
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
        )
        for i in range(n_samples)
    ]


async def collect(
    tasks: Iterable[Task],
    runner: EpisodeRunner,
    sink: ParquetSink,
    *,
    n_samples: int = 8,
    concurrency: int = 8,
    sampling: SamplingParams | None = None,
    agent: AgentLimits | None = None,
    on_progress: Callable[[Trajectory], None] | None = None,
    rollout_id: str | None = None,
) -> CollectSummary:
    """Runs groups while at most `concurrency` samples are in flight. A group is admitted as a
    whole (its first turn is one n-sample request); one admitter avoids partial-admission
    deadlocks."""
    rollout_id = rollout_id or uuid.uuid4().hex[:12]
    sampling = sampling or SamplingParams()
    agent = agent or AgentLimits()
    summary = CollectSummary()
    slots = asyncio.Semaphore(concurrency)
    started = time.monotonic()

    async def run(task: Task, specs: list[SampleSpec], held: int) -> None:
        done: list[Trajectory] = []

        async def on_trajectory(t: Trajectory) -> None:
            done.append(t)
            summary.add(t)
            if on_progress:
                on_progress(t)

        try:
            await runner.run_group(task, specs, on_trajectory)
        finally:
            for _ in range(held):
                slots.release()
        # Advantages are a group property: only a finished group gets them (rloo_n defaults).
        advantages = compute_advantages(
            [t.reward for t in done], [t.exclude_from_baseline for t in done], AdvantageConfig()
        )
        for t, a in zip(done, advantages, strict=True):
            t.advantage = a
        summary.groups += 1
        sink.write(done)

    in_flight: set[asyncio.Task] = set()
    try:
        for task in tasks:
            specs = sample_specs(task, rollout_id, n_samples, sampling, agent)
            held = min(n_samples, concurrency)
            for _ in range(held):
                await slots.acquire()
            t = asyncio.create_task(run(task, specs, held))
            in_flight.add(t)
            t.add_done_callback(in_flight.discard)
        if in_flight:
            await asyncio.gather(*in_flight)
    finally:
        for t in in_flight:
            t.cancel()
        await asyncio.gather(*in_flight, return_exceptions=True)
        summary.seconds = time.monotonic() - started
    return summary
