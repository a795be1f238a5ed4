"""The scheduler's dispatch by the slot and its re-runs of masked samples, with a runner whose
episodes end when the test says (no Docker, no policy; real scheduler and SQLite store).

- A free slot starts a sample at once; a group's samples not yet started go to the runner
  together (one shared first turn) and take slots as they free, before any other group. The
  chunk dispatch it replaced (benchmarks/chunk_dispatch.py) waits for a whole chunk's slots.
- A sample masked by the sandboxes or the policy runs again (`attempts`), ahead of later groups;
  graded samples, `cancelled` and `verifier_error` never do; `retry_masked` bounds it (0: off);
  a re-run waits until the service is ready; a group already too stale is not re-run.
"""

from __future__ import annotations

from typing import Any

import pytest
from live_service import EXAMPLES
from scheduler_fakes import StepRunner, key, settle, until

import service.outcomes
from benchmarks.chunk_dispatch import ChunkScheduler
from sandboxes.tasks import load_tasks
from service.metrics import Metrics
from service.sample import SampleSpec, sample_seed
from service.scheduler import Scheduler
from service.store import Store
from service.store.reader import iter_trajectory_rows
from service.trajectory import Status, Trajectory
from service.wire import AdvantageSpec, RolloutRequest, SamplingSpec, TasksSpec

TASKS = load_tasks(EXAMPLES)[:2]


def _request(n: int, **extra: Any) -> RolloutRequest:
    return RolloutRequest(
        tasks=TasksSpec(path="x"),
        n_samples=n,
        sampling=SamplingSpec(seed=11),
        advantage=AdvantageSpec(estimator="rloo", min_group_size=1),
        **extra,
    )


def _trajectories(store: Store, rollout_id: str) -> list[Trajectory]:
    rows = [r for chunk in iter_trajectory_rows(store.data_dir, rollout_id) for r in chunk]
    return [Trajectory.model_validate(r) for r in rows]


async def test_a_free_slot_starts_a_sample_at_once_and_a_group_shares_its_first_turn(
    store: Store,
) -> None:
    """Three slots, two groups of five: the chunk dispatch that came before, then the
    scheduler's, on the same script."""
    for cls in (ChunkScheduler, Scheduler):
        runner = StepRunner()
        scheduler = cls(
            store, runner, lambda *a: TASKS, max_concurrent_samples=3, max_queued_samples=10,
            current_version=lambda: 0,
        )  # fmt: skip
        await scheduler.start()
        try:
            rid = await scheduler.submit(_request(5), TASKS)
            a = [key(rid, 0, k) for k in range(5)]
            b = [key(rid, 1, k) for k in range(5)]
            await until(lambda: len(runner.started) == 3)  # noqa: B023
            assert runner.started == a[:3]
            runner.end(a[1])  # the wave's other two samples run on (the long tail)
            await settle()
            if cls is ChunkScheduler:
                # The next chunk waits for the slowest episode of this one.
                assert runner.started == a[:3] and [len(c) for c in runner.calls] == [3]
                runner.end(a[0], a[2])
                await until(lambda: len(runner.started) == 5)  # noqa: B023
                assert [len(c) for c in runner.calls] == [3, 2]  # n=3, then n=2
            else:
                # The freed slot went to the group's next sample at once: the whole group had
                # been handed over together (one first request, n=5).
                await until(lambda: len(runner.started) == 4)  # noqa: B023
                assert runner.started == a[:4]
                assert [len(c) for c in runner.calls] == [5]
                runner.end(a[0])
                await until(lambda: len(runner.started) == 5)  # noqa: B023
                # A slot that frees now starts the next group, all of it handed over at once.
                runner.end(a[2])
                await until(lambda: len(runner.started) == 6)  # noqa: B023
                assert runner.started[5] == b[0] and [len(c) for c in runner.calls] == [5, 5]
            runner.end(*a, *b)
            await until(lambda: scheduler.running_samples == 0 and len(runner.started) == 10)  # noqa: B023
            assert runner.most_in_episode == 3  # max_concurrent_samples held throughout
            assert (await store.rollout_summary(rid)).samples_completed == 10
        finally:
            await scheduler.aclose()


async def test_a_started_groups_samples_take_slots_before_a_higher_priority_group(
    store: Store,
) -> None:
    runner = StepRunner()
    scheduler = Scheduler(
        store, runner, lambda *a: TASKS, max_concurrent_samples=2, max_queued_samples=10,
        current_version=lambda: 0,
    )  # fmt: skip
    await scheduler.start()
    try:
        low = await scheduler.submit(_request(3), TASKS[:1])
        a = [key(low, 0, k) for k in range(3)]
        await until(lambda: len(runner.started) == 2)
        assert scheduler.queued_samples == 1  # the third sample: handed over, no slot yet
        high = await scheduler.submit(_request(1, priority=5), TASKS[1:])
        later = await scheduler.submit(_request(1), TASKS[1:])
        runner.end(a[0])
        await until(lambda: len(runner.started) == 3)
        assert runner.started[2] == a[2]  # the started group's sample first
        runner.end(a[1])
        await until(lambda: len(runner.started) == 4)
        assert runner.started[3] == key(high, 0, 0)  # then by priority
        runner.end(*runner.started)
        await until(lambda: len(runner.started) == 5)
        assert runner.started[4] == key(later, 0, 0)
        runner.end(*runner.started)
        await until(lambda: scheduler.running_samples == 0)
    finally:
        await scheduler.aclose()


async def test_masked_samples_run_again_and_only_they(store: Store) -> None:
    """n=6: two samples masked by infrastructure faults on their first run; a graded 0, an
    agent timeout, a verifier error (the task's tests) and a cancelled sample are not re-run.
    A re-run starts ahead of a group submitted later, with the sample's seed."""

    def outcome(spec: SampleSpec) -> tuple[Status, float | None, int]:
        first = spec.attempt == 1
        return {
            0: (Status.sandbox_error, None, 0) if first else (Status.ok, 1.0, 0),
            1: (Status.policy_error, None, 0) if first else (Status.ok, 0.0, 0),
            2: (Status.ok, 0.0, 0),
            3: (Status.agent_timeout, 0.0, 0),
            4: (Status.verifier_error, None, 0),
            5: (Status.cancelled, None, 0),
        }[spec.sample_index]

    runner = StepRunner(outcome)
    metrics = Metrics()
    scheduler = Scheduler(
        store, runner, lambda *a: TASKS, max_concurrent_samples=6, max_queued_samples=20,
        current_version=lambda: 0, metrics=metrics,
    )  # fmt: skip
    await scheduler.start()
    try:
        rid = await scheduler.submit(_request(6), TASKS[:1])
        later = await scheduler.submit(_request(6), TASKS[1:])
        await until(lambda: len(runner.started) == 6)
        runner.end(*runner.started[:2])
        await until(lambda: len(runner.started) == 8)
        # Both re-runs took the freed slots before the later group's samples.
        assert runner.started[6:] == [key(rid, 0, 0, 2), key(rid, 0, 1, 2)]
        runner.auto = True  # the rest (the later group re-runs two samples too)
        runner.end(*runner.started)
        await until(lambda: scheduler.running_samples == 0 and scheduler.queued_samples == 0)
        later_done = (await store.rollout_summary(later)).samples_completed
        assert later_done == 6
    finally:
        await scheduler.aclose()
    got = sorted(_trajectories(store, rid), key=lambda t: t.sample_index)
    assert [(t.status.value, t.reward, t.attempts) for t in got] == [
        ("ok", 1.0, 2),
        ("ok", 0.0, 2),
        ("ok", 0.0, 1),
        ("agent_timeout", 0.0, 1),
        ("verifier_error", None, 1),
        ("cancelled", None, 1),
    ]
    reruns = [c for c in runner.calls if c[0].attempt > 1 and c[0].rollout_id == rid]
    assert [len(c) for c in reruns] == [1, 1]  # each alone: one first request, n=1
    for (spec,) in reruns:  # a re-run keeps its sample's seed
        assert spec.seed == sample_seed(11, TASKS[0].id, spec.sample_index) is not None
    value = metrics.registry.get_sample_value  # both rollouts' re-runs
    assert value("rollouts_sample_retries_total", {"reason": "sandbox_error"}) == 2
    assert value("rollouts_sample_retries_total", {"reason": "policy_error"}) == 2


@pytest.mark.parametrize(("retry_masked", "runs"), [(None, 3), (0, 1), (1, 2)])
async def test_re_runs_are_bounded_and_the_request_can_turn_them_off(
    store: Store, retry_masked: int | None, runs: int
) -> None:
    runner = StepRunner(lambda spec: (Status.sandbox_error, None, 0), auto=True)
    scheduler = Scheduler(
        store, runner, lambda *a: TASKS, max_concurrent_samples=2, max_queued_samples=4,
        current_version=lambda: 0,
    )  # fmt: skip
    await scheduler.start()
    try:
        rid = await scheduler.submit(_request(1, retry_masked=retry_masked), TASKS[:1])
        await until(lambda: scheduler.running_samples == 0 and len(runner.started) == runs)
        await until(lambda: _trajectories(store, rid))
    finally:
        await scheduler.aclose()
    [t] = _trajectories(store, rid)
    assert (t.status, t.attempts, len(runner.started)) == (Status.sandbox_error, runs, runs)


async def test_a_re_run_waits_until_the_service_is_ready(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service.outcomes, "RERUN_READY_POLL_S", 0.01)
    runner = StepRunner(
        lambda spec: (Status.policy_error, None, 0) if spec.attempt == 1 else (Status.ok, 1, 0),
        auto=True,
    )
    checks = {"answers": 0, "ready": False}

    async def ready() -> bool:
        checks["answers"] += 1
        return checks["ready"]

    scheduler = Scheduler(
        store, runner, lambda *a: TASKS, max_concurrent_samples=2, max_queued_samples=4,
        current_version=lambda: 0, ready=ready,
    )  # fmt: skip
    await scheduler.start()
    try:
        rid = await scheduler.submit(_request(1), TASKS[:1])
        await until(lambda: checks["answers"] >= 1)
        await settle()
        assert len(runner.started) == 1  # the policy is down: no re-run yet
        checks["ready"] = True
        await until(lambda: _trajectories(store, rid), seconds=20)
    finally:
        await scheduler.aclose()
    [t] = _trajectories(store, rid)
    assert (t.status, t.attempts) == (Status.ok, 2)


async def test_a_service_that_stays_unready_delivers_the_sample_masked(store: Store) -> None:
    runner = StepRunner(lambda spec: (Status.sandbox_error, None, 0), auto=True)

    async def never() -> bool:
        return False

    scheduler = Scheduler(
        store, runner, lambda *a: TASKS, max_concurrent_samples=2, max_queued_samples=4,
        current_version=lambda: 0, ready=never, ready_timeout_s=0.0,
    )  # fmt: skip
    await scheduler.start()
    try:
        rid = await scheduler.submit(_request(1), TASKS[:1])
        await until(lambda: _trajectories(store, rid))
    finally:
        await scheduler.aclose()
    [t] = _trajectories(store, rid)
    assert (t.status, t.attempts, len(runner.started)) == (Status.sandbox_error, 1, 1)


@pytest.mark.parametrize(("max_staleness", "runs"), [(1, 1), (3, 2)])
async def test_no_re_run_for_a_group_already_too_stale(
    store: Store, max_staleness: int, runs: int
) -> None:
    """Sample 0 was committed under version 2; sample 1 comes back masked at version 5. With
    max_staleness 1 the group is already too stale (5 - 2 > 1): re-running it would waste an
    episode on a group the lease drops or re-queues. With 3 it is re-run, under version 5."""
    version = {"now": 2}

    def outcome(spec: SampleSpec) -> tuple[Status, float | None, int]:
        if spec.sample_index == 1 and spec.attempt == 1:
            return Status.sandbox_error, None, version["now"]
        return Status.ok, 1.0, version["now"]

    runner = StepRunner(outcome)
    scheduler = Scheduler(
        store, runner, lambda *a: TASKS, max_concurrent_samples=2, max_queued_samples=4,
        current_version=lambda: version["now"], max_staleness=lambda: max_staleness,
    )  # fmt: skip
    await scheduler.start()
    try:
        rid = await scheduler.submit(_request(2), TASKS[:1])
        first, second = key(rid, 0, 0), key(rid, 0, 1)
        await until(lambda: len(runner.started) == 2)
        runner.end(first)
        await until(lambda: _trajectories(store, rid))
        version["now"] = 5
        runner.end(second)
        if runs == 2:
            await until(lambda: len(runner.started) == 3)
            runner.end(runner.started[2])
        await until(lambda: len(_trajectories(store, rid)) == 2)
    finally:
        await scheduler.aclose()
    t0, t1 = sorted(_trajectories(store, rid), key=lambda t: t.sample_index)
    assert t0.policy_version_start == 2 and len(runner.started) == 1 + runs
    if runs == 1:
        assert (t1.status, t1.attempts) == (Status.sandbox_error, 1)
    else:
        assert (t1.status, t1.attempts, t1.policy_version_start) == (Status.ok, 2, 5)


def test_sample_seeds_come_from_seed_task_and_index_alone() -> None:
    seeds = [sample_seed(7, "camel-to-snake", k) for k in range(8)]
    assert seeds == [seeds[0] + k for k in range(8)]  # consecutive: one n-sample request
    assert all(s is not None and 0 <= s < 2**31 for s in seeds)
    assert sample_seed(7, "camel-to-snake", 3) == seeds[3]  # nothing else goes in
    assert sample_seed(8, "camel-to-snake", 0) != seeds[0]
    assert sample_seed(7, "gcd-of-list", 0) != seeds[0]
    assert sample_seed(None, "camel-to-snake", 0) is None
    assert sample_seed(2**63 - 1, "x", 1023) < 2**31  # the request's largest seed and n
