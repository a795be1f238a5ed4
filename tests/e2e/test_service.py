"""`rollouts serve` end to end: real Docker, the stand-in policy, real HTTP on loopback, and the
TrainerClient. (SIGKILLs of the service mid-collection, with restarts on the same data, are
tests/adversarial/test_service_kill.py's.)"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from clients.commands.policy_stub import free_port, stand_in_policy, wait_healthy
from clients.trainer import TrainerClient
from tests.reference_advantages import reference_advantages

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]
TASKS = str(ROOT / "examples" / "tasks")
API_KEY = "test-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@contextmanager
def serve(data_dir: Path, policy_url: str, port: int) -> Iterator[subprocess.Popen[bytes]]:
    cmd = [
        sys.executable, "-m", "clients.cli", "serve", "--port", str(port),
        "--policy-url", policy_url, "--data-dir", str(data_dir), "--api-key", API_KEY,
        "--max-concurrent-samples", "8", "--log-level", "warning", "--tasks-root", TASKS,
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", 60, proc, path="/healthz")
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _raw_drain(port: int, rollout_id: str, max_groups: int) -> list[dict]:
    """Lease and ack over raw HTTP (no TrainerClient: it would hide a repeat by deduplicating)
    until nothing is left; every group as delivered, repeats included."""
    url, groups = f"http://127.0.0.1:{port}", []
    while True:
        r = httpx.post(
            f"{url}/v1/batches/lease",
            json={"max_groups": max_groups, "wait_s": 20, "rollout_id": rollout_id},
            headers=AUTH,
            timeout=80,
        )
        if r.status_code == 204:
            if r.headers["X-Rollouts-Remaining"] == "0":
                return groups
            continue
        assert r.status_code == 200, r.text
        groups += r.json()["groups"]
        ack = httpx.post(f"{url}/v1/batches/{r.json()['batch_id']}/ack", headers=AUTH, timeout=60)
        assert ack.status_code == 200 and ack.json()["already_acked"] is False, ack.text


def test_submit_lease_ack_with_reference_advantages(tmp_path: Path) -> None:
    port = free_port()
    with (
        stand_in_policy(TASKS, p_correct=0.5, seed=5) as stand_in,
        serve(tmp_path / "data", stand_in.url, port),
        TrainerClient(f"http://127.0.0.1:{port}", API_KEY) as client,
    ):
        # Two groups of 4 (the smallest group rloo_n's default min_group_size grades), leased one
        # group at a time: two batches. (Seeded: the stand-in gets some of each right.)
        rollout_id = client.submit(TASKS, n_samples=4, limit=2, sampling={"seed": 7})
        groups = _raw_drain(port, rollout_id, max_groups=1)
        ids = [t["trajectory_id"] for g in groups for t in g["trajectories"]]
        assert len(ids) == len(set(ids)) == 8, "a trajectory was delivered twice"
        assert sorted(ids) == sorted(f"{rollout_id}.g{g}.s{s}" for g in range(2) for s in range(4))
        for g in groups:
            ts = g["trajectories"]
            assert len(ts) == 4
            # The request's defaults: rloo_n, min_group_size 4; an independent loop-form
            # reference, not the service's own compute_advantages.
            want = reference_advantages(
                [t["reward"] for t in ts], [t["exclude_from_baseline"] for t in ts], "rloo_n", 4
            )
            assert [t["advantage"] for t in ts] == pytest.approx(want, abs=1e-12)
        rewards = [t["reward"] for g in groups for t in g["trajectories"]]
        assert {0.0, 1.0} <= set(rewards), "p_correct 0.5: both outcomes, so advantages vary"
        status = client.status(rollout_id)
        assert status.status == "completed" and status.groups_completed == 2
        # after ack nothing more is offered
        raw = httpx.post(
            f"http://127.0.0.1:{port}/v1/batches/lease",
            json={"max_groups": 64, "wait_s": 0.5},
            headers=AUTH,
        )
        assert raw.status_code == 204 and raw.headers["X-Rollouts-Remaining"] == "0"
