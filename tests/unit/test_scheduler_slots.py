"""A sample's slot covers its episode: the next sample generates while it verifies."""

from __future__ import annotations

import asyncio

from live_service import EXAMPLES
from scheduler_fakes import StepRunner, key, running_scheduler, settle, until

from sandboxes.tasks import load_tasks
from service.store import Store
from service.wire import AdvantageSpec, RolloutRequest, TasksSpec


def test_the_next_group_generates_while_one_verifies_and_verifying_is_bounded(
    store: Store,
) -> None:
    async def scenario() -> None:
        tasks = load_tasks(EXAMPLES)[:3]
        # Each sample ends its episode at once, then verifies until the test lets it.
        runner = StepRunner(auto=True, hold_verification=True)
        async with running_scheduler(store, runner, tasks, max_concurrent_samples=2) as scheduler:
            request = RolloutRequest(
                tasks=TasksSpec(path="x"), n_samples=2, advantage=AdvantageSpec(min_group_size=2)
            )
            rid = await scheduler.submit(request, tasks)  # three groups of two
            group = [[key(rid, g, k) for k in range(2)] for g in range(3)]
            # Group 1 verifies; group 2 got the two episode slots it freed, and its samples
            # wait for a verifying slot (two, both group 1's) while they hold them.
            await until(lambda: set(group[1]) <= runner.ending | runner.verifying)
            assert runner.started == group[0] + group[1]
            assert runner.verifying == set(group[0])
            # Nothing can free a slot until the test lets group 1 verify: group 3 cannot start.
            await settle()
            assert runner.started == group[0] + group[1]
            assert runner.verifying == set(group[0]) and runner.ending == set(group[1])
            runner.verified.set()
            await until(lambda: scheduler.running_samples == 0 and len(runner.started) == 6)
            assert runner.started[4:] == group[2]
            assert runner.most_verifying == 2
            summary = await store.rollout_summary(rid)
            assert (summary.samples_completed, summary.status) == (6, "completed")

    asyncio.run(scenario())


def test_a_rollout_cancelled_before_its_group_task_first_runs_gives_its_slots_back(
    store: Store,
) -> None:
    """The dispatcher takes a group's slots, then creates the task that runs it. A cancel that
    comes before that task's first step must not cancel it there: a task cancelled before it
    starts never runs its body, and the slots it was handed would be lost for good (the
    service would run with fewer slots, or none)."""

    async def scenario() -> None:
        tasks = load_tasks(EXAMPLES)[:1]
        runner = StepRunner()
        async with running_scheduler(store, runner, tasks, max_concurrent_samples=4) as scheduler:
            request = RolloutRequest(
                tasks=TasksSpec(path="x"), n_samples=3, advantage=AdvantageSpec(min_group_size=1)
            )
            rid = await scheduler.submit(request, tasks)
            # Queued behind the dispatcher's wake-up: it runs after the group task is created,
            # before that task's first step.
            await asyncio.create_task(scheduler.cancel(rid))
            await until(lambda: scheduler.running_samples == 0)
            assert runner.started == []  # no episode ran
            assert (scheduler._slots.free, scheduler.queued_samples) == (4, 0)
            summary = await store.rollout_summary(rid)
            assert summary.status == "cancelled"

    asyncio.run(scenario())
