"""The concurrency controller (service/concurrency.py) driven by a synthetic machine: throughput and
latencies as functions of the level, fed as finished samples on a clock of the test's own."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from live_service import EXAMPLES
from scheduler_fakes import StepRunner, key, settle, until

from sandboxes.tasks import load_tasks
from service.concurrency import ConcurrencyController, ConcurrencySettings
from service.metrics import Metrics
from service.sample import SampleSpec
from service.scheduler import Scheduler
from service.store import Store
from service.trajectory import Status
from service.wire import AdvantageSpec, RolloutRequest, SamplingSpec, TasksSpec

TASKS = load_tasks(EXAMPLES)[:1]


@dataclass
class Machine:
    """`cores` samples run at full speed; past them each extra one slows every sample by
    `contention` (shared caches, the engine's lock, the disk). A sample takes `work` seconds
    alone; its sandbox starts in `start` seconds while the machine is not crowded."""

    cores: int
    work: float = 1.0
    start: float = 0.2
    contention: float = 0.03
    start_cliff_above: int | None = None  # a level past which starts take 10x as long
    failing: Callable[[int], bool] = lambda i: False  # noqa: E731

    def throughput(self, level: int) -> float:
        busy = min(level, self.cores)
        over = max(0, level - self.cores)
        return busy / self.work / (1 + self.contention * over)

    def start_s(self, level: int) -> float:
        crowded = self.start_cliff_above is not None and level > self.start_cliff_above
        return self.start * (10 if crowded else 1) * max(1.0, level / self.cores)


def drive(c: ConcurrencyController, m: Machine, samples: int, now: float = 0.0) -> float:
    """Feed `samples` finished samples at the machine's rate for the controller's level."""
    for i in range(samples):
        level = c.level
        now += 1.0 / m.throughput(level)
        c.finished(
            now=now,
            start_s=m.start_s(level),
            verify_s=m.work * max(1.0, level / m.cores),
            failed=m.failing(i),
        )
    return now


def settings(ceiling: int, **kw: object) -> ConcurrencySettings:
    return ConcurrencySettings(ceiling=ceiling, min_window_s=0.0, **kw)  # type: ignore[arg-type]


def test_it_grows_while_throughput_grows_and_settles_near_the_knee() -> None:
    m = Machine(cores=12)
    c = ConcurrencyController(settings(ceiling=64), now=0.0)
    drive(c, m, 2000)
    levels = [w.level for w in c.history]
    assert levels[0] == 4 and max(levels) > 12
    # Past the knee throughput falls: the level ends around it, far below the ceiling.
    tail = levels[-40:]
    assert 10 <= min(tail) and max(tail) <= 20, tail
    assert {"grow", "revert"} <= {w.decision for w in c.history}


def test_it_never_exceeds_the_ceiling_nor_goes_below_the_floor() -> None:
    m = Machine(cores=1000)  # throughput grows with every level
    c = ConcurrencyController(settings(ceiling=10, floor=2, start=3), now=0.0)
    drive(c, m, 3000)
    levels = [w.next_level for w in c.history]
    assert max(levels) == 10 and min(levels) >= 2
    assert c.level == 10
    m2 = Machine(cores=1, failing=lambda i: True)  # every sample fails: cut to the floor
    c2 = ConcurrencyController(settings(ceiling=10, floor=2, start=8), now=0.0)
    drive(c2, m2, 400)
    assert c2.level == 2 and all(w.next_level >= 2 for w in c2.history)


def test_it_backs_off_on_a_latency_cliff() -> None:
    # Throughput keeps growing, but past 9 samples every sandbox start takes 10x as long (a
    # daemon at its limit): that is overload whatever the throughput says.
    m = Machine(cores=1000, start_cliff_above=9)
    c = ConcurrencyController(settings(ceiling=64), now=0.0)
    drive(c, m, 3000)
    assert any(w.decision == "backoff" and w.level > 9 for w in c.history)
    tail = [w.level for w in c.history[-30:]]
    assert max(tail) <= 13 and min(tail) >= 6, tail  # probes past 9 are cut each time


def test_it_recovers_after_failures_stop() -> None:
    broken = {"on": False}
    m = Machine(cores=16, failing=lambda i: broken["on"])
    c = ConcurrencyController(settings(ceiling=64), now=0.0)
    now = drive(c, m, 1500)
    before = c.level
    assert before >= 12
    broken["on"] = True
    now = drive(c, m, 80, now)
    during = c.level
    assert during <= before * 0.5
    broken["on"] = False
    drive(c, m, 1500, now)
    assert c.level >= 12, [w.next_level for w in c.history[-20:]]


def test_a_slow_start_is_not_taken_for_a_gain() -> None:
    """A service's first window is slower than any after it: it opens when the service starts
    (before any request), its first samples find no warm sandbox and all start at once. The
    benchmark's traces showed it (benchmarks/admission.py, every adaptive round: 4 -> 5 -> 7 ->
    5): taken as the baseline, it made the first raise look like a gain, and the level stayed
    a step above where throughput stops growing. The first window is a warm-up now."""
    m = Machine(cores=4)  # past 4 samples, every extra one costs throughput
    c = ConcurrencyController(settings(ceiling=32), now=0.0)
    drive(c, m, 600, now=30.0)  # no request for the first 30 s
    assert c.history[0].decision == "warmup" and c.history[0].next_level == 4
    tail = [w.level for w in c.history[-30:]]
    assert min(tail) == 4 and max(tail) <= 5, tail  # at the knee, probing one step above


def test_a_window_needs_its_samples_and_its_seconds() -> None:
    c = ConcurrencyController(ConcurrencySettings(ceiling=64, window=8, min_window_s=5.0), now=0.0)
    for i in range(7):
        assert c.finished(now=10.0 + i, start_s=0.1, verify_s=0.5, failed=False) is None
    # Eight samples, but only 4 s since the window opened at 0: not closed yet.
    no_warmup = ConcurrencySettings(ceiling=64, window=8, min_window_s=5.0, warmup_windows=0)
    c2 = ConcurrencyController(no_warmup, now=0.0)
    for i in range(8):
        assert c2.finished(now=0.5 * i, start_s=0.1, verify_s=0.5, failed=False) is None
    result = c2.finished(now=6.0, start_s=0.1, verify_s=0.5, failed=False)
    assert result is not None and result.decision == "grow" and c2.level == 5


# ---- the scheduler follows the level ------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path)
    s.open()
    yield s
    s.close()


def _request(n: int) -> RolloutRequest:
    return RolloutRequest(
        tasks=TasksSpec(path="x"),
        n_samples=n,
        sampling=SamplingSpec(seed=11),
        advantage=AdvantageSpec(estimator="rloo", min_group_size=1),
    )


async def test_the_scheduler_holds_samples_in_their_episode_to_the_level(store: Store) -> None:
    """Two finished samples close a window; the level grows 2 -> 3 -> 4 (the ceiling); then a
    window of sandbox failures cuts it to 2: no new sample starts until only one is left in its
    episode. (gain -1: every raise is kept, so the decisions do not depend on the clock; no
    warm-up window.)"""
    failing: set[int] = set()

    def outcome(spec: SampleSpec) -> tuple[Status, float | None, int]:
        if spec.sample_index in failing:
            return Status.sandbox_error, None, 0
        return Status.ok, 1.0, 0

    runner = StepRunner(outcome)
    metrics = Metrics()
    control = ConcurrencyController(
        ConcurrencySettings(
            ceiling=4, start=2, window=2, min_window_s=0.0, gain=-1.0, warmup_windows=0
        ),
        0.0,
    )
    scheduler = Scheduler(
        store, runner, lambda *a: TASKS, max_concurrent_samples=4, max_queued_samples=16,
        current_version=lambda: 0, retry_masked=0, metrics=metrics, concurrency_control=control,
    )  # fmt: skip
    await scheduler.start()
    try:
        # An idle service already shows its level (the starting one), not 0.
        assert _gauge(metrics, "rollouts_concurrency_level") == 2 == scheduler.concurrency
        rid = await scheduler.submit(_request(14), TASKS)
        keys = [key(rid, 0, k) for k in range(14)]
        await until(lambda: len(runner.started) == 2)
        await settle()
        assert len(runner.in_episode) == 2  # the starting level, not the ceiling
        runner.end(*keys[:2])
        await until(lambda: len(runner.started) == 5)  # level 3
        await settle()
        assert len(runner.in_episode) == 3 and control.level == 3
        runner.end(*keys[2:4])
        await until(lambda: len(runner.in_episode) == 4)  # level 4: the ceiling
        await settle()
        assert control.level == 4 and len(runner.started) == 8
        assert scheduler._finishing.total == 4  # verifications follow the level too
        # The level as /metrics and the web view's concurrency card (the stats event) show it.
        assert _gauge(metrics, "rollouts_concurrency_level") == 4 == scheduler.concurrency
        failing.update(range(4, 6))  # two sandbox failures: a window of failures
        runner.end(*keys[4:6])
        await until(lambda: control.level == 2)
        await settle()
        # Four slots were taken, two freed by the failures: level 2 leaves none free.
        assert len(runner.in_episode) == 2 and len(runner.started) == 8
        runner.end(keys[6])
        await until(lambda: len(runner.started) == 9)
        await settle()
        assert len(runner.in_episode) == 2  # two at most now, not four
        runner.end(*keys)
        await until(lambda: scheduler.running_samples == 0 and len(runner.started) == 14)
        assert runner.most_in_episode == 4
        assert _gauge(metrics, "rollouts_concurrency_level") == control.level
        assert scheduler.concurrency == control.level
    finally:
        await scheduler.aclose()


def _gauge(metrics: Metrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name)
