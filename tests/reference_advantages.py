"""RLOO / rloo_n in their literal loop form: each included sample against the mean of the other
included samples. An independent reference for `service.advantages` (unit tests) and for the
advantages the service delivers (end-to-end tests); it shares no code with the service."""

from __future__ import annotations


def reference_advantages(
    rewards: list[float | None],
    excluded: list[bool],
    estimator: str = "rloo_n",
    min_group_size: int = 4,
    drop_zero_variance: bool = False,
) -> list[float]:
    idx = [i for i, ex in enumerate(excluded) if not ex]
    out = [0.0] * len(rewards)
    if estimator == "rloo_n" and len(idx) < min_group_size:
        return out
    vals = [rewards[i] for i in idx]
    if drop_zero_variance and vals and len(set(vals)) == 1:
        return out
    if len(idx) < 2:
        return out
    for i in idx:
        others = [rewards[j] for j in idx if j != i]
        out[i] = rewards[i] - sum(others) / len(others)  # type: ignore[operator]
    return out
