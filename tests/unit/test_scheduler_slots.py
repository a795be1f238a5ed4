"""A sample's slot covers its episode: the next sample generates while it verifies."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from hardening_support import EXAMPLES, trajectory

from sandboxes.task import Task
from sandboxes.tasks import load_tasks
from service.sample import SampleSpec
from service.scheduler import Scheduler
from service.store import Store
from service.wire import AdvantageSpec, RolloutRequest, TasksSpec


class VerifyingRunner:
    """Each sample ends its episode at once, then 'verifies' until `verified` is set."""

    def __init__(self) -> None:
        self.verified = asyncio.Event()
        self.started: list[str] = []  # task ids, one per sample whose episode started
        self.verifying = 0
        self.most_verifying = 0

    async def run_group(
        self,
        task: Task,
        samples: list[SampleSpec],
        on_trajectory: Any,
        on_episode_end: Any,
        on_start: Any,
    ) -> None:
        async def one(spec: SampleSpec) -> None:
            await on_start(spec.trajectory_id)
            self.started.append(task.id)
            await on_episode_end(spec.trajectory_id)
            self.verifying += 1
            self.most_verifying = max(self.most_verifying, self.verifying)
            await self.verified.wait()
            self.verifying -= 1
            await on_trajectory(trajectory(spec))

        await asyncio.gather(*(one(s) for s in samples))


async def _wait_for(check: Any, seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)


def test_the_next_group_generates_while_one_verifies_and_verifying_is_bounded(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        store = Store(tmp_path)
        store.open()
        tasks = load_tasks(EXAMPLES)[:3]
        runner = VerifyingRunner()
        scheduler = Scheduler(
            store, runner, lambda *a: tasks, max_concurrent_samples=2, max_queued_samples=16,
            current_version=lambda: 0,
        )  # fmt: skip
        await scheduler.start()
        try:
            request = RolloutRequest(
                tasks=TasksSpec(path="x"), n_samples=2, advantage=AdvantageSpec(min_group_size=2)
            )
            rid = await scheduler.submit(request, tasks)  # three groups of two
            # Group 1 verifies; group 2 got the two episode slots it freed.
            await _wait_for(lambda: len(runner.started) == 4)
            assert runner.started == [tasks[0].id] * 2 + [tasks[1].id] * 2
            # Group 2 waits for a verifying slot (two, both group 1's): group 3 cannot start.
            await asyncio.sleep(0.3)
            assert len(runner.started) == 4 and runner.verifying == 2
            runner.verified.set()
            await _wait_for(lambda: scheduler.running_samples == 0 and len(runner.started) == 6)
            assert runner.most_verifying == 2
            summary = await store.rollout_summary(rid)
            assert (summary.samples_completed, summary.status) == (6, "completed")
        finally:
            await scheduler.aclose()
            store.close()

    asyncio.run(scenario())
