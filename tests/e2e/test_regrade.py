"""Regrading stored rollouts without re-running the agent: real Docker verifiers, the stand-in
policy, real SQLite, the CLI and the HTTP API.

- `rollouts collect`, then one task's tests change: `rollouts regrade` changes exactly that
  task's samples, keeps their history, recomputes advantages; one killed midway (a grading
  recorded, its group not yet settled) leaves the group serving its first grading whole, and
  resumes with no grading twice; an infrastructure failure exits 1 and records nothing.
- A grader fix: samples collected under a guard that let an always-equal answer through (a
  test double of the guard) scored 1.0; `POST /v1/rollouts/{id}/regrade` with the real grader
  turns them into a flagged 0, and the trainer that had acked them gets the regraded group as
  a batch of its own (`regraded: true`), its first grading kept.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from clients.commands.policy_stub import stand_in_policy
from clients.trainer import ServiceError, TrainerClient
from sandboxes.docker_backend import BackendSettings, DockerBackend
from sandboxes.images import ensure_base_image
from sandboxes.reward import VALUE_HACK, grade
from sandboxes.verifier import Grader, default_grader, grader_version
from service.app import create_app
from service.components import Components, settings_task_loader
from service.episode import EpisodeRunner
from service.policy.client import PolicyClient
from service.settings import PolicySettings, ServiceSettings, Settings
from service.store import DB_NAME
from service.store.reader import iter_trajectory_rows
from service.store.schema import connect

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "tasks"
KEY = "k" * 32
CHANGED, UNCHANGED = "camel-to-snake", "gcd-of-list"


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    cmd = [sys.executable, "-m", "clients.cli", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def stored(store: Path) -> dict[str, dict[str, Any]]:
    """Every committed trajectory of the store, by id, as exported (read-only, while a writer
    may be running)."""
    return {r["trajectory_id"]: r for rows in iter_trajectory_rows(store) for r in rows}


def recorded_unserved(store: Path) -> list[str]:
    """Trajectories with a regrade's grading recorded and not yet served (their group not yet
    settled), read-only."""
    conn = connect(store / DB_NAME, readonly=True)
    try:
        return sorted(t for (t,) in conn.execute("SELECT trajectory_id FROM staged_gradings"))
    finally:
        conn.close()


def test_changed_tests_regrade_that_task_only_and_a_killed_regrade_resumes(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    for name in (CHANGED, UNCHANGED):
        shutil.copytree(EXAMPLES / name, tasks / name)
    run = cli("collect", "--tasks", str(tasks), "--out", str(tmp_path / "out"), "--n-samples",
              "4", "--p-correct", "0.5", "--seed", "5")  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    store = Path(run.stdout.strip().splitlines()[-1]).with_suffix(".store")
    before = stored(store)
    assert len(before) == 8 and all(len(t["gradings"]) == 1 for t in before.values())
    changed = sorted(tid for tid, t in before.items() if t["task_id"] == CHANGED)
    passed = [tid for tid in changed if before[tid]["reward"] == 1.0]
    # The seed gives the changed task's group both rewards, so its advantages are not all 0.
    assert 0 < len(passed) < 4, [before[t]["reward"] for t in changed]
    rollout = before[changed[0]]["rollout_id"]

    # The task's tests change after collection: no solution passes them any more.
    test_file = tasks / CHANGED / "tests" / "test_solution.py"
    test_file.write_text(
        test_file.read_text() + '\n\ndef test_added_later():\n    assert fn("x") == "y"\n'
    )

    # An engine fault (no such image): exit 1, each sample named, nothing recorded.
    bad = cli("regrade", "--data-dir", str(store), "--image", "rollouts-no-such-image:0")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert sorted(line.split(": ")[1] for line in bad.stderr.splitlines()
                  if line.startswith("failed: ")) == changed  # fmt: skip
    assert all(len(t["gradings"]) == 1 for t in stored(store).values())

    # Killed after its first grading, before its group's last: recorded, not yet settled ...
    cmd = [sys.executable, "-m", "clients.cli", "regrade", "--data-dir", str(store),
           "--tasks", str(tasks), "--task", CHANGED, "--concurrency", "1"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not recorded_unserved(store):
            assert proc.poll() is None and time.monotonic() < deadline, "no grading recorded"
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done = recorded_unserved(store)
    assert 1 <= len(done) < len(changed), "the regrade was not killed midway"
    # ... its group still serves the first grading whole: rewards and advantages as collected.
    cut = stored(store)
    for tid in changed:
        assert len(cut[tid]["gradings"]) == 1, tid
        assert (cut[tid]["reward"], cut[tid]["advantage"]) == (
            before[tid]["reward"],
            before[tid]["advantage"],
        )

    # ... and run again (the rollouts' own tasks path this time): it grades the rest, adds no
    # grading twice, and reports every change of the changed task, the killed run's too.
    again = cli("regrade", "--data-dir", str(store))
    assert again.returncode == 0, again.stdout + again.stderr
    summary = again.stdout.strip().splitlines()[-1]
    assert summary.startswith(
        f"8 samples: {len(changed) - len(done)} graded again, {4 + len(done)} already graded"
    ), summary
    # No solution passes the new tests, the task's own oracle neither: the task is uncalibrated
    # now, so its samples are graded in the fallback, flagged `unguarded` (those that stay at 0
    # are "newly flagged").
    failed_before = len(changed) - len(passed)
    assert f"changes: 1→0: {len(passed)}, newly flagged: {failed_before};" in summary, summary
    assert all(tid in again.stdout for tid in passed)

    after = stored(store)
    new_digest = after[changed[0]]["tests_digest"]
    for tid, t in after.items():
        first = before[tid]
        if t["task_id"] == UNCHANGED:  # untouched: one grading, same reward and advantage
            assert len(t["gradings"]) == 1 and t["reward"] == first["reward"], tid
            assert (
                t["advantage"] == first["advantage"] and t["tests_digest"] == first["tests_digest"]
            )
            continue
        assert len(t["gradings"]) == 2, (tid, t["gradings"])  # once each, killed or not
        assert t["gradings"][0] == first["gradings"][0]  # history kept as it was
        assert t["reward"] == t["gradings"][1]["reward"] == 0.0
        assert "unguarded" in t["gradings"][1]["reward_flags"], t["gradings"][1]
        assert t["tests_digest"] == t["gradings"][1]["tests_digest"] == new_digest
        assert new_digest != first["tests_digest"]
        assert t["advantage"] == 0.0  # all 0 now: no signal (it had some)
    assert any(before[t]["advantage"] != 0.0 for t in changed)
    # The killed run's verifier container was reaped; nothing is left behind.
    label = f"label=rollouts.rollout_id={rollout}"
    left = subprocess.run(["docker", "ps", "-aq", "--filter", label], capture_output=True,
                          text=True, check=True)  # fmt: skip
    assert left.stdout.strip() == ""


def lax_grader() -> Grader:
    """A test double of the guard that lets an always-equal answer through: the tests' side
    of the process boundary compares with whatever the tested code answers, without decoys."""
    real = default_grader()
    judging = real.runtime["judging.py"].decode()  # (the trusted endpoint's Judge)
    head = "    def compare(self, proxy, op, other):\n"
    assert head in judging
    lax = judging.replace(head, head + '        return self.request("op", op, proxy, other)\n')
    runtime = {**real.runtime, "judging.py": lax.encode()}
    return Grader(grade, runtime, grader_version(runtime, b"test double"))


class NoRunner:
    async def run_group(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("nothing is collected after the restart")


def app_settings(data_dir: Path, policy_url: str) -> Settings:
    return Settings(
        service=ServiceSettings(
            data_dir=data_dir, api_key=KEY, tasks_roots=[EXAMPLES], allowed_hosts=["testserver"]
        ),
        policy=PolicySettings(urls=[policy_url]),
    )


def until(get: Callable[[], Any], done: Callable[[Any], bool], timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while not done(value := get()):
        assert time.monotonic() < deadline, value
        time.sleep(0.2)
    return value


def test_a_grader_fix_flags_a_hacked_pass_and_the_trainer_gets_it_as_a_regraded_batch(
    tmp_path: Path,
) -> None:
    asyncio.run(ensure_base_image())
    headers = {"Authorization": f"Bearer {KEY}"}
    lax = lax_grader()
    with stand_in_policy(str(EXAMPLES), attack="always_equal") as stand_in:

        async def collecting(settings: Settings, version: Callable[[], int]) -> Components:
            backend = DockerBackend(BackendSettings(reap_at_start=False), grader=lax)
            policy = PolicyClient([stand_in.url])
            runner = EpisodeRunner(policy, backend, current_version=version)

            async def aclose() -> None:
                await backend.aclose()
                await policy.aclose()

            return Components(runner, settings_task_loader(settings), aclose=aclose)

        body = {"tasks": {"path": str(EXAMPLES), "ids": [CHANGED]}, "n_samples": 2,
                "advantage": {"min_group_size": 2}}  # fmt: skip
        settings = app_settings(tmp_path, stand_in.url)
        with TestClient(create_app(settings, collecting), headers=headers) as c:
            rid = c.post("/v1/rollouts", json=body).json()["id"]
            lease = c.post("/v1/batches/lease", json={"wait_s": 300})
            assert lease.status_code == 200, lease.text
            (group,) = lease.json()["groups"]
            # The double let the hack through: a pass with nothing flagged.
            assert [(t["reward"], t["reward_flags"]) for t in group["trajectories"]] == [
                (1.0, []),
                (1.0, []),
            ]
            assert c.post(f"/v1/batches/{lease.json()['batch_id']}/ack").status_code == 200

    # The grader is fixed (the service restarts with the real one) and the rollout regraded.
    backend = DockerBackend(BackendSettings(reap_at_start=False))

    async def fixed(settings: Settings, _version: Callable[[], int]) -> Components:
        return Components(
            NoRunner(), settings_task_loader(settings), sandboxes=backend, aclose=backend.aclose
        )

    with TestClient(create_app(app_settings(tmp_path, "http://127.0.0.1:9"), fixed),
                    headers=headers) as c:  # fmt: skip
        trainer = TrainerClient("http://testserver")
        trainer._http = c  # the app in this process (a TestClient is an httpx.Client)
        with pytest.raises(ServiceError, match="404"):
            trainer.regrade_status(rid)
        assert trainer.regrade(rid).state == "running"
        status = until(lambda: trainer.regrade_status(rid), lambda s: s.state != "running", 300)
        assert status.state == "done" and status.failed == [], status
        assert (status.regraded, status.groups_offered) == (2, 1)
        assert [(ch.kind, ch.added_flags) for ch in status.changes] == [
            ("1→0", [VALUE_HACK]),
            ("1→0", [VALUE_HACK]),
        ]
        # Nothing the trainer acked comes back as ordinary work ...
        assert trainer.lease(wait_s=0) == (None, 0)
        # ... the regraded group comes to a trainer that asks for regraded groups: on the wire
        # marked `regraded`, and offered again when its lease ends unacknowledged.
        raw = c.post("/v1/batches/lease", json={"wait_s": 0, "regraded": True, "lease_s": 1})
        assert raw.status_code == 200 and raw.json()["regraded"] is True, raw.text
        time.sleep(1.2)
        batch, remaining = trainer.lease(wait_s=5, regraded=True)
        assert batch is not None and batch.regraded and remaining == 1
        (group,) = batch.groups
        assert group.group_id == raw.json()["groups"][0]["group_id"]
        for t in group.trajectories:
            assert (t.reward, t.reward_flags, t.advantage) == (0.0, [VALUE_HACK], 0.0)
            first, second = t.gradings
            assert (first.reward, first.reward_flags, first.grader_version) == (
                1.0,
                [],
                lax.version,
            )
            assert second.grader_version == default_grader().version
            assert (second.reward, second.reward_flags) == (0.0, [VALUE_HACK])
        batch.ack()
        assert trainer.lease(wait_s=0, regraded=True) == (None, 0)

        # Asked again: every sample is already graded by this grader on these tests.
        trainer.regrade(rid)
        status = until(lambda: trainer.regrade_status(rid), lambda s: s.state != "running", 60)
        assert (status.regraded, status.already_graded) == (0, 2)
        assert len(status.changes) == 2  # the changes this grader made, reported again
        unknown = c.post(f"/v1/rollouts/{rid}/regrade", json={"tasks_path": "/nowhere"})
        assert unknown.status_code == 422, unknown.text
        assert unknown.json()["detail"][0]["loc"] == ["body", "tasks_path"]
