"""Group advantages (pure functions): RLOO and rloo_n ("neutral" RLOO with masked samples).

RLOO: A_i = r_i - mean_{j != i} r_j, which equals (r_i - mean) * n / (n - 1).
rloo_n: samples with exclude_from_baseline get A = 0 and are left out of the baseline; a group
with fewer than min_group_size included samples gets A = 0 everywhere; optionally a group whose
included rewards all agree (zero variance) gets A = 0 everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Estimator = Literal["rloo", "rloo_n"]


@dataclass(frozen=True)
class AdvantageConfig:
    estimator: Estimator = "rloo_n"
    min_group_size: int = 4
    drop_zero_variance: bool = False


def rloo(rewards: Sequence[float]) -> list[float]:
    """Plain RLOO over every reward given. A group of size 0 or 1 has nothing to compare to."""
    n = len(rewards)
    if n < 2:
        return [0.0] * n
    mean = sum(rewards) / n
    scale = n / (n - 1)
    return [(r - mean) * scale for r in rewards]


def compute_advantages(
    rewards: Sequence[float | None],
    excluded: Sequence[bool],
    config: AdvantageConfig,
) -> list[float]:
    """One advantage per sample, in the order given.

    `rewards[i]` may be None only for excluded (masked) samples. With estimator "rloo" the
    masked samples still get A = 0 and stay out of the baseline: a reward of 0 invented for an
    infrastructure fault would bias training, so no estimator uses one.
    """
    if len(rewards) != len(excluded):
        raise ValueError("rewards and excluded must have equal lengths")
    included = [i for i, ex in enumerate(excluded) if not ex]
    for i in included:
        if rewards[i] is None:
            raise ValueError(f"sample {i} is not excluded but has no reward")
    out = [0.0] * len(rewards)
    if config.estimator == "rloo_n":
        if len(included) < max(config.min_group_size, 1):
            return out
    elif config.estimator != "rloo":
        raise ValueError(f"unknown estimator {config.estimator!r}")
    values = [float(rewards[i]) for i in included]  # type: ignore[arg-type]
    if config.drop_zero_variance and values and max(values) == min(values):
        return out
    for i, a in zip(included, rloo(values), strict=True):
        out[i] = a
    return out
