"""Helpers of the adversarial and fault-injection tests (plain functions; fixtures are in
conftest.py): results per case, short-timeout task copies, processes on loopback, label
queries against the Docker Engine."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
from results_log import CaseResult

from clients.commands.policy_stub import STANDIN, stop_process
from sandboxes.task import Task
from sandboxes.tasks import iter_tasks

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "tasks"
# The real engine, whatever DOCKER_HOST a fault-injection test points the service at.
ENGINE_ENV = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}


class CaseLog:
    """The results one test records (one per delivery of a case)."""

    def __init__(self, test: str) -> None:
        self.test = test
        self.results: list[CaseResult] = []

    def add(self, case: str, delivery: str, tried: str = "") -> CaseResult:
        result = CaseResult(case=case, delivery=delivery, tried=tried, test=self.test)
        self.results.append(result)
        return result


_TIMEOUT_RE = r"(\[{section}\][^\[]*?timeout_sec\s*=\s*)[0-9.]+"


def copy_task(dest: Path, name: str, *, agent_s: float, verifier_s: float) -> Task:
    """A copy of examples/tasks/<name> under `dest` with the given agent/verifier timeouts."""
    folder = dest / f"{name}-copy-{uuid.uuid4().hex[:6]}"
    shutil.copytree(EXAMPLES / name, folder)
    toml = (folder / "task.toml").read_text()
    for section, value in (("agent", agent_s), ("verifier", verifier_s)):
        toml, n = re.subn(_TIMEOUT_RE.format(section=section), rf"\g<1>{value}", toml, flags=re.S)
        assert n == 1, f"{name}: no [{section}] timeout_sec to shorten"
    (folder / "task.toml").write_text(toml)
    return next(iter_tasks(folder))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
            raise RuntimeError(f"{url}: process exited ({proc.returncode}): {out[-800:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} not healthy within {timeout_s} s")
        time.sleep(0.2)


@contextlib.contextmanager
def run_stand_in(
    *, attack: str | None = None, p_correct: float = 0.0, port: int | None = None
) -> Iterator[str]:
    """The stand-in on loopback (own process), scripted from the example tasks. Started as
    `python -m standin`, the program `rollouts policy-stub` execs with the same arguments: a
    case does not wait for the whole CLI to be imported first (about 1.5 s of CPU each, in a
    corpus of ~90 cases; the CLI is tests/e2e/test_policy_stub_cli.py's)."""
    port = port or free_port()
    cmd = [*STANDIN, "--tasks", str(EXAMPLES)]
    cmd += ["--port", str(port), "--p-correct", str(p_correct), "--p-malformed", "0"]
    cmd += ["--max-model-len", "32768"]
    if attack:
        cmd += ["--attack", attack]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url + "/health", proc)
        yield url
    finally:
        stop_process(proc, timeout_s=10)


def containers_owned_by(pid: int) -> list[str]:
    """Containers created by process `pid` of this host (owner label `<host>:<pid>:<start>`)."""
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", "label=rollouts.managed=true",
         "--format", '{{.ID}} {{.Label "rollouts.owner"}}'],
        capture_output=True, text=True, check=True, env=ENGINE_ENV,
    ).stdout  # fmt: skip
    prefix = f"{socket.gethostname()}:{pid}:"
    return [cid for cid, _, owner in (line.partition(" ") for line in out.splitlines())
            if owner.startswith(prefix)]  # fmt: skip


def containers_labelled(label: str, value: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={label}={value}"],
        capture_output=True,
        text=True,
        check=True,
        env=ENGINE_ENV,
    ).stdout
    return out.split()
