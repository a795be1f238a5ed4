"""RLOO / rloo_n against a direct loop-form reference implementation
(tests/reference_advantages.py, also what the end-to-end tests check delivered advantages by)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.advantages import AdvantageConfig, compute_advantages, rloo
from tests.reference_advantages import reference_advantages


def reference(
    rewards: list[float | None], excluded: list[bool], cfg: AdvantageConfig
) -> list[float]:
    return reference_advantages(
        rewards, excluded, cfg.estimator, cfg.min_group_size, cfg.drop_zero_variance
    )


rewards_st = st.floats(min_value=-10, max_value=10, allow_nan=False)
groups = st.lists(st.tuples(rewards_st, st.booleans()), min_size=0, max_size=16)
configs = st.builds(
    AdvantageConfig,
    estimator=st.sampled_from(["rloo", "rloo_n"]),
    min_group_size=st.integers(1, 10),
    drop_zero_variance=st.booleans(),
)


@given(groups, configs)
def test_matches_loop_reference(group: list[tuple[float, bool]], cfg: AdvantageConfig) -> None:
    rewards = [None if ex else r for r, ex in group]
    excluded = [ex for _, ex in group]
    got = compute_advantages(rewards, excluded, cfg)
    want = reference(rewards, excluded, cfg)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-9)


@given(st.lists(rewards_st, min_size=2, max_size=16))
def test_closed_form_sums_to_zero(rewards: list[float]) -> None:
    adv = rloo(rewards)
    assert math.isclose(sum(adv), 0.0, abs_tol=1e-9)


@given(groups, configs)
def test_excluded_samples_get_zero(group: list[tuple[float, bool]], cfg: AdvantageConfig) -> None:
    rewards = [None if ex else r for r, ex in group]
    excluded = [ex for _, ex in group]
    for a, ex in zip(compute_advantages(rewards, excluded, cfg), excluded, strict=True):
        if ex:
            assert a == 0.0


def test_examples() -> None:
    cfg = AdvantageConfig("rloo_n", min_group_size=4)
    # 4 included: mean of others for r=1 is 1/3 -> 2/3; for r=0 is 2/3 -> -2/3.
    got = compute_advantages([1.0, 0.0, 1.0, 0.0, None], [False] * 4 + [True], cfg)
    assert got == pytest.approx([2 / 3, -2 / 3, 2 / 3, -2 / 3, 0.0])
    # 3 included < min_group_size 4: all zero.
    assert compute_advantages([1.0, 0.0, 1.0, None], [False] * 3 + [True], cfg) == [0.0] * 4
    # Zero variance filter.
    zv = AdvantageConfig("rloo", min_group_size=1, drop_zero_variance=True)
    assert compute_advantages([1.0, 1.0], [False, False], zv) == [0.0, 0.0]
    assert rloo([1.0]) == [0.0]


def test_missing_reward_on_included_sample_is_an_error() -> None:
    with pytest.raises(ValueError, match="sample 0"):
        compute_advantages([None, 1.0], [False, False], AdvantageConfig("rloo"))
