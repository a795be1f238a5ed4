"""Priority, end to end (`rollouts serve`, the stand-in, real Docker sandboxes, raw HTTP):
a higher-priority rollout is admitted ahead of queued groups of a lower one, and its complete
groups are leased first (docs/delivery.md: "highest rollout priority first, then in completion
order").

Two sample slots and groups of two, so exactly one group runs at a time and the order in which
the stand-in served the groups' first turns is the order they were admitted in. The stand-in is
paused while the rollouts are submitted, so the low-priority rollout's groups are all waiting
when the high-priority one arrives.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.live import SMALL_GROUPS, TASKS, serve, stand_in, trajectories, wait_until

pytestmark = pytest.mark.docker

LOW = ["camel-to-snake", "gcd-of-list", "palindrome-check"]
HIGH = ["primes-up-to"]


def _body(ids: list[str], priority: int) -> dict:
    return {
        "tasks": {"path": TASKS, "ids": ids},
        "n_samples": 2,
        "priority": priority,
        "sampling": {"seed": 1},
        "agent": {"max_turns": 1},  # one turn, then the verifier: groups stay short
        "advantage": SMALL_GROUPS,
    }


def test_higher_priority_is_admitted_and_leased_first(tmp_path: Path) -> None:
    with (
        stand_in(tmp_path, p_correct=0.0) as policy,
        serve(tmp_path, [policy.url], "--max-concurrent-samples", "2") as svc,
    ):
        policy.pause()
        low = svc.submit(_body(LOW, priority=0))
        # The low rollout's first group is admitted: its first turn waits in the stand-in.
        wait_until("the first group's first turn", lambda: policy.metric(
            "vllm:num_requests_waiting") >= 1, 60)  # fmt: skip
        high = svc.submit(_body(HIGH, priority=5))
        policy.resume()
        svc.wait_finished(low)
        svc.wait_finished(high)

        # Lease one group at a time, nothing acked yet: the order of delivery.
        leased = []
        for _ in range(4):
            r = svc.lease(None, max_groups=1)
            assert r.status_code == 200, r.text
            leased += r.json()["groups"]
        assert svc.lease(None).status_code == 204
        first_turns = policy.requests()

    by_prompt = {tuple(t["prompt_token_ids"]): t["task_id"] for t in trajectories(leased)}
    # Every group's first turn is one request for both samples.
    assert [len(r) for r in first_turns] == [2, 2, 2, 2]
    admitted = [by_prompt[tuple(r[0]["prompt_token_ids"])] for r in first_turns]
    assert sorted(admitted) == sorted(LOW + HIGH)
    # First come first served within a priority...
    low_order = [t for t in admitted if t in LOW]
    assert low_order == LOW, admitted
    # ...but the high-priority group overtakes the low groups still queued: with FIFO it would
    # come last. (The group that had started keeps its slots.)
    assert admitted.index(HIGH[0]) < admitted.index(low_order[-1]), admitted

    # Leases: the high-priority group first although it completed later than some low ones,
    # then the low groups in completion order (= admission order: one group runs at a time).
    assert [g["task_id"] for g in leased] == HIGH + low_order
    assert {g["rollout_id"] for g in leased[:1]} == {high}
    assert {g["rollout_id"] for g in leased[1:]} == {low}
