"""What one round of trials gives, for every system the sandbox benchmark compares (ours,
Harbor's, the bare floor)."""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks.cpu_cost import CpuCost


class TrialFailed(RuntimeError):
    """A trial did not reach reward 1.0: the measurement would not be of a working system."""


@dataclass
class RoundResult:
    trials: int
    seconds: float
    stages: dict[str, list[float]] = field(default_factory=dict)
    engine_calls: dict[str, int] = field(default_factory=dict)  # ours: creates, execs
    cpu: CpuCost | None = None  # set by the section, around the whole round

    @property
    def per_min(self) -> float:
        return 60.0 * self.trials / self.seconds
