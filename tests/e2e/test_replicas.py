"""Several policy replicas, end to end (`rollouts serve` with two `--policy-url`s, two stand-in
processes recording what they served, real Docker sandboxes, raw HTTP), as
docs/architecture.md says:

- a group's first turn is rendered once and asked for in one request with `n` = the group size
  (the shared prefix), salted `cache_salt: policy-v<version>-<run>`;
- every later turn of a sample goes to the replica that served its group's first turn (where its
  prefix is cached), and new groups go to the least-loaded replica;
- an episode goes on over several replicas: when its replica dies mid-episode, the sample moves
  to another one and still ends scored and token-exact.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.live import TASKS, serve, stand_in, turns_served, wait_until

pytestmark = pytest.mark.docker


def _where(t: dict, replicas: dict[str, list[dict]]) -> list[str]:
    """The replica that served each of this trajectory's turns."""
    out = []
    for turn in turns_served(t, [c for served in replicas.values() for c in served]):
        out += [name for name, served in replicas.items() if turn in served][:1]
    return out


def test_shared_first_turn_and_pinned_samples(tmp_path: Path) -> None:
    with (
        stand_in(tmp_path, p_correct=1.0, seed=1) as a,
        stand_in(tmp_path, p_correct=1.0, seed=2) as b,
        serve(tmp_path, [a.url, b.url], "--max-concurrent-samples", "8") as svc,
    ):
        rid = svc.submit(
            {
                "tasks": {"path": TASKS, "ids": ["camel-to-snake", "gcd-of-list"]},
                "n_samples": 4,
                "sampling": {"seed": 5},
            }
        )
        svc.wait_finished(rid)
        groups = svc.drain(rid)
        replicas = {"a": a.served(), "b": b.served()}
        requests = {"a": a.requests(), "b": b.requests()}

    assert len(groups) == 2
    first_requests = {name: [r for r in reqs if len(r) > 1] for name, reqs in requests.items()}
    # Least loaded: the two groups started on different replicas, one n=4 request each.
    assert sorted(len(r) for r in first_requests.values()) == [1, 1], first_requests
    assert all(len(r[0]) == 4 for r in first_requests.values())
    for g in groups:
        ts = g["trajectories"]
        assert all(t["status"] == "ok" and t["reward"] == 1.0 for t in ts)
        assert len({tuple(t["prompt_token_ids"]) for t in ts}) == 1  # one rendering per group
        homes = {name for t in ts for name in _where(t, replicas)}
        assert len(homes) == 1, f"{g['group_id']}: turns spread over {homes}"
        [home] = homes
        [[*choices]] = first_requests[home]
        assert choices[0]["prompt_token_ids"] == ts[0]["prompt_token_ids"]
        assert sorted(c["index"] for c in choices) == [0, 1, 2, 3]
        for t in ts:
            turns = turns_served(t, replicas[home])
            assert len(turns) == t["num_turns"] >= 2
            assert turns[0] in choices  # its first turn is a choice of the shared request
            assert all(turn["cache_salt"].startswith("policy-v0-") for turn in turns)


def test_episode_moves_to_another_replica_when_its_own_dies(tmp_path: Path) -> None:
    with (
        stand_in(tmp_path, p_correct=1.0, seed=1) as a,
        stand_in(tmp_path, p_correct=1.0, seed=2) as b,
        serve(tmp_path, [a.url, b.url], "--policy-backoff", "0.1") as svc,
    ):
        rid = svc.submit(
            {
                "tasks": {"path": TASKS, "ids": ["camel-to-snake"]},
                "n_samples": 2,
                "sampling": {"seed": 5},
                "advantage": {"estimator": "rloo", "min_group_size": 1},
            }
        )
        # The replica that served the first turn is the samples' home: hold their next turn
        # there, then kill it while they wait.
        home, other = wait_until("the first turn", lambda: (a, b) if a.served() else (
            (b, a) if b.served() else None), 120, poll_s=0.02)  # fmt: skip
        home.pause()
        assert len(home.requests()) == 1, "a later turn was served before the pause"
        wait_until("a later turn to wait", lambda: home.metric("vllm:num_requests_waiting"), 120)
        home_served = home.served()
        home.kill()
        svc.wait_finished(rid)
        [group] = svc.drain(rid)
        replicas = {"home": home_served, "other": other.served()}

    for t in group["trajectories"]:
        assert t["status"] == "ok" and t["reward"] == 1.0, t["status"]
        where = _where(t, replicas)  # token-exact: every turn was served by one of the two
        assert where[0] == "home" and where[-1] == "other", where
        assert where == sorted(where, key=["home", "other"].index)  # it moved once, for good
