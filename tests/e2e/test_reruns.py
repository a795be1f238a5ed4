"""Masked samples run again, end to end (`rollouts serve`, the stand-in, real Docker, raw HTTP):
a group reaches the trainer with every sample graded, and `attempts` shows the re-runs.

1. A sample's container is removed from the engine (`docker rm -f`) mid-episode, in two
   rollouts at once: with the service's default it runs again in a fresh sandbox; with the
   request's `retry_masked: 0` it is delivered masked, as before re-runs.
2. The policy server is restarted mid-episode (killed while later turns are in flight, started
   again on the same port): the masked samples wait until it answers, then run again.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from clients.commands.policy_stub import free_port
from tests.e2e.live import (
    SMALL_GROUPS,
    TASKS,
    Service,
    containers_with,
    serve,
    stand_in,
    wait_until,
)

pytestmark = pytest.mark.docker
NO_POOL = ("--warm-containers", "0")  # every container carries its sample's label
FAIL_FAST = ("--policy-retries", "1", "--policy-backoff", "0.2")  # a dead server: masked soon


def _body(task: str, **extra: object) -> dict:
    return {
        "tasks": {"path": TASKS, "ids": [task]},
        "n_samples": 2,
        "sampling": {"seed": 9},
        "agent": {"max_turns": 4},
        "advantage": SMALL_GROUPS,
        **extra,
    }


def _retries(svc: Service, reason: str) -> float:
    line = f'rollouts_sample_retries_total{{reason="{reason}"}} '
    text = svc.call("GET", "/metrics").text
    return next((float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith(line)), 0)


def _samples(group: dict) -> list[tuple[str, float | None, int]]:
    ts = sorted(group["trajectories"], key=lambda t: t["sample_index"])
    return [(t["status"], t["reward"], t["attempts"]) for t in ts]


def test_masked_samples_run_again_until_the_group_is_whole(tmp_path: Path) -> None:
    port = free_port()
    # Every turn takes 0.6 s before its first token: a later turn can be caught in flight.
    slow = ["--ttft-ms", "600"]
    with (
        stand_in(tmp_path, p_correct=1.0, port=port, extra=slow) as policy,
        serve(tmp_path, [policy.url], *FAIL_FAST, *NO_POOL) as svc,
    ):
        # 1. The stand-in holds both groups' first turns while sample 0's containers go.
        policy.pause()
        again = svc.submit(_body("camel-to-snake"))
        once = svc.submit(_body("gcd-of-list", retry_masked=0))
        for rid in (again, once):
            [cid] = wait_until(
                "sample 0's container",
                lambda r=rid: containers_with("rollouts.trajectory_id", f"{r}.g0.s0"),
                120,
            )
            removed = subprocess.run(["docker", "rm", "-f", cid], capture_output=True, text=True)
            assert removed.returncode == 0, removed.stderr
        wait_until("both first turns", lambda: policy.metric("vllm:num_requests_waiting") >= 2, 60)
        policy.resume()
        svc.wait_finished(again)
        svc.wait_finished(once)
        [whole] = svc.drain(again, wait_s=1)
        [masked] = svc.drain(once, wait_s=1)
        assert _samples(whole) == [("ok", 1.0, 2), ("ok", 1.0, 1)]
        assert _samples(masked) == [("sandbox_error", None, 1), ("ok", 1.0, 1)]
        assert _retries(svc, "sandbox_error") == 1

        # 2. The policy server goes away while the group's later turns are in flight.
        served = len(policy.served())
        restarted = svc.submit(_body("palindrome-check"))
        wait_until(
            "a later turn in flight",
            lambda: (
                len(policy.served()) >= served + 2
                and policy.metric("vllm:num_requests_running") >= 1
            ),
            120,
            poll_s=0.05,
        )
        policy.kill()
        # Both samples end masked (policy_error) and wait for a policy server to answer.
        wait_until("both samples masked", lambda: svc.metric("rollouts_running_samples") == 0, 120)
        assert svc.status(restarted)["samples_completed"] == 0 and not _retries(svc, "policy_error")
        with stand_in(tmp_path, p_correct=1.0, port=port, extra=slow):
            svc.wait_finished(restarted)
            [group] = svc.drain(restarted, wait_s=1)
            assert _retries(svc, "policy_error") == 2
    assert _samples(group) == [("ok", 1.0, 2), ("ok", 1.0, 2)]
    assert not containers_with("rollouts.rollout_id", restarted)
