"""Cancel with real sandboxes (`rollouts serve`, the stand-in, real Docker, raw HTTP), as
docs/delivery.md says: in-flight samples stop and their sandboxes are removed; every sample
without a trajectory is committed as `cancelled` (masked, advantage 0); a group that already
had real trajectories is delivered with them, a group of nothing but cancelled samples is never
offered.

Deterministic without sleeps: a group of 8 with four sample slots. The group starts with all 8
(one shared first request), four of them in their slots; the others take slots as the first
four's episodes end (they then only verify and commit, which needs no policy). The stand-in is
paused as soon as the service's queue shows all 8 in slots: each of the last four episodes
needs a second policy request after a command in a sandbox that is still being created, so it
cannot finish, and the group is cut part-way.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.live import TASKS, containers_with, serve, stand_in, wait_until
from tests.reference_advantages import reference_advantages

pytestmark = pytest.mark.docker
N = 8
NO_POOL = ("--warm-containers", "0")  # every container carries its rollout's label


def test_cancel_delivers_partly_cancelled_groups_and_removes_sandboxes(tmp_path: Path) -> None:
    with (
        stand_in(tmp_path, p_correct=0.5, seed=4) as policy,
        serve(tmp_path, [policy.url], "--max-concurrent-samples", "4", *NO_POOL) as svc,
    ):
        rid = svc.submit(
            {
                "tasks": {"path": TASKS, "ids": ["camel-to-snake", "gcd-of-list"]},
                "n_samples": N,
                "sampling": {"seed": 2},
            }
        )
        # Every sample of the first group in a slot: only the second group's N samples queue.
        dispatched = lambda: svc.metric("rollouts_queued_samples") <= N  # noqa: E731
        wait_until("the first group's last sample to start", dispatched, 300, poll_s=0.02)
        policy.pause()
        # The first four verify and commit; the last four wait on the policy.
        done = wait_until(
            "the group to stop making progress",
            lambda: _settled(svc, rid, policy),
            300,
            poll_s=1.0,
        )
        assert 1 <= done < N
        assert containers_with("rollouts.rollout_id", rid), "the cut samples hold no sandbox"
        r = svc.call("DELETE", f"/v1/rollouts/{rid}")
        assert r.status_code == 200, r.text
        after = r.json()
        assert after["status"] == "cancelled" and after["samples_completed"] == 2 * N
        assert after["counts"]["cancelled"] == 2 * N - done
        # Cancelled samples' sandboxes are removed (teardown may finish just after the answer).
        wait_until("the sandboxes to be removed",
                   lambda: not containers_with("rollouts.rollout_id", rid), 60)  # fmt: skip
        policy.resume()

        r = svc.lease(rid, wait_s=5)
        assert r.status_code == 200, r.text
        [group] = r.json()["groups"]  # the untouched second group is dropped, not offered
        assert group["task_id"] == "camel-to-snake"
        assert svc.ack(r.json()["batch_id"]).status_code == 200
        r = svc.lease(rid)
        assert r.status_code == 204 and r.headers["X-Rollouts-Remaining"] == "0"

    ts = sorted(group["trajectories"], key=lambda t: t["sample_index"])
    assert [t["sample_index"] for t in ts] == list(range(N))
    real = [t for t in ts if t["status"] != "cancelled"]
    cut = [t for t in ts if t["status"] == "cancelled"]
    assert len(real) == done and len(cut) == N - done
    assert all(t["status"] == "ok" and t["reward"] in (0.0, 1.0) for t in real)
    assert all(t["reward"] is None and t["exclude_from_baseline"] for t in cut)
    # Advantages over the real samples only (rloo_n, min_group_size 4), 0 for the cancelled.
    want = reference_advantages(
        [t["reward"] for t in ts], [t["exclude_from_baseline"] for t in ts], "rloo_n", 4
    )
    assert [t["advantage"] for t in ts] == pytest.approx(want)


def _settled(svc, rid: str, policy) -> int:  # type: ignore[no-untyped-def]
    """The count of committed samples, once it stays put for 3 s while the paused stand-in
    holds a request (0 until then)."""
    if policy.metric("vllm:num_requests_waiting") < 1:
        return 0
    first = svc.status(rid)["samples_completed"]
    time.sleep(3)
    return first if svc.status(rid)["samples_completed"] == first else 0
