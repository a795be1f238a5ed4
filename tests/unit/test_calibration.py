"""Oracle calibration (sandboxes/calibration.py) without Docker: the real cache file, the real
episode runner over the fake sandbox backend (tests/fakes.py) and a scripted vLLM, and the
real service on loopback HTTP for the request option and the web view. The calibration of
real tasks through the real verifier is tests/docker/test_calibration_cli.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from clients.trainer import TrainerClient
from sandboxes.backend import Verdict, VerifyResult
from sandboxes.calibration import (
    CALIBRATED,
    UNCALIBRATED,
    Calibration,
    CalibrationCache,
    Calibrator,
    read_calibrations,
)
from sandboxes.reward import UNGUARDED, Grade
from sandboxes.verifier import default_grader, fallback_grade
from service.episode import EpisodeRunner
from service.metrics import Metrics
from service.sample import AgentLimits, SamplingParams, sample_specs
from service.trajectory import Status, Trajectory
from tests.fakes import FakeBackend
from tests.unit.live_service import KEY, Runner, Server
from tests.unit.test_api import TASKS, make_settings
from tests.unit.test_episode_runner import TASK, FakeVLLM, PolicyClient, solves

ORACLE = replace(TASK, solution_files={"solve.sh": b"echo solved > /app/out.txt\n"})
CALIBRATION = "calibration"  # the rollout id label of an oracle run


def oracle_scores(
    reward: float | None, verdict: Verdict = Verdict.graded, flags: tuple[str, ...] = ()
) -> Callable[[dict[str, str]], VerifyResult]:
    """A verifier whose oracle runs get `reward` and samples 1.0 (as the fallback would)."""

    def result(labels: dict[str, str]) -> VerifyResult:
        if labels.get("rollouts.rollout_id") == CALIBRATION:
            return VerifyResult(reward, verdict, "oracle output", flags=list(flags))
        return VerifyResult(1.0, Verdict.graded, "1 passed")

    return result


def calibrator(backend: FakeBackend, path: Path | None, version: str = "g1") -> Calibrator:
    return Calibrator(backend, CalibrationCache(path), grader_version=version)


async def test_a_task_is_calibrated_once_per_key_and_the_cache_outlives_the_process(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "calibration.json"
    backend = FakeBackend(verify_result=oracle_scores(1.0))
    cal = calibrator(backend, cache)
    # Three groups of one task start at once: one oracle run.
    results = await asyncio.gather(*(cal.start(ORACLE) for _ in range(3)))
    assert [r.outcome for r in results] == [CALIBRATED] * 3
    assert len(backend.verified) == 1 and backend.plain == [False]
    assert [c.task_id for c in read_calibrations(cache)] == [ORACLE.id]

    # Another process with the same cache file: nothing runs.
    again = FakeBackend(verify_result=oracle_scores(1.0))
    assert (await calibrator(again, cache).start(ORACLE)).calibrated
    assert again.verified == []
    # Changed tests, oracle or grader: a new key, calibrated again.
    changed = [
        (replace(ORACLE, test_files={"test.sh": b"#!/bin/sh\nexit 0\n"}), "g1"),
        (replace(ORACLE, solution_files={"solve.sh": b"true\n"}), "g1"),
        (ORACLE, "g2"),
    ]
    for task, version in changed:
        assert (await calibrator(again, cache, version).start(task)).calibrated
    assert len(again.verified) == 3
    assert len(read_calibrations(cache)) == 4


@pytest.mark.parametrize(
    ("reward", "verdict", "flags"),
    [
        (0.0, Verdict.graded, ()),  # the boundary fails the oracle
        (1.0, Verdict.graded, (UNGUARDED,)),  # scores 1, but not out of the agent's reach
        (0.0, Verdict.tests_timeout, ()),
    ],
)
async def test_an_oracle_that_does_not_score_one_unflagged_is_reported(
    tmp_path: Path, reward: float, verdict: Verdict, flags: tuple[str, ...]
) -> None:
    backend = FakeBackend(verify_result=oracle_scores(reward, verdict, flags))
    cal = calibrator(backend, tmp_path / "calibration.json")
    got = await cal.start(ORACLE)
    assert got.outcome == UNCALIBRATED and got.reward == reward and got.flags == list(flags)
    assert f"the oracle scored {reward}" in got.why and got.output == "oracle output"
    assert [c.task_id for c in cal.uncalibrated()] == [ORACLE.id]
    assert [c.outcome for c in read_calibrations(tmp_path / "calibration.json")] == [UNCALIBRATED]
    # /metrics: the gauge and the run counter.
    metrics = Metrics()
    metrics.bind_calibration(cal)
    text = generate_latest(metrics.registry).decode()
    assert "rollouts_uncalibrated_tasks 1.0" in text
    assert 'rollouts_calibrations_total{outcome="uncalibrated"} 1.0' in text


async def test_an_infrastructure_fault_caches_nothing_and_the_next_use_tries_again(
    tmp_path: Path,
) -> None:
    backend = FakeBackend(verify_result=oracle_scores(None, Verdict.infrastructure))
    cal = calibrator(backend, tmp_path / "calibration.json")
    assert await cal.start(ORACLE) is None
    assert await cal.start(ORACLE) is None
    assert len(backend.verified) == 2 and cal.runs["failed"] == 2
    assert not (tmp_path / "calibration.json").exists()
    # A task without an oracle has no calibration, and nothing runs.
    assert await cal.start(TASK) is None and len(backend.verified) == 2


def test_a_fallback_grade_is_flagged_unguarded_whatever_the_evidence_says() -> None:
    assert fallback_grade(Grade(1.0)).flags == [UNGUARDED]
    assert fallback_grade(Grade(1.0, [UNGUARDED])).flags == [UNGUARDED]
    zero = fallback_grade(Grade(0.0, ["no_reward"], "graded 0: the tests wrote no reward file"))
    assert zero.reward == 0.0 and zero.flags == ["no_reward", UNGUARDED]
    assert "calibration fallback" in zero.note and "no reward file" in zero.note


async def run_group(
    backend: FakeBackend, cal: Calibrator, uncalibrated: str, n: int = 2
) -> list[Trajectory]:
    vllm = FakeVLLM(solves)
    policy = PolicyClient(["http://a:8000"], backoff_s=0.001, transport=vllm.transport)
    runner = EpisodeRunner(policy, backend, calibrator=cal)
    got: list[Trajectory] = []

    async def on_trajectory(t: Trajectory) -> None:
        got.append(t)

    specs = sample_specs(ORACLE, "r1", n, SamplingParams(seed=1), AgentLimits(max_turns=8))
    specs = [replace(s, uncalibrated=uncalibrated) for s in specs]
    try:
        await runner.run_group(ORACLE, specs, on_trajectory)
    finally:
        await policy.aclose()
    assert backend.live == []
    return sorted(got, key=lambda t: t.sample_index)


async def test_samples_of_an_uncalibrated_task_are_graded_in_the_fallback(tmp_path: Path) -> None:
    backend = FakeBackend(verify_result=oracle_scores(0.0))
    got = await run_group(backend, calibrator(backend, tmp_path / "c.json"), "fallback")
    assert [(t.status, t.reward) for t in got] == [(Status.ok, 1.0)] * 2
    # The oracle through the boundary, then each sample in the fallback.
    oracle = [i for i, labels in enumerate(backend.verified)
              if labels["rollouts.rollout_id"] == CALIBRATION]  # fmt: skip
    assert [p for i, p in enumerate(backend.plain) if i not in oracle] == [True, True]
    assert [backend.plain[i] for i in oracle] == [False]


async def test_samples_of_a_calibrated_task_are_graded_through_the_boundary(
    tmp_path: Path,
) -> None:
    backend = FakeBackend(verify_result=oracle_scores(1.0))
    got = await run_group(backend, calibrator(backend, tmp_path / "c.json"), "drop")
    assert [(t.status, t.reward) for t in got] == [(Status.ok, 1.0)] * 2
    assert backend.plain == [False, False, False]


async def test_a_request_that_drops_uncalibrated_tasks_runs_none_of_their_samples(
    tmp_path: Path,
) -> None:
    backend = FakeBackend(verify_result=oracle_scores(0.0))
    got = await run_group(backend, calibrator(backend, tmp_path / "c.json"), "drop", n=3)
    assert [t.status for t in got] == [Status.cancelled] * 3  # masked: no reward, no advantage
    assert all(t.reward is None and "uncalibrated" in t.verifier_output for t in got)
    assert len(backend.created) == 1  # the oracle's sandbox only
    assert len(backend.verified) == 1


class RecordingRunner(Runner):
    def __init__(self) -> None:
        super().__init__()
        self.uncalibrated: list[str] = []

    async def run_group(self, task, samples, on_trajectory, on_episode_end=None, on_start=None):  # type: ignore[no-untyped-def, override]
        self.uncalibrated += [s.uncalibrated for s in samples]
        await super().run_group(task, samples, on_trajectory, on_episode_end, on_start)


def test_the_request_option_is_checked_at_the_boundary_and_reaches_the_samples(
    tmp_path: Path,
) -> None:
    runner = RecordingRunner()
    with Server(make_settings(tmp_path), runner) as server, server.client() as c:
        body = {"tasks": {"path": TASKS, "ids": ["camel-to-snake"]}, "n_samples": 2,
                "advantage": {"min_group_size": 2}}  # fmt: skip
        r = c.post("/v1/rollouts", json={**body, "uncalibrated": "sometimes"})
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "uncalibrated"]
        trainer = TrainerClient(server.url, api_key=KEY)
        for option in ("drop", None):  # None: the default
            rid = trainer.submit(TASKS, 2, ids=["camel-to-snake"], uncalibrated=option,
                                 advantage={"min_group_size": 2})  # fmt: skip
            # The lease's long poll returns once the group is complete.
            lease = {"rollout_id": rid, "wait_s": 30}
            assert c.post("/v1/batches/lease", json=lease).status_code == 200
        assert runner.uncalibrated == ["drop", "drop", "fallback", "fallback"]


def test_the_web_view_names_the_uncalibrated_tasks_of_this_grader(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    cache = CalibrationCache(settings.service.calibration_path)
    version = default_grader().version
    common = dict(reward=0.0, status="graded", why="the oracle scored 0.0 (status graded)")
    cache.put(Calibration("t-bad", "k1", UNCALIBRATED, grader_version=version, **common))
    cache.put(Calibration("t-old", "k2", UNCALIBRATED, grader_version="older", **common))
    cache.put(Calibration("t-good", "k3", CALIBRATED, 1.0, "graded", grader_version=version))
    with Server(settings, Runner()) as server, server.client() as c:
        overview = c.get("/ui/api/overview").json()
    assert [t["task_id"] for t in overview["uncalibrated"]] == ["t-bad"]
    assert overview["uncalibrated"][0]["why"] == common["why"]
    assert json.loads(settings.service.calibration_path.read_text())["calibrations"].keys() == {
        "k1", "k2", "k3"
    }  # fmt: skip


# ---- regrades honour calibration as collection does (service/regrade.py) ---------------------


async def _regraded(tmp_path: Path, oracle_reward: float, choice: str) -> tuple[FakeBackend, list]:
    """Two stored samples of ORACLE's task (graded 0 at collection), regraded on a fresh
    calibration cache: (the backend, each sample's latest grading)."""
    from service.advantages import AdvantageConfig
    from service.regrade import plan, run
    from service.store import GroupPlan, Store, group_id_for, sample_trajectory_id
    from service.wire import RolloutRequest, TasksSpec
    from tests.trajectories import make_trajectory
    from tests.unit.test_regrade_store import _graded, _kept

    store = Store(tmp_path / "data")
    store.open()
    try:
        request = RolloutRequest(tasks=TasksSpec(path="tasks"), n_samples=4, uncalibrated=choice)
        gid = group_id_for("r", 0)
        ids = [sample_trajectory_id(gid, k) for k in range(2)]
        await store.create_rollout("r", request.model_dump_json(), 0, AdvantageConfig(),
                                   [GroupPlan(gid, ORACLE.id, ids)])  # fmt: skip
        for k, tid in enumerate(ids):
            t = make_trajectory(tid, "r", gid, ORACLE.id, k, reward=0.0)
            await store.commit_trajectory(_kept(_graded(t), {"out.txt": b"solved\n"}))

        async def tasks(_rid: str, path: str, wanted: list[str]) -> dict:
            assert path == "tasks" and wanted == [ORACLE.id]
            return {ORACLE.id: ORACLE}

        backend = FakeBackend(verify_result=oracle_scores(oracle_reward))
        the_plan = await plan(store, tasks, rollout_id="r")
        cal = calibrator(backend, tmp_path / "c.json", version="g2")
        report = await run(store, backend, the_plan, grader_version="g2", calibrator=cal)
        assert report.regraded == 2 and not report.failed
        latest = [(await store.grading_history(tid))[-1] for tid in ids]
        return backend, latest
    finally:
        store.close()


async def test_a_regrade_grades_an_uncalibrated_tasks_samples_in_the_fallback(
    tmp_path: Path,
) -> None:
    backend, latest = await _regraded(tmp_path, 0.0, "fallback")
    # The oracle once, through the boundary; each sample then in the fallback, as collection.
    assert [labels["rollouts.rollout_id"] for labels in backend.verified] == [CALIBRATION, "r", "r"]
    assert backend.plain == [False, True, True]
    assert [(g["reward"], g["status"]) for g in latest] == [(1.0, "ok")] * 2
    # A regrade of a calibrated task's samples stays through the boundary.
    backend, latest = await _regraded(tmp_path / "calibrated", 1.0, "fallback")
    assert backend.plain == [False, False, False]


async def test_a_regrade_drops_an_uncalibrated_tasks_samples_when_its_request_says_so(
    tmp_path: Path,
) -> None:
    backend, latest = await _regraded(tmp_path, 0.0, "drop")
    assert len(backend.verified) == 1  # the oracle only: no sample graded through the boundary
    assert [(g["reward"], g["status"]) for g in latest] == [(None, "cancelled")] * 2
