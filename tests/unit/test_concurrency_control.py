"""The concurrency controller (service/concurrency.py) driven by a synthetic machine: throughput and
latencies as functions of the level, fed as finished samples on a clock of the test's own."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from live_service import EXAMPLES
from scheduler_fakes import StepRunner, key, settle, until

from sandboxes.tasks import load_tasks
from service.concurrency import ConcurrencyController, ConcurrencySettings, WindowResult
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


def finish(c: ConcurrencyController, m: Machine, now: float, running: int, i: int = 0) -> float:
    """One sample finishes with `running` samples in their episode: after the machine's time
    between finishes at that many, having held its slot for `running` such times (Little)."""
    rate = m.throughput(running)
    now += 1.0 / rate
    c.finished(
        now=now,
        slot_s=running / rate,
        start_s=m.start_s(running),
        verify_s=m.work * max(1.0, running / m.cores),
        failed=m.failing(i),
    )
    return now


def drive(c: ConcurrencyController, m: Machine, samples: int, now: float = 0.0) -> float:
    """Feed `samples` finished samples at the machine's rate for the controller's level, more
    samples waiting for a slot all along (a long collection)."""
    c.demand(now=now, waiting=True)
    for i in range(samples):
        now = finish(c, m, now, c.level, i)
    return now


def drive_batches(
    c: ConcurrencyController, m: Machine, batches: int, size: int, idle_s: float
) -> None:
    """A synchronous RL loop: a batch of `size` samples, then `idle_s` with none (training). A
    batch's samples wait for a slot until its last ones start; those then drain, fewer and
    fewer in their episode."""
    now = 0.0
    for _ in range(batches):
        c.demand(now=now, waiting=True)
        left = size
        while left > c.level:
            now = finish(c, m, now, c.level)
            left -= 1
        c.demand(now=now, waiting=False)
        for running in range(left, 0, -1):
            now = finish(c, m, now, running)
        now += idle_s


def settings(ceiling: int, **kw: object) -> ConcurrencySettings:
    return ConcurrencySettings(ceiling=ceiling, min_window_s=0.0, **kw)  # type: ignore[arg-type]


def test_it_grows_while_throughput_grows_and_settles_near_the_knee() -> None:
    m = Machine(cores=12)
    c = ConcurrencyController(settings(ceiling=64), now=0.0)
    drive(c, m, 2000)
    levels = [w.level for w in c.history]
    assert levels[0] == 4 and max(levels) > 12
    # Past the knee throughput falls: the level ends around it, far below the ceiling (its
    # steps from 4 by x1.5: 9, 14 and a probe at 21).
    tail = levels[-40:]
    assert 9 <= min(tail) and max(tail) <= 21, tail
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
    assert max(tail) <= 14 and min(tail) >= 6, tail  # probes past 9 (to 14) are cut each time


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
    """A service's first samples are slower than any after them: they find no warm sandbox and
    all start at once. The benchmark's traces showed it (benchmarks/admission.py, every
    adaptive round: 4 -> 5 -> 7 -> 5): taken as the baseline, that window made the first raise
    look like a gain, and the level stayed a step above where throughput stops growing. The
    first window is a warm-up now."""
    m = Machine(cores=4)  # past 4 samples, every extra one costs throughput
    c = ConcurrencyController(settings(ceiling=32), now=0.0)
    cold = Machine(cores=4, work=2.0)  # the same machine, every sandbox cold
    c.demand(now=0.0, waiting=True)
    now = 0.0
    while not c.history:
        now = finish(c, cold, now, c.level)
    assert c.history[0].decision == "warmup" and c.history[0].next_level == 4
    drive(c, m, 600, now)
    tail = [w.level for w in c.history[-30:]]
    assert min(tail) == 4 and max(tail) <= 6, tail  # at the knee, probing one step above


def test_a_window_short_of_work_decides_nothing() -> None:
    """A window in which samples seldom waited for a slot (a batch's last samples draining, an
    RL loop training between rollouts) ran below its level whatever the level was: its
    throughput, latencies and failures neither undo the raise before it nor back off. The next
    window in which samples waited judges the raise."""
    c = ConcurrencyController(settings(ceiling=64, window=4, warmup_windows=0), now=0.0)

    def window(now: float, slot_s: float, start_s: float = 0.1, failed: bool = False) -> float:
        for _ in range(4):
            now += 10.0
            c.finished(now=now, slot_s=slot_s, start_s=start_s, verify_s=0.5, failed=failed)
        return now

    c.demand(now=0.0, waiting=True)
    now = window(0.0, slot_s=4.0)  # level 4, a sample every second a slot: 1 a second
    assert c.history[-1].decision == "grow" and c.level == 6
    c.demand(now=now, waiting=False)  # the batch drains
    now = window(now, slot_s=8.0)  # 0.75 a second at level 6: had it counted, a revert
    now = window(now, slot_s=8.0, start_s=5.0, failed=True)  # had it counted, a back-off
    assert [w.decision for w in c.history[-2:]] == ["short", "short"], c.history
    assert c.history[-1].saturated == 0.0 and c.level == 6
    c.demand(now=now, waiting=True)  # the next batch
    now = window(now, slot_s=4.0)  # 1.5 a second at level 6: the raise stays
    assert c.history[-1].decision == "grow" and c.level == 9
    # Waiting for part of a window is not enough: a quarter of it (under `saturated`) is short.
    c.demand(now=now + 10.0, waiting=False)
    window(now, slot_s=1.0, failed=True)
    assert c.history[-1].decision == "short" and c.history[-1].saturated == 0.25
    assert c.level == 9


def test_a_synchronous_loop_settles_where_a_long_collection_does() -> None:
    """Batches with idle time between them: each batch's drain runs below the level, fewer and
    fewer samples in their episode, each faster than at the level; counted, those windows read
    as throughput the level did not give. The level settles at the knee as in
    test_it_grows_while_throughput_grows_and_settles_near_the_knee."""
    m = Machine(cores=12)
    c = ConcurrencyController(settings(ceiling=64), now=0.0)
    drive_batches(c, m, batches=60, size=48, idle_s=120.0)
    counted = [w.level for w in c.history if w.decision != "short"]
    tail = counted[-30:]
    assert 9 <= min(tail) and max(tail) <= 21, tail  # counted, the drains took it past 40
    assert {"short", "grow", "revert"} <= {w.decision for w in c.history}


def test_probes_above_a_level_they_never_beat_grow_rarer() -> None:
    """Every raise above 4 loses throughput, and so does every level below it: the first revert
    to 4 looks below (and comes back), then each revert to 4 in a row doubles the hold before
    the next probe (8, 16 windows, then 16 at most), so a long collection settled at its best
    level spends ever less of its time probing."""
    m = Machine(cores=4, contention=0.2)
    c = ConcurrencyController(settings(ceiling=64, start=4), now=0.0)
    drive(c, m, 3000)
    holds, run = [], 0
    for w in c.history:
        if w.decision == "hold":
            run += 1
        elif w.decision in ("revert", "grow") and run:
            holds.append(run)
            run = 0
    assert holds[:4] == [8, 16, 16, 16], holds
    decisions = [w.decision for w in c.history if w.decision not in ("warmup", "hold")]
    assert decisions[:4] == ["grow", "revert", "lower", "revert"], decisions
    assert {w.level for w in c.history[-40:]} <= {4, 6}


def test_it_finds_a_best_level_below_where_it_starts() -> None:
    """On a machine whose best is 2 samples at once (2 cores, each extra sample costing 20%),
    a controller that starts at 4 must come down: raises from 4 buy nothing, and only a probe
    below finds that 2 does as much with less crowding (and 1 does less)."""
    m = Machine(cores=2, contention=0.2)
    c = ConcurrencyController(settings(ceiling=32, start=4), now=0.0)
    drive(c, m, 1500)
    tail = [w.level for w in c.history[-30:]]
    assert tail.count(2) > len(tail) / 2, tail
    assert max(tail) <= 3, tail


def test_a_window_needs_its_samples_and_its_seconds() -> None:
    c = ConcurrencyController(ConcurrencySettings(ceiling=64, window=8, min_window_s=5.0), now=0.0)
    for i in range(7):
        assert c.finished(now=10.0 + i, slot_s=1.0, start_s=0.1, verify_s=0.5, failed=False) is None
    # Eight samples, but only 4 s since the window opened at 0: not closed yet.
    no_warmup = ConcurrencySettings(ceiling=64, window=8, min_window_s=5.0, warmup_windows=0)
    c2 = ConcurrencyController(no_warmup, now=0.0)
    c2.demand(now=0.0, waiting=True)
    for i in range(8):
        assert c2.finished(now=0.5 * i, slot_s=0.0, start_s=0.1, verify_s=0.5, failed=False) is None
    result = c2.finished(now=6.0, slot_s=1.0, start_s=0.1, verify_s=0.5, failed=False)
    assert result is not None and result.decision == "grow" and c2.level == 6


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


class Scripted(ConcurrencyController):
    """The levels a test names, one per finished sample reported (by their count), and what the
    scheduler told it. The scheduler's clock (real time) stays out of the decisions; the
    decisions themselves are the synthetic tests' above."""

    def __init__(self, start: int, ceiling: int, levels: dict[int, int]) -> None:
        super().__init__(ConcurrencySettings(ceiling=ceiling, start=start), time.monotonic())
        self.levels = levels
        self.heard: list[tuple[float, bool]] = []  # (slot_s, failed) of each finished sample

    def finished(
        self, *, now: float, slot_s: float, start_s: float, verify_s: float, failed: bool
    ) -> WindowResult | None:
        self.heard.append((slot_s, failed))
        before = self.level
        self.level = self.levels.get(len(self.heard), self.level)
        if self.level == before:
            return None
        decision = "grow" if self.level > before else "backoff"
        return WindowResult(before, 1.0, 0.1, 0.5, 0.0, 1.0, decision, self.level)


async def test_the_scheduler_holds_samples_in_their_episode_to_the_level(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """The level grows 2 -> 3 -> 4 (the ceiling) as samples finish, then drops to 2: no new
    sample starts until only one is left in its episode. The controller hears every finished
    sample with the time it held its slot, and whether samples wait for one. Each window it
    closes is logged and counted by its decision."""
    caplog.set_level(logging.INFO, logger="service.scheduler")
    failing: set[int] = set()

    def outcome(spec: SampleSpec) -> tuple[Status, float | None, int]:
        if spec.sample_index in failing:
            return Status.sandbox_error, None, 0
        return Status.ok, 1.0, 0

    runner = StepRunner(outcome)
    metrics = Metrics()
    control = Scripted(start=2, ceiling=4, levels={2: 3, 4: 4, 6: 2})
    scheduler = Scheduler(
        store, runner, lambda *a: TASKS, max_concurrent_samples=4, max_queued_samples=16,
        current_version=lambda: 0, retry_masked=0, metrics=metrics, concurrency_control=control,
    )  # fmt: skip
    await scheduler.start()
    try:
        # An idle service already shows its level (the starting one), not 0.
        assert _gauge(metrics, "rollouts_concurrency_level") == 2 == scheduler.concurrency
        assert not control.waiting
        rid = await scheduler.submit(_request(14), TASKS)
        keys = [key(rid, 0, k) for k in range(14)]
        await until(lambda: len(runner.started) == 2)
        await settle()
        assert len(runner.in_episode) == 2  # the starting level, not the ceiling
        assert control.waiting  # twelve samples wait for a slot
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
        failing.update(range(4, 6))  # two sandbox failures
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
        assert not control.waiting  # none left to start
        assert len(control.heard) == 14 and all(s >= 0 for s, _ in control.heard)
        assert [failed for _, failed in control.heard].count(True) == 2
        windows = "rollouts_concurrency_windows_total"
        assert metrics.registry.get_sample_value(windows, {"decision": "grow"}) == 2
        assert metrics.registry.get_sample_value(windows, {"decision": "backoff"}) == 1
        said = [r.getMessage() for r in caplog.records if "concurrency window" in r.getMessage()]
        assert [m.rsplit(": ", 1)[1] for m in said] == [
            "grow -> level 3", "grow -> level 4", "backoff -> level 2"
        ]  # fmt: skip
    finally:
        await scheduler.aclose()


def _gauge(metrics: Metrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name)


def test_it_raises_only_when_the_waiting_samples_can_fill_the_new_slots() -> None:
    """At a batch's tail, fewer samples wait than a raise would add: the level stays (the
    raise could not be judged by this batch, and the next one would start at an untested
    level); with enough waiting, the same window raises."""
    m = Machine(cores=12)
    for queued, decision, level in ((2, "keep", 6), (3, "grow", 9)):
        c = ConcurrencyController(settings(ceiling=64, start=6, warmup_windows=0), now=0.0)
        c.demand(now=0.0, waiting=True, queued=queued)
        now = 0.0
        while not c.history:
            now = finish(c, m, now, c.level)
        assert (c.history[-1].decision, c.level) == (decision, level)
