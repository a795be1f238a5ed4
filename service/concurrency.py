"""Concurrency that finds its own level: how many samples may be in their episode at once.

A fixed `max_concurrent_samples` is a guess: past the machine's cores (or the engine's
batch), more samples in flight add contention, not throughput, and every sandbox start and
verification gets slower. With `--adaptive-concurrency`, that setting is a ceiling and the
level moves under it by hill climbing on what the service observes of finished samples:

- A window is a cohort: the next `window` samples to take a slot (over at least
  `min_window_s` seconds), closed once the last of them has finished: its throughput, its
  median sandbox-start and verify latency, its share of sandbox failures. The throughput is the
  level over the mean time a sample held its episode slot (Little's law, true while every slot
  is taken: see `saturated`). Windows are chosen by when their samples started, not by when
  they finished: the first samples to finish after a change of level are the quick ones (the
  slow ones are still running, or started before the change and measure neither level), and
  windows of them read a just-raised level as 1.5x faster than it was, on average (in a
  simulation with exponentially distributed episode times); on a machine where every level
  did as well, that walked the level up to the ceiling. A change of level drops the windows
  under way.
- A window counts only if samples waited for a slot for at least `saturated` of its time (the
  scheduler says when they do, `waiting`): only then was the level what held throughput back.
  A window short of work (a synchronous RL loop idling between rollouts, a batch's last samples
  draining, a service waiting for its first request) ran below its level whatever the level
  was; it decides nothing: it neither keeps nor undoes a probe, backs off, counts towards a
  hold or the warm-up, nor sets a baseline or a latency reference.
- The first window after no sample waited for a slot (the queue emptied: a synchronous RL
  loop's next batch, or a dip in a stream of requests, where the level is not what holds
  throughput back anyway) is a ramp: its samples start together into a machine whose
  verifications have not yet piled up behind them, so they hold their slots for less than
  they will once it has (in the admission benchmark, 2.21 samples/s at level 4 against 1.57
  to 1.82 for the windows after it; in the unit tests' batches, up to twice the level's rate,
  which kept raises past the machine's best). It decides nothing, as a short window does.
- A level's throughput pools its last `pool_windows` windows, with that figure's standard
  error: the larger of what the spread of its samples' slot times says (in that simulation,
  single windows of 12 at level 4 read from 0.8x to 2.2x its rate) and what the spread
  between windows at one level says, learnt from every level's windows (`window_noise`
  until they show it): the machine's load drifts between windows, so they differ by more than
  their samples do. A level needs `settle_windows` windows before a raise from it. A probe (a
  raise, or a step below) is judged window by window against the level it came from, until
  the evidence tells (`_verdict`). A raise stays when it beats that level by `gain` and by
  more than `confidence` standard errors of the two figures' ratio: more samples at once
  crowd every sample, so a level above must show what it buys. It goes back when even that
  margin above its throughput would fall short of `gain`. A step below stays when it keeps
  within `gain` of where the descent began: as much done with less crowding; it goes back
  when it is behind by more than `gain` and by more than the margin. A probe the evidence has
  not told after `probe_windows` windows goes back. So a probe that costs much is undone
  after one window, and one that costs little runs until its cost is told from the noise.
  One that costs much beyond doubt is undone sooner: its window is judged once early, when a
  third of it has finished, and closed then where even `early_confidence` standard errors
  above its throughput fall short (`_lost`; in the admission benchmark, a whole window at one
  sample at a time, 0.7 of level two's rate, cost its round about 4% of its throughput).
- A level gone back to holds for `hold_windows` windows before probing up again; each revert
  to the same level in a row doubles that hold, up to `max_hold_windows`, so a long collection
  settled at its best level pays less and less for probing above it.
- A latency cliff (the window's start or verify latency over `cliff` times the best seen at
  a lower level) or a failure share over `max_failures` cuts the level by
  `backoff`, whatever throughput says: the machine is overloaded.
- The first time a raise from a level is undone, the level is probed below instead of held:
  a level that did no better than the one above it may itself be past the machine's best (the
  start level is a guess too). Lower by `grow` (at least one): where it did more than where
  the descent began, by `gain`, it goes on down; where it did as much, it stays and holds
  (as good, with less crowding: going lower still cost a whole window at half the rate on a
  two-core machine).
- Otherwise the level grows by `grow` (at least one), up to the ceiling.
- A probe starts only while a window's worth of samples wait for a slot (and enough to fill
  the new slots), when the scheduler says how many wait: at a batch's tail it could not be
  judged by the batch it is meant for, and the next batch would start at an untested level
  (in the admission benchmark, half its time at a level 12% worse than the one it came from).
- It starts at the sandbox machines' cores where the service knows them (the Docker Engine's
  CPUs, or the Ray cluster's sandbox slots: `ConcurrencySettings.starting_at`), else at
  `start`: where the sandboxes' own work holds throughput back, more samples than cores stop
  adding to it, and where the policy does, the climb from there is shorter.
- The first `warmup_windows` windows only measure (a failure share over `max_failures` still
  backs off): the first samples of a fresh service find
  no warm sandbox and all start at once, so their throughput is no baseline (taken as one, it
  made the first raise look like a gain).

Plain arithmetic on observations, no clock of its own and no I/O: the scheduler tells it which
samples take a slot and which finish, and applies the level it answers (service/scheduler.py);
unit tests drive it with synthetic machines (tests/unit/test_concurrency_control.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable
from dataclasses import dataclass, field

HISTORY = 1024  # closed windows the controller keeps for metrics and tests (at least)


@dataclass(frozen=True)
class ConcurrencySettings:
    ceiling: int
    start: int = 4  # where the machines' cores are unknown (`starting_at`)
    floor: int = 1
    window: int = 12  # samples per window
    min_window_s: float = 5.0
    grow: float = 1.5
    backoff: float = 0.7
    gain: float = 0.05
    cliff: float = 2.5
    max_failures: float = 0.25
    hold_windows: int = 4
    max_hold_windows: int = 16
    warmup_windows: int = 1
    confidence: float = 1.0  # standard errors a probe's verdict must clear
    early_confidence: float = 3.0  # and its early verdict on a third of a window (`_lost`)
    window_noise: float = 0.05  # the spread of a window's figure assumed before windows show it
    settle_windows: int = 2  # windows at a level before a raise from it
    pool_windows: int = 16  # the windows a level's evidence pools
    probe_windows: int = 4  # the windows a probe may take to tell
    saturated: float = 0.75  # share of a window's time samples must wait for a slot

    @classmethod
    def starting_at(cls, cores: int | None, *, ceiling: int) -> ConcurrencySettings:
        """Settings that start at `cores`, the CPUs of the machines the sandboxes run on (None:
        unknown, `start`). The level climbs from where it starts by `grow` a probe, each
        judged by windows of `window` samples: where episodes wait on the policy most of their
        time, a climb from 4 to a hundred takes eight kept raises, minutes each while few
        samples are in flight; where the sandboxes' own work holds throughput back, more
        samples than cores share them (in the admission benchmark, on 2 cores, 2 did best)."""
        return cls(ceiling=ceiling) if cores is None else cls(ceiling=ceiling, start=cores)


@dataclass
class _Window:
    """The samples that took a slot one after another at one level: a cohort, judged once the
    last of them has finished."""

    level: int
    opened_at: float  # its first sample took a slot
    ramp: bool = False  # opened as work came back after none waited (`demand`)
    started: int = 0
    samples: int = 0  # finished
    failures: int = 0
    slot_s: float = 0.0  # the time its samples held their episode slot, summed
    slot_sq: float = 0.0  # and its squares (for the throughput's standard error)
    start_s: list[float] = field(default_factory=list)
    verify_s: list[float] = field(default_factory=list)


@dataclass
class _Evidence:
    """The last windows judged at one level, pooled: its throughput by Little's law (with every
    slot taken, samples finish at the level over the mean time one holds its slot) and that
    figure's relative standard error. Finishes counted per second instead carried the noise of
    when a handful of samples happen to end (in a simulation, windows of 8 at one steady level
    read from 0.7x to 1.5x its rate)."""

    level: int
    windows: list[tuple[int, float, float]] = field(default_factory=list)  # n, sum, squares

    @classmethod
    def of(cls, w: _Window) -> _Evidence:
        e = cls(w.level)
        e.add(w, 1)
        return e

    def add(self, w: _Window, keep: int) -> None:
        self.windows = [*self.windows, (w.samples, w.slot_s, w.slot_sq)][-keep:]

    @property
    def throughput(self) -> float:
        n = sum(k for k, _, _ in self.windows)
        return self.level * n / max(sum(s for _, s, _ in self.windows), 1e-12)

    @property
    def logs(self) -> list[float]:
        """Each window's throughput, as a logarithm."""
        return [math.log(self.level * n / max(s, 1e-12)) for n, s, _ in self.windows]

    def error(self, spread: float, window: int) -> float:
        """The throughput's relative standard error: the larger of what the spread of its
        samples' slot times says and what `spread`, the spread of one window's figure about
        its level's, says of the mean of its windows. The windows of a level differ by more
        than their samples do (the machine's load drifts between them: in the admission
        benchmark, windows of 12 at level 4 read 1.70 to 2.22 samples/s). A part of a window
        (`_lost`) counts as that share of one: a third of its samples spread more than all of
        them do."""
        n = sum(k for k, _, _ in self.windows)
        if n < 2:
            return math.inf
        total = sum(s for _, s, _ in self.windows)
        squares = sum(q for _, _, q in self.windows)
        mean = total / n
        variance = max(0.0, (squares - n * mean * mean) / (n - 1))
        within = math.sqrt(variance / n) / max(mean, 1e-12)
        windows = sum(min(1.0, k / window) for k, _, _ in self.windows)
        return max(within, spread / math.sqrt(windows))


@dataclass(frozen=True)
class WindowResult:
    """What one closed window measured, and the level that followed (for metrics and tests)."""

    level: int  # the level the window ran at
    throughput: float  # samples per second
    start_s: float  # median sandbox start
    verify_s: float  # median verification
    failures: float  # share of sandbox failures
    saturated: float  # share of the window's time samples waited for a slot
    decision: str  # short | ramp | warmup | grow | keep | measure | revert | lower | hold | backoff
    next_level: int


class ConcurrencyController:
    def __init__(self, settings: ConcurrencySettings, now: float) -> None:
        self.s = settings
        self.level = max(settings.floor, min(settings.start, settings.ceiling))
        self._filling: _Window | None = None  # the window new samples join
        self._member: dict[Hashable, _Window] = {}  # the window of each sample in its episode
        self._here = _Evidence(self.level)  # what the level measured since it was set
        self._probe: str | None = None  # "raise" | "lower": the level is on probation
        self._reference = self._here  # what a probe must beat (or keep within gain of)
        self._back = self._here  # where a probe that fails goes back to
        self._look_down = False  # the next probe goes below
        # Squared deviations of windows' log throughput from their level's mean, and their
        # degrees of freedom: the spread of one window's figure (`_spread`).
        self._deviations = 0.0
        self._freedom = 0
        self._hold = 0  # windows left before probing up again
        self._reverts = 0  # reverts in a row to the level held now
        self._warmup = settings.warmup_windows  # windows left that set no baseline
        # The best (lowest) median latencies seen at each level: the reference for a cliff.
        self._best_start: dict[int, float] = {}
        self._best_verify: dict[int, float] = {}
        self.history: list[WindowResult] = []
        self._waiting_since: float | None = None  # samples wait for a slot since then
        self._waits: list[tuple[float, float]] = []  # earlier spans in which samples waited
        self._queued: int | None = None  # how many wait, as the scheduler last said (None: unsaid)
        self._ramp_next = False  # the next window opened is a ramp

    @property
    def waiting(self) -> bool:
        """Whether samples wait for a slot, as the scheduler last said."""
        return self._waiting_since is not None

    def demand(self, *, now: float, waiting: bool, queued: int | None = None) -> None:
        """Whether samples wait for a slot from `now` on, and how many when known (the
        scheduler says so whenever its queue changes; the same `waiting` again only updates
        the count)."""
        self._queued = queued
        if waiting == self.waiting:
            return
        if waiting:
            self._waiting_since = now
        else:
            assert self._waiting_since is not None
            self._waits.append((self._waiting_since, now))
            self._waiting_since = None
            # No more samples join the windows under way (they drain), and the next window is
            # the ramp of the work that comes next. (One whose samples are all done already,
            # short of its count, is dropped: it could never close.)
            self._filling = None
            self._ramp_next = True

    def _waited(self, since: float, now: float) -> float:
        """How long samples waited for a slot between `since` and `now`."""
        spans = list(self._waits)
        if self._waiting_since is not None:
            spans.append((self._waiting_since, now))
        return sum(max(0.0, min(end, now) - max(begin, since)) for begin, end in spans)

    def started(self, sample: Hashable, *, now: float) -> None:
        """`sample` took an episode slot at `now`: it joins the window being filled."""
        w = self._filling
        if w is None or self._full(w, now):
            w = self._filling = _Window(self.level, now, ramp=self._ramp_next)
            self._ramp_next = False
        w.started += 1
        self._member[sample] = w

    def _full(self, w: _Window, now: float) -> bool:
        return w.started >= self.s.window and now - w.opened_at >= self.s.min_window_s

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
        """`sample` finished its episode and verification; it held its episode slot for
        `slot_s`. Returns the closed window's result when this closes one (the level may then
        have changed), else None."""
        w = self._member.pop(sample, None)
        if w is None:
            return None  # it took its slot before the level last changed: no measure of this one
        w.samples += 1
        w.slot_s += slot_s
        w.slot_sq += slot_s * slot_s
        w.failures += failed
        if not failed:
            w.start_s.append(start_s)
            w.verify_s.append(verify_s)
        return self._settle(w, now)

    def forget(self, sample: Hashable, *, now: float) -> WindowResult | None:
        """`sample` left its slot saying nothing of the machine's load (cancelled, or the policy
        failed first): its window no longer waits for it. Returns what `finished` does."""
        w = self._member.pop(sample, None)
        if w is None:
            return None
        w.started -= 1
        return self._settle(w, now)

    def _settle(self, w: _Window, now: float) -> WindowResult | None:
        """After one of `w`'s samples is done: it takes no more samples once it has its count
        and its seconds, or its count and every one of them is done (no sample took a slot
        since: left filling, it would never close); closed once complete."""
        counted = w.started >= self.s.window and w.samples == w.started
        if w is self._filling and (self._full(w, now) or counted):
            self._filling = None  # the next sample to take a slot opens the next window
        return self._close(w, now) if self._complete(w) or self._lost(w, now) else None

    def _lost(self, w: _Window, now: float) -> bool:
        """Whether a probe has lost beyond doubt on the first samples of its window to finish:
        judged once, when a third of the window has finished (if samples waited for a slot so
        far, as a window must), by `early_confidence` standard errors, not `confidence`. So
        few samples' own spread misleads where episode times are heavy-tailed: at one
        standard error, early verdicts on such a machine (a simulation, exponential episode
        times) undid probes below that did better, and one look at every finish would give
        the noise a chance each time."""
        if (
            self._probe is None
            or w.level != self.level
            or w.ramp
            or w.samples != max(2, self.s.window // 3)
            or self._waited(w.opened_at, now) < self.s.saturated * (now - w.opened_at)
        ):
            return False
        pooled = self._here
        self._here = _Evidence(pooled.level, list(pooled.windows))
        self._here.add(w, self.s.pool_windows)
        probe = self._probe
        lost = self._behind(probe, self.s.early_confidence) and not self._kept(probe)
        self._here = pooled
        return lost

    def _complete(self, w: _Window) -> bool:
        """No more samples join it, and every one that did has finished."""
        return w is not self._filling and w.samples == w.started and w.samples > 0

    def _close(self, w: _Window, now: float) -> WindowResult:
        level = w.level  # the level now: a change drops the windows under way
        seconds = max(now - w.opened_at, 1e-9)
        start = statistics.median(w.start_s) if w.start_s else math.inf
        verify = statistics.median(w.verify_s) if w.verify_s else math.inf
        failures = w.failures / w.samples
        saturated = min(1.0, self._waited(w.opened_at, now) / seconds)
        whole = self._complete(w)  # else a probe's window closed early on a loss (`_lost`)
        if not whole:
            self._member = {k: m for k, m in self._member.items() if m is not w}
            if self._filling is w:
                self._filling = None
        if w.ramp:
            decision = "ramp"
        elif saturated < self.s.saturated:
            decision = "short"
        else:
            decision = self._decide(w, start, verify, failures, whole)
        if self.level != level:
            # Samples in their episode now ran partly at the old level: they measure neither.
            self._member.clear()
            self._filling = None
        if whole and decision not in ("short", "ramp") and start < math.inf:
            self._best_start[level] = min(self._best_start.get(level, math.inf), start)
            self._best_verify[level] = min(self._best_verify.get(level, math.inf), verify)
        live = [*self._member.values(), *([self._filling] if self._filling else [])]
        oldest = min((m.opened_at for m in live), default=now)
        self._waits = [span for span in self._waits if span[1] > oldest]
        result = WindowResult(
            level, _Evidence.of(w).throughput, start, verify, failures, saturated, decision,
            self.level,
        )  # fmt: skip
        self.history.append(result)
        if len(self.history) > 2 * HISTORY:
            del self.history[:-HISTORY]
        return result

    def _decide(self, w: _Window, start: float, verify: float, failures: float, whole: bool) -> str:
        """`whole`: every sample of `w` finished; else a probe's window that `_lost` closed
        early, which only goes back (its few samples' failures, latencies and spread are not
        a window's)."""
        level = w.level
        warming = self._warmup > 0
        self._warmup -= warming
        if whole and (failures > self.s.max_failures or self._cliff(level, start, verify)):
            self._move(math.floor(level * self.s.backoff))
            self._probe = None
            self._hold, self._reverts, self._look_down = self.s.hold_windows, 0, False
            return "backoff"
        if warming:
            return "warmup"
        if whole:
            self._note_spread(w)
        self._here.add(w, self.s.pool_windows)
        probe, self._probe = self._probe, None
        if probe is not None:
            verdict = self._verdict(probe)
            if verdict is None:
                self._probe = probe
                return "measure"
            if not verdict:
                # Go back; the first time a raise from there bought nothing, look below next,
                # else stay a while.
                self._set(self._back.level)
                self._here = self._back
                self._reverts += 1
                self._look_down = (
                    probe == "raise" and self._reverts == 1 and self.level > self.s.floor
                )
                doubled = self.s.hold_windows * 2 ** (self._reverts - 1)
                self._hold = 0 if self._look_down else min(doubled, self.s.max_hold_windows)
                return "revert"
            self._reverts = 0  # a probe kept: a new level, whose probes start afresh
            if probe == "lower":
                # More done with fewer samples: the best may lie lower still. As much done:
                # this level is as good, with less crowding; it holds, as a revert does.
                self._look_down = self._here.throughput > self._reference.throughput * (
                    1 + self.s.gain
                )
                self._hold = 0 if self._look_down else self.s.hold_windows
        if self._hold > 0:
            self._hold -= 1
            return "hold"
        # A probe is judged by the next `window` samples to take a slot: with fewer waiting (a
        # batch's tail), it would be judged by the next batch, which would start at an untested
        # level (in the admission benchmark, a raise decided at a tail ran half the next batch
        # at a level 12% worse; in a simulation of it, a probe below ran all of it at half the
        # rate).
        queued = math.inf if self._queued is None else self._queued
        if self._look_down and level > self.s.floor:
            if queued < self.s.window:
                return "keep"  # the probe below waits for a batch that can judge it
            self._look_down = False
            if self._reference.level <= level:  # a descent starts here (none is under way)
                self._reference = self._here
            self._back = self._here
            self._move(min(level - 1, math.floor(level / self.s.grow)))
            self._probe = "lower"
            return "lower"
        self._look_down = False
        higher = min(self.s.ceiling, max(level + 1, math.ceil(level * self.s.grow)))
        if (
            level >= self.s.ceiling
            or queued < max(self.s.window, higher - level)
            or len(self._here.windows) < self.s.settle_windows
        ):
            return "keep"
        self._reference = self._back = self._here
        self._move(higher)
        self._probe = "raise"
        return "grow"

    def _verdict(self, probe: str) -> bool | None:
        """Whether the probed level stays, None while its windows so far cannot tell (the
        rules in the module's docstring); a probe not told after `probe_windows` windows goes
        back: a level is kept on evidence."""
        kept, behind = self._kept(probe), self._behind(probe, self.s.confidence)
        verdict = True if kept else (False if behind else None)
        if verdict is None and len(self._here.windows) >= self.s.probe_windows:
            return False
        return verdict

    def _against_reference(self) -> tuple[float, float]:
        """The level's throughput over the reference's, and that ratio's standard error."""
        here, ref = self._here, self._reference
        ratio = here.throughput / max(ref.throughput, 1e-12)
        spread = self._spread()
        errors = here.error(spread, self.s.window), ref.error(spread, self.s.window)
        return ratio, math.hypot(*errors) * ratio

    def _kept(self, probe: str) -> bool:
        """Whether the probed level has done what it must: a raise, beat the reference by
        `gain` and by `confidence` standard errors; a step below, as much (within `gain`)."""
        ratio, error = self._against_reference()
        if probe == "raise":
            return ratio > 1 + self.s.gain and ratio - self.s.confidence * error > 1
        return ratio >= 1 - self.s.gain

    def _behind(self, probe: str, confidence: float) -> bool:
        """Whether even `confidence` standard errors above the probed level's throughput fall
        short of what it must do: a raise, `gain` over the reference; a step below, as much."""
        ratio, error = self._against_reference()
        return ratio + confidence * error < (1 + self.s.gain if probe == "raise" else 1)

    def _note_spread(self, w: _Window) -> None:
        """A window's deviation from the windows before it at its level (Welford's update)."""
        logs = self._here.logs
        if logs:
            [x] = _Evidence.of(w).logs
            mean = statistics.fmean(logs)
            self._deviations += len(logs) / (len(logs) + 1) * (x - mean) ** 2
            self._freedom += 1

    def _spread(self) -> float:
        """The spread of one window's figure about its level's: what the windows seen so far
        show, with `window_noise` counted as two windows' worth before them."""
        prior = 2 * self.s.window_noise**2
        return math.sqrt((self._deviations + prior) / (self._freedom + 2))

    def _move(self, level: int) -> None:
        """A new level: what the old one measured says nothing of it."""
        self._set(level)
        self._here = _Evidence(self.level)

    def _cliff(self, level: int, start: float, verify: float) -> bool:
        """The window's latencies against the best seen at a lower level (where the machine was
        less crowded); no reference yet: no cliff."""
        low = [lv for lv in self._best_start if lv < level]
        if not low:
            return False
        best_start = min(self._best_start[lv] for lv in low)
        best_verify = min(self._best_verify[lv] for lv in low)
        return start > self.s.cliff * best_start or verify > self.s.cliff * best_verify

    def _set(self, level: int) -> None:
        self.level = max(self.s.floor, min(self.s.ceiling, level))
