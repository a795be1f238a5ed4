"""Concurrency that finds its own level: how many samples may be in their episode at once.

A fixed `max_concurrent_samples` is a guess: past the machine's cores (or the engine's
batch), more samples in flight add contention, not throughput, and every sandbox start and
verification gets slower. With `--adaptive-concurrency`, that setting is a ceiling and the
level moves under it by hill climbing on what the service observes of finished samples:

- Every `window` finished samples (and at least `min_window_s` seconds) close a window: its
  throughput, its median sandbox-start and verify latency, its share of sandbox failures. Only
  samples that took their slot after the level last changed count: one that ran partly at
  another level measures neither. The throughput is the level over the mean time a sample held
  its episode slot (Little's law, true while every slot is taken: see `saturated`).
- A window counts only if samples waited for a slot for at least `saturated` of its time (the
  scheduler says when they do, `waiting`): only then was the level what held throughput back.
  A window short of work (a synchronous RL loop idling between rollouts, a batch's last samples
  draining, a service waiting for its first request) ran below its level whatever the level
  was; it decides nothing: it neither keeps nor undoes a raise, backs off, counts towards a
  hold or the warm-up, nor sets a baseline or a latency reference.
- A level that has just been raised stays raised only if the window's throughput beats the
  one before by `gain` (relative); otherwise the level goes back down and holds there for
  `hold_windows` windows before probing up again (throughput that stopped growing); each
  revert to the same level in a row doubles that hold, up to `max_hold_windows`, so a long
  collection settled at its best level pays less and less for probing above it.
- A latency cliff (the window's start or verify latency over `cliff` times the best seen at
  a lower level) or a failure share over `max_failures` cuts the level by
  `backoff`, whatever throughput says: the machine is overloaded.
- The first time a raise from a level is undone, the level is probed below instead of held:
  a level that did no better than the one under it may itself be past the machine's best (the
  start level is a guess too). Lower by `grow` (at least one), it stays lower while throughput
  keeps within `gain` of where the descent began (the same work with fewer samples crowding
  the machine), and goes on down; once lowering loses more, the level goes back and holds.
- Otherwise the level grows by `grow` (at least one), up to the ceiling, if the samples
  waiting now can fill the new slots (when the scheduler says how many wait): at a batch's
  tail, a raise could not be judged by the batch it is meant for, and the next batch would
  start at an untested level (in the admission benchmark, half its time at a level 12%
  worse than the one it came from).
- The first `warmup_windows` windows only measure: the first samples of a fresh service find
  no warm sandbox and all start at once, so their throughput is no baseline (taken as one, it
  made the first raise look like a gain).

Plain arithmetic on observations, no clock of its own and no I/O: the scheduler feeds it
finished samples and applies the level it answers (service/scheduler.py), and unit tests drive
it with synthetic numbers (tests/unit/test_concurrency_control.py).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ConcurrencySettings:
    ceiling: int
    start: int = 4
    floor: int = 1
    window: int = 12  # finished samples per window
    min_window_s: float = 5.0
    grow: float = 1.5
    backoff: float = 0.7
    gain: float = 0.05
    cliff: float = 2.5
    max_failures: float = 0.25
    hold_windows: int = 4
    max_hold_windows: int = 16
    warmup_windows: int = 1
    saturated: float = 0.75  # share of a window's time samples must wait for a slot


@dataclass
class _Window:
    opened_at: float
    samples: int = 0
    failures: int = 0
    waited_s: float = 0.0  # time samples waited for a slot, up to the last change of that
    slot_s: float = 0.0  # the time its samples held their episode slot, summed
    start_s: list[float] = field(default_factory=list)
    verify_s: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class WindowResult:
    """What one closed window measured, and the level that followed (for metrics and tests)."""

    level: int  # the level the window ran at
    throughput: float  # samples per second
    start_s: float  # median sandbox start
    verify_s: float  # median verification
    failures: float  # share of sandbox failures
    saturated: float  # share of the window's time samples waited for a slot
    decision: str  # short | warmup | grow | keep | revert | lower | hold | backoff
    next_level: int


class ConcurrencyController:
    def __init__(self, settings: ConcurrencySettings, now: float) -> None:
        self.s = settings
        self.level = max(settings.floor, min(settings.start, settings.ceiling))
        self._window = _Window(now)
        self._previous: tuple[int, float] | None = None  # (level, throughput) of the last window
        self._raised = False  # the last decision raised the level
        self._lowered = False  # the last decision lowered it (a probe below)
        self._look_down = False  # the next probe goes below
        self._reference = 0.0  # throughput where the current probe below began
        self._hold = 0  # windows left before probing up again
        self._reverts = 0  # reverts in a row to the level held now
        self._warmup = settings.warmup_windows  # windows left that set no baseline
        # The best (lowest) median latencies seen at each level: the reference for a cliff.
        self._best_start: dict[int, float] = {}
        self._best_verify: dict[int, float] = {}
        self.history: list[WindowResult] = []
        self._waiting_since: float | None = None  # samples wait for a slot since then
        self._queued: int | None = None  # how many wait, as the scheduler last said (None: unsaid)
        self._changed_at = now  # when the level last changed

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
            self._window.waited_s = self._waited(self._window, now)
            self._waiting_since = None

    def _waited(self, w: _Window, now: float) -> float:
        since = self._waiting_since
        return w.waited_s + (now - max(since, w.opened_at) if since is not None else 0.0)

    def finished(
        self, *, now: float, slot_s: float, start_s: float, verify_s: float, failed: bool
    ) -> WindowResult | None:
        """One sample finished its episode and verification; it held its episode slot for
        `slot_s`. Returns the closed window's result when this closes one (the level may then
        have changed), else None."""
        if now - slot_s < self._changed_at:
            return None  # it ran partly at another level: no measure of this one
        w = self._window
        w.samples += 1
        w.slot_s += slot_s
        w.failures += failed
        if not failed:
            w.start_s.append(start_s)
            w.verify_s.append(verify_s)
        if w.samples < self.s.window or now - w.opened_at < self.s.min_window_s:
            return None
        result = self._close(w, now)
        self._window = _Window(now)
        return result

    def _close(self, w: _Window, now: float) -> WindowResult:
        level = self.level
        seconds = max(now - w.opened_at, 1e-9)
        # Little's law: with every slot taken (a saturated window), samples finish at the level
        # over the mean time one holds its slot. Counting finishes per second instead carried
        # the noise of when a handful of samples happen to end (in a simulation, windows of 8
        # at one steady level read from 0.7x to 1.5x its rate).
        throughput = level * w.samples / max(w.slot_s, 1e-9)
        start = statistics.median(w.start_s) if w.start_s else math.inf
        verify = statistics.median(w.verify_s) if w.verify_s else math.inf
        failures = w.failures / w.samples
        saturated = min(1.0, self._waited(w, now) / seconds)
        decision = (
            self._decide(level, throughput, start, verify, failures)
            if saturated >= self.s.saturated
            else "short"
        )
        if self.level != level:
            self._changed_at = now
        if decision != "short" and start < math.inf:
            self._best_start[level] = min(self._best_start.get(level, math.inf), start)
            self._best_verify[level] = min(self._best_verify.get(level, math.inf), verify)
        result = WindowResult(
            level, throughput, start, verify, failures, saturated, decision, self.level
        )
        self.history.append(result)
        return result

    def _decide(
        self, level: int, throughput: float, start: float, verify: float, failures: float
    ) -> str:
        warming = self._warmup > 0
        self._warmup -= warming
        previous, self._previous = self._previous, (None if warming else (level, throughput))
        raised, self._raised = self._raised, False
        lowered, self._lowered = self._lowered, False
        if failures > self.s.max_failures or self._cliff(level, start, verify):
            self._set(math.floor(level * self.s.backoff))
            self._hold, self._reverts, self._look_down = self.s.hold_windows, 0, False
            return "backoff"
        if warming:
            return "warmup"
        bought_nothing = raised and throughput < previous[1] * (1 + self.s.gain)
        lost = lowered and throughput < self._reference * (1 - self.s.gain)
        if previous is not None and (bought_nothing or lost):
            # Go back; the first time a raise from here bought nothing, look below next,
            # else stay a while.
            self._set(previous[0])
            self._previous = previous
            self._reverts += 1
            self._look_down = bought_nothing and self._reverts == 1
            self._hold = (
                0
                if self._look_down
                else min(self.s.hold_windows * 2 ** (self._reverts - 1), self.s.max_hold_windows)
            )
            return "revert"
        if raised or lowered:
            self._reverts = 0  # a probe kept: a new level, whose probes start afresh
        if lowered:  # as much done with fewer samples: lower still
            self._reference = max(self._reference, throughput)
            self._look_down = True
        if self._hold > 0:
            self._hold -= 1
            return "hold"
        if self._look_down and level > self.s.floor:
            self._look_down = False
            if not lowered:
                self._reference = throughput
            self._set(min(level - 1, math.floor(level / self.s.grow)))
            self._lowered = True
            return "lower"
        self._look_down = False
        higher = min(self.s.ceiling, max(level + 1, math.ceil(level * self.s.grow)))
        if level >= self.s.ceiling or (self._queued is not None and self._queued < higher - level):
            return "keep"
        self._set(higher)
        self._raised = True
        return "grow"

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
