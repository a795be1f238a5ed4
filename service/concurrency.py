"""Concurrency that finds its own level: how many samples may be in their episode at once.

A fixed `max_concurrent_samples` is a guess: past the machine's cores (or the engine's
batch), more samples in flight add contention, not throughput, and every sandbox start and
verification gets slower. With `--adaptive-concurrency`, that setting is a ceiling and the
level moves under it by hill climbing on what the service observes of finished samples:

- Every `window` finished samples (and at least `min_window_s` seconds) close a window: its
  throughput (samples per second), its median sandbox-start and verify latency, its share of
  sandbox failures.
- A level that has just been raised stays raised only if the window's throughput beats the
  one before by `gain` (relative); otherwise the level goes back down and holds there for
  `hold_windows` windows before probing up again (throughput that stopped growing).
- A latency cliff (the window's start or verify latency over `cliff` times the best seen at
  a lower level) or a failure share over `max_failures` cuts the level by
  `backoff`, whatever throughput says: the machine is overloaded.
- Otherwise the level grows by `grow` (at least one), up to the ceiling.
- The first `warmup_windows` windows only measure: they open when the service starts, before
  any request, and their samples find no warm sandbox and all start at once, so their
  throughput is no baseline (taken as one, it made the first raise look like a gain).

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
    window: int = 8  # finished samples per window
    min_window_s: float = 5.0
    grow: float = 1.25
    backoff: float = 0.7
    gain: float = 0.05
    cliff: float = 2.5
    max_failures: float = 0.25
    hold_windows: int = 4
    warmup_windows: int = 1


@dataclass
class _Window:
    opened_at: float
    samples: int = 0
    failures: int = 0
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
    decision: str  # warmup | grow | keep | revert | backoff | hold
    next_level: int


class ConcurrencyController:
    def __init__(self, settings: ConcurrencySettings, now: float) -> None:
        self.s = settings
        self.level = max(settings.floor, min(settings.start, settings.ceiling))
        self._window = _Window(now)
        self._previous: tuple[int, float] | None = None  # (level, throughput) of the last window
        self._raised = False  # the last decision raised the level
        self._hold = 0  # windows left before probing up again
        self._warmup = settings.warmup_windows  # windows left that set no baseline
        # The best (lowest) median latencies seen at each level: the reference for a cliff.
        self._best_start: dict[int, float] = {}
        self._best_verify: dict[int, float] = {}
        self.history: list[WindowResult] = []

    def finished(
        self, *, now: float, start_s: float, verify_s: float, failed: bool
    ) -> WindowResult | None:
        """One sample finished its episode and verification. Returns the closed window's result
        when this closes one (the level may then have changed), else None."""
        w = self._window
        w.samples += 1
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
        throughput = w.samples / max(now - w.opened_at, 1e-9)
        start = statistics.median(w.start_s) if w.start_s else math.inf
        verify = statistics.median(w.verify_s) if w.verify_s else math.inf
        failures = w.failures / w.samples
        decision = self._decide(level, throughput, start, verify, failures)
        if start < math.inf:
            self._best_start[level] = min(self._best_start.get(level, math.inf), start)
            self._best_verify[level] = min(self._best_verify.get(level, math.inf), verify)
        result = WindowResult(level, throughput, start, verify, failures, decision, self.level)
        self.history.append(result)
        return result

    def _decide(
        self, level: int, throughput: float, start: float, verify: float, failures: float
    ) -> str:
        warming = self._warmup > 0
        self._warmup -= warming
        previous, self._previous = self._previous, (None if warming else (level, throughput))
        raised, self._raised = self._raised, False
        if failures > self.s.max_failures or self._cliff(level, start, verify):
            self._set(math.floor(level * self.s.backoff))
            self._hold = self.s.hold_windows
            return "backoff"
        if warming:
            return "warmup"
        if raised and previous is not None and throughput < previous[1] * (1 + self.s.gain):
            # The last raise bought nothing: go back, and stay there a while.
            self._set(previous[0])
            self._previous = previous
            self._hold = self.s.hold_windows
            return "revert"
        if self._hold > 0:
            self._hold -= 1
            return "hold"
        if level >= self.s.ceiling:
            return "keep"
        self._set(max(level + 1, math.ceil(level * self.s.grow)))
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
