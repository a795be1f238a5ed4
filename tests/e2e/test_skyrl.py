"""SkyRL's own code judges our SkyRL integration on batches a live service collected.

`rollouts serve` runs with the stand-in policy behind a fault-injecting proxy and real Docker
sandboxes. tests/skyrl/judge.py runs in a Python 3.12 venv with skyrl-train 0.3.1 and skyrl
0.4.0 (tests/skyrl/skyrl_venv.py, cached, torch and ray stubbed): it drives RolloutsGenerator
through both trainers' generate() wrappers, the fully async pattern (one call per group,
concurrent calls) and Batch.to_skyrl(), asks this test to kill the policy server mid-run and
before a group's first turn, cancels a rollout to make the service drop a group, and runs
SkyRL's validate_generator_output, postprocess_generator_output, zero-variance filter,
get_rollout_metrics and concatenate_generator_outputs on every output. Skipped only where no
Python 3.12 exists, and never in CI (CI=true).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from clients.commands.policy_stub import free_port, stand_in_policy, stop_process, wait_healthy
from tests.ci import unavailable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "skyrl"))
sys.path.insert(0, str(ROOT / "tests" / "adversarial"))
from fault_proxy import FaultProxy  # noqa: E402
from skyrl_venv import ensure_venv, find_python312  # noqa: E402

pytestmark = pytest.mark.docker
TASKS = str(ROOT / "examples" / "tasks")
TASK_IDS = ["camel-to-snake", "gcd-of-list", "palindrome-check"]
API_KEY = "skyrl-key"
JUDGE_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def skyrl_python() -> str:
    python312 = find_python312()
    if python312 is None:
        unavailable("no Python 3.12 here (set ROLLOUTS_PYTHON312): SkyRL needs Python >= 3.12")
    return str(ensure_venv(python312))


@contextmanager
def serve(data_dir: Path, policy_url: str, port: int, log: Path) -> Iterator[str]:
    cmd = [
        sys.executable, "-m", "clients.cli", "serve", "--port", str(port),
        "--policy-url", policy_url, "--data-dir", str(data_dir), "--api-key", API_KEY,
        "--max-concurrent-samples", "8", "--log-level", "warning", "--tasks-root", TASKS,
        # A dead policy server masks its samples quickly instead of being waited out.
        "--policy-retries", "1", "--policy-backoff", "0.1", "--policy-cooldown", "0",
        "--policy-timeout", "20",
        # Masked samples stay masked (no re-runs): the judge checks how SkyRL's side takes them.
        "--retry-masked", "0",
    ]  # fmt: skip
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", 90, proc, path="/healthz")
        yield f"http://127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                stop_process(proc)


@pytest.mark.timeout(1800)  # the first run builds the venv (a few minutes)
def test_skyrl_judges_generator_and_to_skyrl(skyrl_python: str, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    judge_log = tmp_path / "judge.log"
    t0 = time.monotonic()
    with stand_in_policy(TASKS, p_correct=0.5, seed=11, tokens_per_s=400) as stand_in:
        proxy = FaultProxy(stand_in.url, free_port()).start()
        try:
            with serve(tmp_path / "data", proxy.url, free_port(), tmp_path / "serve.log") as url:
                cmd = [
                    skyrl_python, str(ROOT / "tests" / "skyrl" / "judge.py"),
                    "--url", url, "--api-key", API_KEY, "--tasks", TASKS,
                    "--task-ids", ",".join(TASK_IDS), "--report", str(report),
                ]  # fmt: skip
                env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
                with open(judge_log, "wb") as err:
                    judge = subprocess.Popen(
                        cmd, cwd=ROOT, env=env, text=True,
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                    )  # fmt: skip
                    deadline = time.monotonic() + JUDGE_TIMEOUT_S
                    assert judge.stdout is not None and judge.stdin is not None
                    for line in judge.stdout:  # the judge's fault requests, one per line
                        if line.startswith("FAULT "):
                            proxy.set_mode(line.split()[1])
                            judge.stdin.write("OK\n")
                            judge.stdin.flush()
                        assert time.monotonic() < deadline, "the judge ran too long"
                    rc = judge.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            proxy.stop()
    tail = judge_log.read_text(errors="replace")[-6000:]
    result = json.loads(report.read_text()) if report.exists() else {}
    summary = {
        "wall_s": round(time.monotonic() - t0, 1),
        "batches": result.get("batches"),
        "functions": sorted({f"{r['skyrl']}: {r['function']}" for r in result.get("runs", [])}),
    }
    print(json.dumps(summary, indent=1))
    assert rc == 0 and result.get("ok"), f"judge failed ({rc}):\n{result.get('error') or tail}"
    batches = result["batches"]
    assert sum(b.get("masked", 0) for b in batches.values()) > 0, "no masked samples were judged"
    assert any(b.get("empty response (padded)") for b in batches.values()), "no first-turn failure"
    assert any(b.get("masked with generated tokens") for b in batches.values()), batches
    assert any(b.get("groups with masked and graded samples") for b in batches.values()), batches
    assert result["groups resubmitted after a drop"] >= 1
    assert result["stub_calls_while_judging"] == []


def test_skyrl_validates_step_wise_output_of_summarized_episodes(
    skyrl_python: str, tmp_path: Path
) -> None:
    """Issue 36: SkyRL 0.4's validator, concatenation and post-processing take our step-wise
    output (one step per segment) of a group with summaries, built directly and delivered by
    RolloutsGenerator(step_wise=True) through SkyRL's own trainer.generate() from a live
    service in this process that collects them: terminus-2 summarizing on the stand-in policy
    (a small context), its sandboxes no-ops (no Docker)."""
    from tests.unit.live_service import KEY, Server, make_settings
    from tests.unit.test_segments import StandInRunner

    with Server(make_settings(tmp_path / "data"), StandInRunner(tmp_path)) as server:
        cmd = [
            skyrl_python, str(ROOT / "tests" / "skyrl" / "step_wise_judge.py"),
            "--url", server.url, "--api-key", KEY,
            "--tasks", TASKS, "--task-id", TASK_IDS[0],
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-6000:]
    example = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(example, indent=1))  # one trajectory's step-wise form
    kinds = [s["kind"] for s in example["steps"]]
    assert "questions" in kinds and kinds[-1] == "main", kinds
    assert [s["is_last_step"] for s in example["steps"]] == [False] * (len(kinds) - 1) + [True]
