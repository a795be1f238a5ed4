"""An agent that wrecks its own sandbox scores 0; it is never masked.

Masked samples get advantage 0, so if `kill -9 -1`, a full /tmp or an oversized /app ended as
`sandbox_error`, a policy that cannot solve a task would learn that wrecking its sandbox beats
an honest 0. Here each is done for real (stand-in policy typing into the tmux terminal, real
containers, real verifier): the episode goes on where it can, the verifier grades, nothing
leaks. Only faults from outside (container removed, engine gone) stay masked.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from clients.commands.policy_stub import STANDIN
from sandboxes.backend import SandboxExited, Verdict
from sandboxes.docker_backend import BackendSettings, DockerBackend
from sandboxes.images import BASE_TAG, ensure_base_image
from sandboxes.oracle import run_oracle
from sandboxes.pool import PoolSettings
from sandboxes.task import Task
from sandboxes.terminal import RESTARTED_MARKER, SCREEN_MARKER
from service.episode import EpisodeRunner
from service.policy.client import PolicyClient
from service.sample import AgentLimits, SamplingParams, sample_specs
from service.trajectory import Status, Trajectory
from tests.runtimes import both_runtimes

# The agent wrecking its own sandbox is graded under gVisor as under runc.
pytestmark = [pytest.mark.docker, both_runtimes]

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "tasks"
WORKSPACE_CAP = 8 << 20  # small, so filling /app past it is quick


@contextlib.contextmanager
def stand_in(attack: str) -> Iterator[str]:
    """The stand-in with `--attack NAME` on loopback: types the attack, then a wrong solution,
    then completes. (`python -m standin`, which `rollouts policy-stub` execs: without the
    CLI's import first.)"""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [*STANDIN, "--tasks", str(EXAMPLES)]
    cmd += ["--port", str(port), "--p-correct", "0", "--p-malformed", "0", "--attack", attack]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"policy-stub exited ({proc.returncode})"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, "policy-stub not healthy"
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _small_task(task: Task, storage_mb: int = 64) -> Task:
    """The example task with a small /app and /tmp, so a disk fill ends in a second."""
    env = replace(task.config.environment, storage_mb=storage_mb)
    config = replace(task.config, environment=env, agent_timeout_sec=60, verifier_timeout_sec=60)
    return replace(task, config=config)


def _labelled(rollout_id: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=rollouts.rollout_id={rollout_id}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


@pytest.fixture
async def small_backend(runtime: str):
    await ensure_base_image(BASE_TAG)
    settings = BackendSettings(
        pool=PoolSettings(warm_per_key=0),
        reap_at_start=False,
        max_workspace_bytes=WORKSPACE_CAP,
        runtime=runtime,
    )
    b = DockerBackend(settings)
    try:
        yield b
    finally:
        await b.aclose()


async def _episode(attack: str, task: Task, backend: DockerBackend) -> tuple[Trajectory, str]:
    rollout_id = f"selfinflicted-{attack}-{uuid.uuid4().hex[:8]}"
    got: list[Trajectory] = []

    async def keep(t: Trajectory) -> None:
        got.append(t)

    with stand_in(attack) as url:
        policy = PolicyClient([url + "/v1"], backoff_s=0.05)
        await policy.start()
        try:
            specs = sample_specs(
                task, rollout_id, 1, SamplingParams(seed=3), AgentLimits(max_turns=8)
            )
            await EpisodeRunner(policy, backend).run_group(task, specs, keep)
        finally:
            await policy.aclose()
    await backend.aclose()  # waits for the background removals
    assert _labelled(rollout_id) == [], "containers of this episode were left behind"
    (t,) = got
    return t, "\n".join(m.content for m in t.messages if m.role in ("user", "system"))


async def test_kill_all_in_terminal_restarts_it_and_is_graded(small_backend, example_task):
    t, seen = await _episode("kill_all", _small_task(example_task), small_backend)
    assert t.status is Status.ok, f"{t.status}: {seen[-600:]}"
    assert t.reward == 0.0
    assert RESTARTED_MARKER.strip() in seen, seen
    # The episode went on after the kill: the stand-in's later turns ran in the new session.
    assert t.num_turns >= 3


async def test_disk_fill_app_via_terminal_scores_zero(small_backend, example_task):
    t, seen = await _episode("disk_fill", _small_task(example_task), small_backend)
    assert t.status is Status.ok, f"{t.status}: {seen[-600:]}"
    assert t.reward == 0.0
    assert f"workspace exceeds {WORKSPACE_CAP} bytes" in t.verifier_output


async def test_disk_fill_tmp_via_terminal_scores_zero(small_backend, example_task):
    t, seen = await _episode("disk_fill_tmp", _small_task(example_task), small_backend)
    assert t.status is Status.ok, f"{t.status}: {seen[-600:]}"
    assert t.reward == 0.0
    # The verifier really ran on the (wrong) solution written after /tmp was full.
    assert "[rollouts] graded 0" not in t.verifier_output


async def test_workspace_too_large_solve_script_scores_zero(small_backend, example_task):
    rollout_id = f"selfinflicted-oracle-{uuid.uuid4().hex[:8]}"
    script = b"head -c 16000000 /dev/zero > /app/big\n"
    r = await run_oracle(
        _small_task(example_task),
        small_backend,
        solve_script=script,
        labels={"rollouts.rollout_id": rollout_id},
    )
    assert (r.verdict, r.reward) == (Verdict.graded, 0.0), r.output
    assert f"workspace exceeds {WORKSPACE_CAP} bytes" in r.output
    await small_backend.aclose()
    assert _labelled(rollout_id) == []


async def test_pid1_survives_kill_all_and_reaps_orphans(backend, example_task, run_labels):
    sandbox = await backend.create(example_task, run_labels)
    try:
        # kill(-1) spares only the caller and PID 1: the daemon dies, the container not. The
        # request answers as soon as its job is gone, never at its limit: under gVisor PID 1
        # once stopped reaping (1 such request in about 70 under load), its killed job stayed a
        # zombie and the request ran to its end. Three rounds, each a fresh chance of that.
        for _ in range(3):
            await sandbox.exec("setsid sleep 1000 > /dev/null 2>&1 < /dev/null &", timeout_s=30)
            r = await sandbox.exec("kill -9 -1", timeout_s=30)
            assert r.exit_code == 137 and not r.timed_out, r
            r = await sandbox.exec("ps -eo args=", timeout_s=30)
            assert "sleep 1000" not in r.output, r.output
        # Orphans reparented to PID 1 must be reaped, not pile up as zombies: each orphan's
        # process must end up gone (a zombie lingers until its parent reaps it). Waited for as
        # an end state, with a generous limit, never as a moment to look at.
        reaped = (
            "pids=$(for i in 1 2 3; do (sleep 0.1 > /dev/null & echo $!); done); "
            "for p in $pids; do n=0; while [ -e /proc/$p ]; do n=$((n+1)); "
            '[ $n -gt 250 ] && { echo "never reaped: $(cat /proc/$p/stat)"; exit 1; }; '
            "sleep 0.1; done; done; echo reaped"
        )
        r = await sandbox.exec(reaped, 60)
        assert r.exit_code == 0 and "reaped" in r.output, r.output
        info = await backend.adapter.inspect_container(sandbox.id)
        assert info["State"]["Running"] is True
    finally:
        await backend.destroy(sandbox)


async def test_exited_container_is_agent_caused_removed_one_is_not(backend, example_task):
    labels = {"rollouts.rollout_id": f"selfinflicted-exit-{uuid.uuid4().hex[:8]}"}
    exited = await backend.create(example_task, labels)
    removed = await backend.create(example_task, labels)
    try:
        # The engine's SIGKILL to PID 1 stands in for the kernel's OOM killer ending it.
        await backend.adapter.call(backend.adapter.client.api.kill, exited.id)
        with pytest.raises(SandboxExited, match="exited"):
            await exited.send_keys("echo hi\n", 1)
        with pytest.raises(SandboxExited):
            await exited.get_workspace()

        await backend.adapter.remove(removed.id)
        with pytest.raises(Exception) as info:
            await removed.send_keys("echo hi\n", 1)
        assert not isinstance(info.value, SandboxExited)
    finally:
        await backend.destroy(exited)
        await backend.destroy(removed)


async def test_terminal_degrades_when_its_own_log_cannot_be_written(
    backend, example_task, run_labels
):
    sandbox = await backend.create(example_task, run_labels)
    try:
        # Fill the service's own state tmpfs (the terminal log lives there). The terminal may
        # answer before a busy shell has even started dd: wait for the marker it prints after.
        seen = await sandbox.send_keys(
            "dd if=/dev/zero of=/run/rollouts/fill bs=1M status=none; echo FILLED-$((2*3))\n", 30
        )
        for _ in range(30):
            if "FILLED-6" in seen or SCREEN_MARKER in seen:
                break
            seen = await sandbox.send_keys("", 1)
        # More output than the slack left in the log's last page: the log write fails.
        out = await sandbox.send_keys(
            "head -c 20000 /dev/zero | tr '\\0' x; echo still-$((6*7))\n", 5
        )
        assert SCREEN_MARKER in out and "still-42" in out, out
        await sandbox.send_keys("rm -f /run/rollouts/fill\n", 5)
        await sandbox.send_keys("\n", 1)  # the first command after the fix may be lost
        out = await sandbox.send_keys("echo back-$((5*5))\n", 5)
        assert "back-25" in out and SCREEN_MARKER not in out, out
    finally:
        await backend.destroy(sandbox)


async def test_terminal_session_ended_by_the_agent_is_restarted(backend, example_task, run_labels):
    sandbox = await backend.create(example_task, run_labels)
    try:
        await sandbox.send_keys("cd /tmp\n", 2)
        out = await sandbox.send_keys("exit\n", 2)
        assert RESTARTED_MARKER in out, out
        out = await sandbox.send_keys("pwd\n", 2)
        assert "/app" in out and RESTARTED_MARKER not in out, out  # a fresh shell in /app
    finally:
        await backend.destroy(sandbox)
