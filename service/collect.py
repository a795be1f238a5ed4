"""Batch collection without HTTP: the service's own scheduler and durable store, embedded.

`rollouts collect` runs through exactly the path `rollouts serve` uses (admission of whole
groups, commit before visibility, advantages at group completion), then exports the rollout as
Parquet. A killed run loses nothing committed: `rollouts export --data-dir` recovers it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from sandboxes.task import Task
from sandboxes.tasks import load_tasks
from service.events import Event, EventHub
from service.export import export_parquet
from service.sample import RETRY_MASKED
from service.scheduler import GroupRunner, Scheduler, TaskLoader
from service.store import Store
from service.wire import RolloutRequest

CONCURRENCY = 8  # samples in flight by default: one machine's Docker Engine, not a cluster's


@dataclass
class CollectSummary:
    rollout_id: str = ""
    trajectories: int = 0
    groups: int = 0
    masked: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    mean_reward: float | None = None
    pass_at_n: float | None = None
    generated_tokens: int = 0
    seconds: float = 0.0

    @property
    def pass_at_1(self) -> float | None:
        # Binary rewards: the mean reward over unmasked samples is pass@1.
        return self.mean_reward

    @property
    def trajectories_per_min(self) -> float:
        return 60.0 * self.trajectories / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.seconds if self.seconds else 0.0


def summarize(parquet: Path, seconds: float, rollout_id: str) -> CollectSummary:
    """Reads only the columns it needs, so a large export stays cheap to summarise."""
    cols = ["group_id", "status", "reward", "exclude_from_baseline", "loss_mask"]
    table = pq.read_table(parquet, columns=cols)
    summary = CollectSummary(rollout_id=rollout_id, seconds=seconds, trajectories=table.num_rows)
    if table.num_rows == 0:
        return summary
    for status, n in zip(*pc.value_counts(table["status"]).flatten(), strict=True):
        summary.counts[status.as_py()] = n.as_py()
    summary.masked = pc.sum(table["exclude_from_baseline"].cast("int64")).as_py() or 0
    summary.generated_tokens = pc.sum(pc.list_flatten(table["loss_mask"]).cast("int64")).as_py()
    graded = table.filter(pc.invert(table["exclude_from_baseline"]))
    summary.groups = len(pc.unique(table["group_id"]))
    if graded.num_rows:
        summary.mean_reward = pc.mean(graded["reward"]).as_py()
        best = graded.group_by("group_id").aggregate([("reward", "max")])
        summary.pass_at_n = pc.mean(pc.greater_equal(best["reward_max"], 1.0)).as_py()
    return summary


async def collect(
    tasks_path: str,
    tasks: list[Task],
    runner: GroupRunner,
    data_dir: Path,
    out_file: Path,
    request: RolloutRequest,
    *,
    concurrency: int = CONCURRENCY,
    retry_masked: int = RETRY_MASKED,
    ready: Callable[[], Awaitable[bool]] | None = None,
    task_loader: TaskLoader | None = None,
    on_trajectory: Callable[[dict], None] | None = None,
    keep_workspaces: bool = True,
) -> CollectSummary:
    """Runs every task x n samples with at most `concurrency` samples in flight, stores them in
    `data_dir`, and writes the rollout to `out_file`. `retry_masked`: re-runs of a masked sample
    (unless the request names its own), each once `ready()` (the components' readiness
    checks). `task_loader` reloads tasks for samples to re-run
    (default: sandboxes.tasks.load_tasks). `keep_workspaces`: keep each verified sample's final
    workspace for regrading (a runner that can: EpisodeRunner)."""
    store = Store(data_dir)
    store.open()
    keep = getattr(runner, "keep_workspaces", None)
    if keep is not None:
        keep(store.known_blobs if keep_workspaces else None)
    events = EventHub()
    scheduler = Scheduler(
        store,
        runner,
        task_loader or (lambda path, ids, limit: load_tasks(path, ids=ids, limit=limit)),
        max_concurrent_samples=concurrency,
        max_queued_samples=max(1, len(tasks) * request.n_samples),
        current_version=lambda: 0,
        retry_masked=retry_masked,
        ready=ready,
        events=events,
    )
    started = time.monotonic()
    try:
        await scheduler.start()
        rollout_id = await scheduler.submit(request, tasks)
        feed = events.subscribe(rollout_id)
        while True:
            try:
                event: Event = await asyncio.wait_for(feed.get(), timeout=5.0)
            except TimeoutError:
                # The live feed may drop events under pressure; the store is the truth.
                if (await store.rollout_summary(rollout_id)).status != "running":
                    break
                continue
            if event.kind == "trajectory" and on_trajectory is not None:
                on_trajectory(event.data)
            if event.kind == "rollout":
                break
        events.unsubscribe(rollout_id, feed)
    finally:
        await scheduler.aclose()
    seconds = time.monotonic() - started
    try:
        await asyncio.to_thread(export_parquet, data_dir, out_file, rollout_id)
    finally:
        store.close()
    return summarize(out_file, seconds, rollout_id)
