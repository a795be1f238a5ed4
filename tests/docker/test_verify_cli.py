"""`rollouts verify` over every bundled task: the oracle scores 1.0, an empty solution 0.0, and a
SIGKILLed run leaves nothing behind after `rollouts sandboxes gc`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandboxes.docker_adapter import default_adapter
from sandboxes.tasks import load_tasks
from standin.attacks import ATTACKS

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "examples" / "tasks"


def verify(*args: str, tasks: Path = TASKS) -> tuple[list[dict], dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "clients.cli", "verify", "--tasks", str(tasks), "--json", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return [x for x in lines if "task_id" in x], lines[-1]["summary"]


def test_oracle_scores_one_on_every_bundled_task() -> None:
    rows, summary = verify("--concurrency", "4")
    assert {r["task_id"] for r in rows} == {t.id for t in load_tasks(TASKS)}
    # Every oracle is graded 1 and unflagged: no false value hack, every task guarded.
    assert all(r["reward"] == 1.0 and r["status"] == "ok" and r["flags"] == [] for r in rows), rows
    assert summary["passed"] == summary["total"] == len(rows) and summary["flagged"] == {}
    assert all({"create_s", "agent_s", "verify_s"} <= r["durations"].keys() for r in rows)


def test_empty_solution_scores_zero_on_every_bundled_task(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sh"
    empty.write_text("")
    rows, summary = verify("--concurrency", "4", "--solve-script", str(empty))
    assert len(rows) == len(load_tasks(TASKS))
    assert all(r["reward"] == 0.0 and r["status"] == "ok" for r in rows), rows
    assert summary["passed"] == 0


def test_a_suspected_hack_shows_in_its_json_line(tmp_path: Path) -> None:
    hack = tmp_path / "hack.sh"
    hack.write_text(ATTACKS["always_equal"])
    rows, summary = verify("--solve-script", str(hack), tasks=TASKS / "camel-to-snake")
    assert [(r["reward"], r["flags"]) for r in rows] == [(0.0, ["value_hack"])]
    assert summary["flagged"] == {"value_hack": ["camel-to-snake"]}


def _owned_by(pid: int) -> list:
    prefix = f"{socket.gethostname()}:{pid}:"
    # The low-level list: the high-level one inspects each container it lists, which fails
    # for one removed in between (the pool's refills and removals go on meanwhile).
    api = default_adapter().client.api
    found = api.containers(all=True, filters={"label": "rollouts.managed=true"})
    return [
        c for c in found if (c.get("Labels") or {}).get("rollouts.owner", "").startswith(prefix)
    ]


def test_sigkill_mid_run_then_gc_leaves_nothing(tmp_path: Path) -> None:
    slow = tmp_path / "slow.sh"
    slow.write_text("sleep 30\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "clients.cli", "verify", "--tasks", str(TASKS),
         "--solve-script", str(slow), "--concurrency", "3"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while len(_owned_by(proc.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _owned_by(proc.pid), "verify never started a sandbox"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _owned_by(proc.pid), "containers of the killed process should still exist before gc"
    gc = subprocess.run(
        [sys.executable, "-m", "clients.cli", "sandboxes", "gc"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert gc.returncode == 0, gc.stderr
    assert _owned_by(proc.pid) == []
