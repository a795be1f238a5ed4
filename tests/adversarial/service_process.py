"""`rollouts serve` as a real process for the trainer-fault and service-kill tests, plus raw
lease/ack calls (no TrainerClient: these tests must see every redelivery, not a deduped view)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from harness import REPO, wait_healthy

API_KEY = "faults-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}


def start_service(
    data_dir: Path, policy_url: str, port: int, *extra: str, log: Path | None = None
) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "clients.cli", "serve", "--port", str(port)]
    cmd += ["--policy-url", policy_url, "--data-dir", str(data_dir), "--api-key", API_KEY]
    cmd += ["--log-level", "warning", *extra]
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - owned by the child
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    wait_healthy(f"http://127.0.0.1:{port}/healthz", proc, timeout_s=90)
    return proc


def stop_service(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def submit(url: str, n_samples: int, **tasks: Any) -> str:
    body = {"tasks": tasks, "n_samples": n_samples, "sampling": {"seed": 1}}
    r = httpx.post(url + "/v1/rollouts", json=body, headers=AUTH, timeout=60)
    assert r.status_code == 202, r.text
    return r.json()["id"]


def wait_groups_complete(url: str, rollout_id: str, groups: int, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        s = httpx.get(f"{url}/v1/rollouts/{rollout_id}", headers=AUTH, timeout=30).json()
        if s["groups_completed"] >= groups:
            return
        time.sleep(0.3)
    raise AssertionError(f"rollout {rollout_id}: {groups} groups not complete in {timeout_s} s")


def lease(
    url: str, rollout_id: str | None, wait_s: float, lease_s: float | None = None
) -> httpx.Response:
    body = {"rollout_id": rollout_id, "wait_s": wait_s, "lease_s": lease_s, "max_groups": 64}
    return httpx.post(url + "/v1/batches/lease", json=body, headers=AUTH, timeout=wait_s + 60)


def trajectory_ids(response: httpx.Response) -> list[str]:
    return [t["trajectory_id"] for g in response.json()["groups"] for t in g["trajectories"]]


def ack(url: str, batch_id: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/batches/{batch_id}/ack", headers=AUTH, timeout=60)
