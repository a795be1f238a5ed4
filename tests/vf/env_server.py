"""`rollouts serve-env` in the verifiers venv, and verifiers' judge (tests/vf/judge.py)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from clients.commands.policy_stub import stop_process
from tests.ci import unavailable
from tests.tool_venv import find_python312
from tests.vf.vf_venv import ensure_venv

ROOT = Path(__file__).resolve().parents[2]
JUDGE = ROOT / "tests" / "vf" / "judge.py"


def vf_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROLLOUTS_", "PYTHON"))}
    return {**env, "PYTHONPATH": str(ROOT)}


def venv_python() -> Path:
    """The verifiers venv's python (built on first use), or a skip (a failure in CI)."""
    python312 = find_python312()
    if python312 is None:
        unavailable("verifiers' judge needs a python3.12 (ROLLOUTS_PYTHON312 or pyenv's)")
    return ensure_venv(python312)


@contextlib.contextmanager
def serve_env(python: Path, service_url: str, api_key: str, *args: str) -> Iterator[str]:
    """serve-env on a free loopback port; yields its ZMQ address."""
    cmd = [str(python), "-m", "clients.commands.serve_env", "--service-url", service_url]
    cmd += ["--address", "tcp://127.0.0.1:0", "--log-level", "warning", *args]
    env = {**vf_env(), "ROLLOUTS_API_KEY": api_key}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"serve-env did not start: {proc.stderr.read().decode()[-3000:]}")
        yield json.loads(line)["address"]
    finally:
        stop_process(proc)


def _run_judge(python: Path, args: tuple[str, ...], stdin: dict[str, Any], timeout_s: float):
    return subprocess.run(
        [str(python), str(JUDGE), *args],
        input=json.dumps(stdin) + "\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=vf_env(),
        timeout=timeout_s,
    )


def judge(python: Path, *args: str, stdin: dict[str, Any], timeout_s: float = 900) -> dict:
    proc = _run_judge(python, args, stdin, timeout_s)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def judge_fails(python: Path, *args: str, stdin: dict[str, Any]) -> str:
    """The judge's error output, where it must fail (a run the server refuses)."""
    proc = _run_judge(python, args, stdin, 300)
    assert proc.returncode != 0, proc.stdout[-2000:]
    return proc.stderr


@contextlib.contextmanager
def judging(python: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    """The judge as a process the test talks to line by line (the cancel case)."""
    proc = subprocess.Popen(
        [str(python), str(JUDGE), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=vf_env(),
    )
    try:
        yield proc
    finally:
        stop_process(proc)
