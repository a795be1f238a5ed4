"""Summaries of repeated measurements: every figure is a median with its spread."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    """Median of repeated runs and their min/max (the spread)."""

    median: float
    low: float
    high: float
    runs: int

    def as_dict(self, digits: int = 3) -> dict[str, float | int]:
        return {
            "median": round(self.median, digits),
            "min": round(self.low, digits),
            "max": round(self.high, digits),
            "runs": self.runs,
        }

    def text(self, fmt: str = "{:.2f}") -> str:
        if self.runs == 1 or self.low == self.high:
            return fmt.format(self.median)
        return f"{fmt.format(self.median)} ({fmt.format(self.low)}–{fmt.format(self.high)})"


def figure(values: list[float]) -> Figure:
    if not values:
        raise ValueError("no measurements to summarise")
    return Figure(statistics.median(values), min(values), max(values), len(values))


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); stage timings are few, so no interpolation."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = math.ceil(q / 100 * len(ordered))  # 1-based
    return ordered[max(0, min(len(ordered), rank) - 1)]


def level_spans(trace: list[tuple[float, int]], seconds: float) -> dict[int, float]:
    """How long each level held over [0, seconds] of a step trace: (time of a reading, level)
    pairs, each level holding from its reading to the next (readings before 0 set the level
    that holds at 0)."""
    spans: dict[int, float] = {}
    for (t, level), (t_next, _) in zip(trace, [*trace[1:], (seconds, 0)], strict=True):
        lo, hi = max(t, 0.0), min(t_next, seconds)
        if hi > lo:
            spans[level] = spans.get(level, 0.0) + hi - lo
    return spans
