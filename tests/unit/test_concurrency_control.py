"""The concurrency controller (service/concurrency.py) driven by a synthetic machine: throughput and
latencies as functions of the level, fed as finished samples on a clock of the test's own."""

from __future__ import annotations

import itertools
import logging
import math
import random
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path

import pytest
from live_service import EXAMPLES, Runner, Server, make_settings
from scheduler_fakes import StepRunner, key, running_scheduler, settle, tid, until

from sandboxes.tasks import load_tasks
from service.concurrency import ConcurrencyController, ConcurrencySettings, WindowResult
from service.metrics import Metrics
from service.sample import SampleSpec
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


class Feed:
    """Samples through the controller on the test's clock, first in first out: each takes a
    slot (`started`) while fewer than the level are in their episode, and the oldest finishes
    after the machine's time between finishes at the number running."""

    def __init__(self, c: ConcurrencyController, now: float = 0.0) -> None:
        self.c = c
        self.now = now
        self.running: deque[tuple[int, float]] = deque()  # (sample, when it took its slot)
        self._ids = itertools.count()
        self.finished = 0

    def fill(self, most: float = math.inf) -> None:
        """Start samples up to the level (at most `most` in their episode)."""
        while len(self.running) < min(self.c.level, most):
            sample = next(self._ids)
            self.running.append((sample, self.now))
            self.c.started(sample, now=self.now)

    def finish(self, m: Machine) -> WindowResult | None:
        running = len(self.running)
        rate = m.throughput(running)
        self.now += 1.0 / rate
        sample, took = self.running.popleft()
        result = self.c.finished(
            sample,
            now=self.now,
            slot_s=self.now - took,
            start_s=m.start_s(running),
            verify_s=m.work * max(1.0, running / m.cores),
            failed=m.failing(self.finished),
        )
        self.finished += 1
        return result


def drive(c: ConcurrencyController, m: Machine, samples: int, feed: Feed | None = None) -> Feed:
    """Feed `samples` finished samples at the machine's rate for the controller's level, more
    samples waiting for a slot all along (a long collection)."""
    feed = feed or Feed(c)
    c.demand(now=feed.now, waiting=True)
    for _ in range(samples):
        feed.fill()
        feed.finish(m)
    return feed


def drive_batches(
    c: ConcurrencyController, m: Machine, batches: int, size: int, idle_s: float
) -> None:
    """A synchronous RL loop: a batch of `size` samples, then `idle_s` with none (training). A
    batch's samples wait for a slot until its last ones start; those then drain, fewer and
    fewer in their episode."""
    feed = Feed(c)
    for _ in range(batches):
        left = size
        while left or feed.running:
            before = len(feed.running)
            feed.fill(most=before + left)
            left -= len(feed.running) - before
            c.demand(now=feed.now, waiting=left > 0, queued=left)
            feed.finish(m)
        feed.now += idle_s


class SharedMachine:
    """A machine shared the way a CPU is: `cores` samples run at full speed, more share them
    (each extra one costing every sample `contention`), and each sample's work is drawn at
    random with a coefficient of variation `cv` (agent episodes differ: some take one turn,
    some twenty). An event-driven simulation, seeded: the same run every time."""

    def __init__(self, cores: int, contention: float, cv: float, seed: int) -> None:
        self.cores, self.contention = cores, contention
        self.rng = random.Random(seed)
        self.shape = 1 / cv**2

    def run(self, c: ConcurrencyController, samples: int) -> dict[int, float]:
        """Time spent at each number of samples in their episode, a long collection."""
        now, done, ids = 0.0, 0, itertools.count()
        active: list[list[float]] = []  # [work left, took its slot, sample]
        at: dict[int, float] = {}
        c.demand(now=0.0, waiting=True)
        while done < samples:
            while len(active) < c.level:
                sample = next(ids)
                active.append([self.rng.gammavariate(self.shape, 1 / self.shape), now, sample])
                c.started(sample, now=now)
            n = len(active)
            speed = min(1.0, self.cores / n) / (1 + self.contention * max(0, n - self.cores))
            first = min(active, key=lambda a: a[0])
            dt = first[0] / speed
            at[n] = at.get(n, 0.0) + dt
            now += dt
            for a in active:
                a[0] -= dt * speed
            active.remove(first)
            done += 1
            c.finished(first[2], now=now, slot_s=now - first[1], start_s=0.1, verify_s=0.1,
                       failed=False)  # fmt: skip
        return at


def median_level(at: dict[int, float]) -> int:
    total, acc = sum(at.values()), 0.0
    for level in sorted(at):
        acc += at[level]
        if acc >= total / 2:
            return level
    raise AssertionError("unreachable")


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
    feed = drive(c, m, 1500)
    before = c.level
    assert before >= 12
    broken["on"] = True
    drive(c, m, 80, feed)
    during = c.level
    assert during <= before * 0.5
    broken["on"] = False
    drive(c, m, 1500, feed)
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
    feed = Feed(c)
    while not c.history:
        feed.fill()
        feed.finish(cold)
    assert c.history[0].decision == "warmup" and c.history[0].next_level == 4
    drive(c, m, 600, feed)
    tail = [w.level for w in c.history[-30:]]
    assert min(tail) == 4 and max(tail) <= 6, tail  # at the knee, probing one step above


def test_a_window_short_of_work_decides_nothing() -> None:
    """A window in which samples seldom waited for a slot (a batch's last samples draining, an
    RL loop training between rollouts) ran below its level whatever the level was: its
    throughput, latencies and failures neither undo the raise before it nor back off. The next
    window in which samples waited judges the raise."""
    s = settings(ceiling=64, window=4, warmup_windows=0, settle_windows=1)
    c = ConcurrencyController(s, now=0.0)

    samples = itertools.count()

    def window(now: float, slot_s: float, start_s: float = 0.1, failed: bool = False) -> float:
        """Four samples, one finishing every 10 s, each having held its slot `slot_s`."""
        for _ in range(4):
            now += 10.0
            sample = next(samples)
            c.started(sample, now=now - slot_s)
            c.finished(sample, now=now, slot_s=slot_s, start_s=start_s, verify_s=0.5, failed=failed)
        return now

    c.demand(now=0.0, waiting=True)
    now = window(0.0, slot_s=4.0)  # level 4, a sample every second a slot: 1 a second
    assert c.history[-1].decision == "grow" and c.level == 6
    c.demand(now=now, waiting=False)  # the batch drains
    now = window(now, slot_s=8.0)  # 0.75 a second at level 6: had it counted, a revert
    now = window(now, slot_s=8.0, start_s=5.0, failed=True)  # had it counted, a back-off
    # (The first window opened after none waited is the next work's ramp: it decides nothing
    # either.)
    assert [w.decision for w in c.history[-2:]] == ["ramp", "short"], c.history
    assert c.history[-1].saturated == 0.0 and c.level == 6
    c.demand(now=now, waiting=True)  # the next batch
    now = window(now, slot_s=4.0)  # 1.5 a second at level 6: the raise stays
    assert c.history[-1].decision == "grow" and c.level == 9
    # Waiting for part of a window is not enough: a quarter of it (under `saturated`) is short.
    four = [next(samples) for _ in range(4)]
    for sample in four:
        c.started(sample, now=now)
    c.demand(now=now + 10.0, waiting=False)  # the queue empties 10 s into the window
    for k, sample in enumerate(four, 1):
        c.finished(sample, now=now + 10.0 * k, slot_s=10.0 * k, start_s=0.1, verify_s=0.5,
                   failed=True)  # fmt: skip
    assert c.history[-1].decision == "short" and c.history[-1].saturated == 0.25
    assert c.level == 9


def test_a_synchronous_loop_settles_where_a_long_collection_does() -> None:
    """Batches with idle time between them. Each batch's drain runs below the level, fewer and
    fewer samples in their episode, each faster than at the level: counted, those windows read
    as throughput the level did not give. Each batch's first window (its ramp) starts all its
    samples together into a machine with nothing yet behind them, and reads up to twice the
    level's rate (24.4 samples/s at 14, which does 11.3): counted, the ramps kept a raise to
    21, past the knee. The level settles at the knee as in
    test_it_grows_while_throughput_grows_and_settles_near_the_knee."""
    m = Machine(cores=12)
    c = ConcurrencyController(settings(ceiling=64), now=0.0)
    drive_batches(c, m, batches=60, size=48, idle_s=120.0)
    counted = [w.level for w in c.history if w.decision not in ("short", "ramp")]
    tail = counted[-30:]
    assert 9 <= min(tail) and max(tail) <= 14, tail  # counted, the drains took it past 40
    assert {"short", "ramp", "grow"} <= {w.decision for w in c.history}


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
    decisions = [w.decision for w in c.history if w.decision not in ("warmup", "hold", "keep")]
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


def raise_probed(m: Machine) -> tuple[ConcurrencyController, int]:
    """A controller at 4 whose first window raises it to 6 on `m`, driven until the probe's
    first verdict: it, and how many samples that started at 6 finished by then."""
    s = settings(ceiling=64, start=4, warmup_windows=0, settle_windows=1)
    c = ConcurrencyController(s, now=0.0)
    feed = drive(c, m, 0)
    drive_until_a_window(c, m, feed)
    assert (c.history[-1].decision, c.level) == ("grow", 6)
    before = max(sample for sample, _ in feed.running)  # started at 4: they measure neither
    probed = 0
    while len(c.history) == 1:
        feed.fill()
        probed += feed.running[0][0] > before
        feed.finish(m)
    return c, probed


def test_a_probe_that_has_lost_beyond_doubt_goes_back_before_its_window_is_done() -> None:
    """A raise to 6 on a machine whose best is 4 (each sample past 4 costs every sample 20%)
    loses 29%: the first third of its window to finish says so by more than three standard
    errors, and it goes back without waiting for the rest of the window at the worse level."""
    c, probed = raise_probed(Machine(cores=4, contention=0.2))
    assert (c.history[-1].decision, c.level) == ("revert", 4)
    assert probed == c.s.window // 3, probed


def test_a_probe_that_may_have_done_as_well_waits_for_its_whole_window() -> None:
    """A raise on a machine where every level does as well: its first third reads no gain, but
    no loss beyond doubt either, so its window runs to its end (and on until the evidence
    tells), as a probe's window did before early verdicts."""
    c, probed = raise_probed(Machine(cores=2, contention=0.0))
    assert c.history[-1].decision in ("measure", "revert"), c.history[-1]
    assert probed >= c.s.window, probed


def test_a_revert_to_the_floor_holds() -> None:
    """At the floor there is nothing below to look at: a raise from it that bought nothing
    holds there as any revert does, instead of probing above again at once."""
    m = Machine(cores=1, contention=0.2)
    c = ConcurrencyController(settings(ceiling=8, start=1, settle_windows=1), now=0.0)
    drive(c, m, 400)
    decisions = [w.decision for w in c.history if w.decision not in ("warmup", "keep")]
    first = decisions.index("revert")
    assert decisions[first + 1 : first + 1 + c.s.hold_windows] == ["hold"] * c.s.hold_windows


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_varied_episodes_do_not_walk_the_level_up(seed: int) -> None:
    """Episode times as varied as exponential ones. Where every level past the cores does as
    well, or worse (2 cores, each sample past them costing 20%), the level must stay within a
    step or two of the cores, and at them where more costs throughput. Windows of the first
    samples to finish after a raise (the quick ones) read every raise as a gain: that walked
    the level to the ceiling of 32 here, and on the second machine cut its throughput to a
    third."""
    flat = SharedMachine(cores=2, contention=0.0, cv=1.0, seed=seed)
    c = ConcurrencyController(settings(ceiling=32), now=0.0)
    assert median_level(flat.run(c, 3000)) <= 9
    crowded = SharedMachine(cores=2, contention=0.2, cv=1.0, seed=seed)
    c = ConcurrencyController(settings(ceiling=32), now=0.0)
    assert median_level(crowded.run(c, 3000)) == 2


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_varied_episodes_still_find_a_high_level(seed: int) -> None:
    """Where every sample more is throughput more (episodes waiting on a policy server, not on
    cores), the level climbs to the ceiling through the same noise (episode times varying by
    half their mean)."""
    idle = SharedMachine(cores=1000, contention=0.0, cv=0.5, seed=seed)
    c = ConcurrencyController(settings(ceiling=32), now=0.0)
    assert median_level(idle.run(c, 3000)) == 32


def test_a_raise_must_beat_the_spread_between_windows_not_only_within_them() -> None:
    """Windows at one level differ by more than their samples do (the machine's load drifts:
    in the admission benchmark, windows of 12 at level 4 read 1.70 to 2.22 samples/s, each
    from samples that held their slots for much the same time). A raise whose first window
    reads 10% above such a level is measured on, not kept on that one window; one that keeps
    reading 10% above is kept once its windows outweigh the spread."""
    s = settings(ceiling=64, window=4, warmup_windows=0, hold_windows=0)
    c = ConcurrencyController(s, now=0.0)
    c.demand(now=0.0, waiting=True)
    samples = itertools.count()
    clock = [0.0]

    def window(throughput: float) -> str:
        """Four samples at the level, each holding its slot for what reads `throughput`."""
        slot_s = c.level / throughput
        four = [next(samples) for _ in range(4)]
        for sample in four:
            c.started(sample, now=clock[0])
        clock[0] += slot_s
        for sample in four:
            c.finished(sample, now=clock[0], slot_s=slot_s, start_s=0.1, verify_s=0.5,
                       failed=False)  # fmt: skip
        return c.history[-1].decision

    assert [window(1.70), window(2.22)] == ["keep", "grow"] and c.level == 6
    reference = 4 * 8 / (4 * 4 / 1.70 + 4 * 4 / 2.22)  # level 4's two windows, pooled
    assert window(1.10 * reference) == "measure"  # one window: within the spread
    # Two more that read the same: the raise stays, and the next level is probed.
    assert [window(1.10 * reference) for _ in range(2)] == ["measure", "grow"]
    assert c.level == 9


def test_a_window_is_the_samples_that_start_together_and_needs_its_seconds() -> None:
    """A window is the next `window` samples to take a slot (over `min_window_s` at least),
    judged once the last of them has finished, however many of the next window finish first."""
    s = ConcurrencySettings(
        ceiling=64, window=8, min_window_s=5.0, warmup_windows=0, settle_windows=1
    )
    c = ConcurrencyController(s, now=0.0)
    c.demand(now=0.0, waiting=True)
    for i in range(8):
        c.started(i, now=0.5 * i)  # eight in 3.5 s: the window takes more
    c.started(8, now=4.5)  # the ninth
    c.started(9, now=5.5)  # 5 s on: the next window's first
    c.started(10, now=5.8)
    assert c.finished(10, now=6.0, slot_s=0.2, start_s=0.1, verify_s=0.5, failed=False) is None
    for i in [0, 1, 2, 4, 5, 6, 7, 8]:  # every one but the fourth: not closed yet
        assert c.finished(i, now=10.0, slot_s=4.0, start_s=0.1, verify_s=0.5, failed=False) is None
    result = c.finished(3, now=11.0, slot_s=4.0, start_s=0.1, verify_s=0.5, failed=False)
    assert result is not None and result.decision == "grow" and c.level == 6
    assert result.throughput == 4 / 4.0  # the level over the mean slot time of its nine
    # The next window's samples took their slot at level 4 and finish under 6: they measure
    # neither, and their window is gone.
    assert c.finished(9, now=12.0, slot_s=6.5, start_s=0.1, verify_s=0.5, failed=False) is None
    assert len(c.history) == 1


def test_a_window_whose_samples_are_all_done_closes_before_its_seconds() -> None:
    """A window with its count, every sample done and no sample taking a slot since (a slot
    handed back only after the report, a queue gone quiet) closes at its last sample, short of
    `min_window_s`: left open for more samples, the next one to take a slot past its seconds
    would have sealed it, and a window sealed with nothing left to finish never closes."""
    s = ConcurrencySettings(
        ceiling=64, start=1, window=2, min_window_s=5.0, warmup_windows=0, settle_windows=1
    )
    c = ConcurrencyController(s, now=0.0)
    c.demand(now=0.0, waiting=True)
    c.started("a", now=0.0)
    assert c.finished("a", now=1.0, slot_s=1.0, start_s=0.1, verify_s=0.5, failed=False) is None
    c.started("b", now=1.0)
    result = c.finished("b", now=4.9, slot_s=3.9, start_s=0.1, verify_s=0.5, failed=False)
    assert result is not None and result.level == 1
    c.started("c", now=5.0)  # the next window's first
    assert len(c.history) == 1


def test_a_sample_that_says_nothing_of_the_load_is_not_waited_for() -> None:
    """A sample cancelled, or whose policy failed before its sandbox did anything, leaves its
    window (`forget`): the window closes on the others, and does not wait for it forever."""
    s = ConcurrencySettings(
        ceiling=64, window=4, min_window_s=0.0, warmup_windows=0, settle_windows=1
    )
    c = ConcurrencyController(s, now=0.0)
    c.demand(now=0.0, waiting=True)
    for i in range(5):
        c.started(i, now=float(i))  # the fifth opens the next window
    for i in range(3):
        assert c.finished(i, now=10.0, slot_s=4.0, start_s=0.1, verify_s=0.5, failed=False) is None
    result = c.forget(3, now=11.0)
    assert result is not None and result.decision == "grow"


# ---- the scheduler follows the level ------------------------------------------------------------


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
        self.took: list[Hashable] = []  # each sample that took a slot

    def started(self, sample: Hashable, *, now: float) -> None:
        self.took.append(sample)

    def finished(
        self,
        sample: Hashable,
        *,
        now: float,
        slot_s: float,
        start_s: float,
        verify_s: float,
        failed: bool,
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
    async with running_scheduler(
        store,
        runner,
        TASKS,
        max_concurrent_samples=4,
        retry_masked=0,
        metrics=metrics,
        concurrency_control=control,
    ) as scheduler:
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
        assert sorted(control.took) == sorted(t.split("#")[0] for t in keys)
        assert [failed for _, failed in control.heard].count(True) == 2
        windows = "rollouts_concurrency_windows_total"
        assert metrics.registry.get_sample_value(windows, {"decision": "grow"}) == 2
        assert metrics.registry.get_sample_value(windows, {"decision": "backoff"}) == 1
        said = [r.getMessage() for r in caplog.records if "concurrency window" in r.getMessage()]
        assert [m.rsplit(": ", 1)[1] for m in said] == [
            "grow -> level 3", "grow -> level 4", "backoff -> level 2"
        ]  # fmt: skip


def _gauge(metrics: Metrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name)


def test_a_probe_starts_only_while_a_window_of_samples_waits() -> None:
    """At a batch's tail, fewer samples wait than the window that would judge a probe: the level
    stays (the probe would be judged by the next batch, which would start at an untested
    level), above and below; with a window's worth waiting, the same window raises."""
    m = Machine(cores=12)
    for queued, decision, level in ((11, "keep", 6), (12, "grow", 9)):
        s = settings(ceiling=64, start=6, warmup_windows=0, settle_windows=1)
        c = ConcurrencyController(s, now=0.0)
        c.demand(now=0.0, waiting=True, queued=queued)
        drive_until_a_window(c, m)
        assert (c.history[-1].decision, c.level) == (decision, level)
    # A level whose first raise bought nothing looks below, but not at a batch's tail.
    m = Machine(cores=4, contention=0.2)
    s = settings(ceiling=64, start=4, warmup_windows=0, settle_windows=1)
    c = ConcurrencyController(s, now=0.0)
    c.demand(now=0.0, waiting=True, queued=100)
    feed = drive_until_a_window(c, m)
    drive_until_a_window(c, m, feed)
    assert [w.decision for w in c.history] == ["grow", "revert"] and c.level == 4
    c.demand(now=feed.now, waiting=True, queued=3)
    drive_until_a_window(c, m, feed)
    assert c.history[-1].decision == "keep" and c.level == 4
    c.demand(now=feed.now, waiting=True, queued=100)
    drive_until_a_window(c, m, feed)
    assert c.history[-1].decision == "lower" and c.level == 2


def drive_until_a_window(c: ConcurrencyController, m: Machine, feed: Feed | None = None) -> Feed:
    feed = feed or Feed(c)
    windows = len(c.history)
    while len(c.history) == windows:
        feed.fill()
        feed.finish(m)
    return feed


class Recording(ConcurrencyController):
    """The real controller, recording which samples the scheduler said took a slot and which
    it said to forget."""

    def __init__(self) -> None:
        s = ConcurrencySettings(ceiling=4, start=2, window=2, min_window_s=0.0)
        super().__init__(s, time.monotonic())
        self.took: list[Hashable] = []
        self.forgot: list[Hashable] = []

    def started(self, sample: Hashable, *, now: float) -> None:
        self.took.append(sample)
        super().started(sample, now=now)

    def forget(self, sample: Hashable, *, now: float) -> WindowResult | None:
        self.forgot.append(sample)
        return super().forget(sample, now=now)


async def test_the_scheduler_has_the_controller_forget_samples_that_say_nothing(
    store: Store,
) -> None:
    """Samples cancelled in their episode, or whose policy failed, held a slot but say nothing
    of the sandboxes' load: the scheduler has the controller forget them, so that no window
    waits for them forever (a window is judged once all of its samples are done)."""
    runner = StepRunner(lambda spec: (Status.policy_error, None, 0))
    control = Recording()
    async with running_scheduler(
        store, runner, TASKS, max_concurrent_samples=4, retry_masked=0, concurrency_control=control
    ) as scheduler:
        rid = await scheduler.submit(_request(3), TASKS)
        await until(lambda: len(runner.started) == 2)
        await scheduler.cancel(rid)  # two in their episode, one waiting for a slot
        cancelled = [tid(rid, 0, k) for k in range(2)]
        assert control.took == cancelled and set(cancelled) <= set(control.forgot)
        assert not control._member  # no window waits for them
        rid = await scheduler.submit(_request(2), TASKS)
        failed = [tid(rid, 0, k) for k in range(2)]
        runner.end(*(key(rid, 0, k) for k in range(2)))
        await until(lambda: scheduler.running_samples == 0 and set(failed) <= set(control.forgot))
        assert control.took == cancelled + failed and not control._member


@pytest.mark.parametrize(("cores", "level"), [(3, 3), (None, 4), (64, 16)])
def test_the_service_starts_admission_at_the_sandbox_machines_cores(
    tmp_path: Path, cores: int | None, level: int
) -> None:
    """The level a service with `--adaptive-concurrency` starts at, in its /metrics: the cores
    its components report for the sandboxes' machines, under the ceiling (16); the default
    where they are unknown."""
    settings = make_settings(tmp_path, max_concurrent_samples=16, adaptive_concurrency=True)
    with Server(settings, Runner(), sandbox_cores=cores) as server, server.client() as c:
        text = c.get("/metrics").text
    [line] = [ln for ln in text.splitlines() if ln.startswith("rollouts_concurrency_level ")]
    assert float(line.split()[1]) == level
