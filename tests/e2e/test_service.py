"""`rollouts serve` end to end: real Docker, the stand-in policy, real HTTP on loopback, and the
TrainerClient. Includes a SIGKILL of the service mid-collection and a restart on the same data."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from clients.commands.policy_stub import free_port, stand_in_policy, wait_healthy
from clients.trainer import TrainerClient
from sandboxes.docker_adapter import default_adapter
from service.advantages import AdvantageConfig, compute_advantages

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]
TASKS = str(ROOT / "examples" / "tasks")
API_KEY = "test-key"


@contextmanager
def serve(data_dir: Path, policy_url: str, port: int) -> Iterator[subprocess.Popen[bytes]]:
    cmd = [
        sys.executable, "-m", "clients.cli", "serve", "--port", str(port),
        "--policy-url", policy_url, "--data-dir", str(data_dir), "--api-key", API_KEY,
        "--max-concurrent-samples", "8", "--log-level", "warning",
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


def containers_of(pids: list[int]) -> list:
    """Containers created by these service processes (others may run beside the test)."""
    client = default_adapter().client
    owners = {f"{socket.gethostname()}:{pid}" for pid in pids}
    found = client.containers.list(all=True, filters={"label": "rollouts.managed=true"})
    return [c for c in found if c.labels.get("rollouts.owner", "").rpartition(":")[0] in owners]


def test_submit_lease_ack_with_reference_advantages(tmp_path: Path) -> None:
    port = free_port()
    with (
        stand_in_policy(TASKS, p_correct=0.5, seed=5) as stand_in,
        serve(tmp_path / "data", stand_in.url, port),
        TrainerClient(f"http://127.0.0.1:{port}", API_KEY) as client,
    ):
        rollout_id = client.submit(TASKS, n_samples=8, limit=3, sampling={"seed": 7})
        seen: set[str] = set()
        groups = []
        for batch in client.batches(max_groups=2, rollout_id=rollout_id, wait_s=20):
            groups.extend(batch.groups)
            for g in batch.groups:
                for t in g.trajectories:
                    assert t.trajectory_id not in seen
                    seen.add(t.trajectory_id)
            batch.ack()
        assert len(groups) == 3
        config = AdvantageConfig()  # the request's defaults: rloo_n, min_group_size 4
        for g in groups:
            assert len(g.trajectories) == 8
            rewards = [t.reward for t in g.trajectories]
            excluded = [t.exclude_from_baseline for t in g.trajectories]
            expected = compute_advantages(rewards, excluded, config)
            assert [t.advantage for t in g.trajectories] == pytest.approx(expected)
        status = client.status(rollout_id)
        assert status.status == "completed" and status.groups_completed == 3
        # after ack nothing more is offered
        batch, remaining = client.lease(max_groups=64, rollout_id=rollout_id, wait_s=0.5)
        assert batch is None and remaining == 0
        raw = httpx.post(
            f"http://127.0.0.1:{port}/v1/batches/lease",
            json={"max_groups": 64, "wait_s": 0.5},
            headers={"Authorization": f"Bearer {API_KEY}"},
        )
        assert raw.status_code == 204


def test_sigkill_mid_collection_then_restart_loses_and_repeats_nothing(tmp_path: Path) -> None:
    port = free_port()
    data = tmp_path / "data"
    with stand_in_policy(TASKS, p_correct=0.5, seed=9, tokens_per_s=2000) as stand_in:
        with serve(data, stand_in.url, port) as proc:
            pids = [proc.pid]
            client = TrainerClient(f"http://127.0.0.1:{port}", API_KEY)
            rollout_id = client.submit(TASKS, n_samples=8, limit=4, sampling={"seed": 3})
            # wait until some, but not all, groups have trajectories committed
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                s = client.status(rollout_id)
                if s.samples_completed >= 4:
                    break
                time.sleep(0.2)
            assert 0 < s.samples_completed < s.samples_total
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            client.close()
        # the restarted service reaps the old sandboxes and re-runs what was unfinished
        with serve(data, stand_in.url, port) as proc2:
            pids.append(proc2.pid)
            with TrainerClient(f"http://127.0.0.1:{port}", API_KEY) as client:
                delivered: list[str] = []
                for batch in client.batches(max_groups=1, rollout_id=rollout_id, wait_s=30):
                    delivered += [t.trajectory_id for g in batch.groups for t in g.trajectories]
                    batch.ack()
                assert len(delivered) == 32 and len(set(delivered)) == 32
                batch, remaining = client.lease(rollout_id=rollout_id, wait_s=0.5)
                assert batch is None and remaining == 0
    assert containers_of(pids) == []
