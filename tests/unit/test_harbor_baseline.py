"""The Harbor baseline's own logic, without Harbor or Docker: the task folders it writes for
Harbor, and how it reads Harbor's result files into rewards and stage times."""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.harbor_baseline import (
    check_trials,
    harbor_task_toml,
    job_seconds,
    network_overlay,
    parse_trial_result,
    read_job,
    write_harbor_dataset,
)
from benchmarks.rounds import TrialFailed
from sandboxes.tasks import load_tasks

REPO = Path(__file__).resolve().parents[2]
IMAGE = "rollouts-env:0123456789abcdef"


@pytest.fixture(scope="module")
def tasks():
    return load_tasks(str(REPO / "examples" / "tasks"))[:2]


def _result(task: str = "camel-to-snake", **overrides):
    """A trial result.json in the shape Harbor 0.25 writes (only the fields read)."""
    data = {
        "task_name": task,
        "started_at": "2026-12-01T00:43:10.000000Z",
        "finished_at": "2026-12-01T00:43:25.500000Z",
        "environment_setup": {
            "started_at": "2026-12-01T00:43:10.250000Z",
            "finished_at": "2026-12-01T00:43:12.000000Z",
        },
        "agent_setup": {
            "started_at": "2026-12-01T00:43:12.000000Z",
            "finished_at": "2026-12-01T00:43:12.250000Z",
        },
        "agent_execution": {
            "started_at": "2026-12-01T00:43:12.250000Z",
            "finished_at": "2026-12-01T00:43:13.000000Z",
        },
        "verifier": {
            "started_at": "2026-12-01T00:43:14.000000Z",
            "finished_at": "2026-12-01T00:43:15.500000Z",
        },
        "verifier_result": {"rewards": {"reward": 1.0}},
        "exception_info": None,
    }
    data.update(overrides)
    return data


def test_parse_reads_reward_and_stages():
    trial = parse_trial_result(_result())
    assert trial.task == "camel-to-snake"
    assert trial.reward == 1.0
    assert trial.error is None
    assert trial.stages == {
        "setup": 1.75,
        "agent": 1.0,  # agent setup and execution together
        "verify": 1.5,
        "teardown": 10.0,  # verifier's end to the trial's end
        "total": 15.5,
    }


def test_parse_failed_trial_has_error_and_no_reward():
    data = _result(
        verifier_result=None,
        verifier=None,
        exception_info={"exception_type": "RuntimeError", "exception_message": "compose up"},
    )
    trial = parse_trial_result(data)
    assert trial.reward is None
    assert trial.error == "RuntimeError: compose up"
    assert "teardown" not in trial.stages and "verify" not in trial.stages


def test_parse_integer_reward_and_other_reward_keys():
    assert parse_trial_result(_result(verifier_result={"rewards": {"reward": 1}})).reward == 1.0
    # Only "reward" counts: a task whose verifier writes other keys is not graded as passed.
    other = parse_trial_result(_result(verifier_result={"rewards": {"accuracy": 1.0}}))
    assert other.reward is None


def test_check_trials_accepts_one_passing_trial_per_task():
    trials = [parse_trial_result(_result("a")), parse_trial_result(_result("b"))]
    check_trials(trials, ["b", "a"])


@pytest.mark.parametrize(
    "results, ids, message",
    [
        ([_result("a", verifier_result={"rewards": {"reward": 0.0}})], ["a"], "reward 0.0"),
        ([_result("a", verifier_result={"rewards": {"reward": 0.5}})], ["a"], "reward 0.5"),
        ([_result("a", verifier_result=None)], ["a"], "reward None"),
        (
            [_result("a", exception_info={"exception_type": "X", "exception_message": "m"})],
            ["a"],
            "X: m",
        ),
        ([_result("a")], ["a", "b"], "expected one trial"),
        ([_result("a"), _result("a")], ["a"], "expected one trial"),
        ([], ["a"], "expected one trial"),
    ],
)
def test_check_trials_fails_the_measurement(results, ids, message):
    with pytest.raises(TrialFailed, match=message):
        check_trials([parse_trial_result(r) for r in results], ids)


def test_read_job_and_its_span(tmp_path: Path):
    job = tmp_path / "bench"
    for i, task in enumerate(["b", "a"]):
        (job / f"{task}__x{i}").mkdir(parents=True)
        (job / f"{task}__x{i}" / "result.json").write_text(json.dumps(_result(task)))
    (job / "not-a-trial").mkdir()
    assert job_seconds(job) is None  # the job's own result.json is written last
    (job / "result.json").write_text(
        json.dumps({"started_at": "2026-12-01T00:43:10", "finished_at": "2026-12-01T00:43:40.5"})
    )
    assert sorted(t.task for t in read_job(job)) == ["a", "b"]
    assert job_seconds(job) == 30.5


def test_task_toml_runs_our_image_with_our_limits(tasks):
    task = tasks[0]
    config = tomllib.loads(harbor_task_toml(task, IMAGE))
    env = task.config.environment
    assert config["environment"] == {
        "docker_image": IMAGE,
        "build_timeout_sec": env.build_timeout_sec,
        "cpus": env.cpus,
        "memory_mb": env.memory_mb,
        "storage_mb": env.storage_mb,
    }
    assert config["agent"]["timeout_sec"] == task.config.agent_timeout_sec
    assert config["verifier"] == {"timeout_sec": task.config.verifier_timeout_sec}
    separate = tomllib.loads(harbor_task_toml(task, IMAGE, separate_verifier=True))
    assert separate["verifier"]["environment_mode"] == "separate"
    assert separate["artifacts"] == ["/app"]  # what the fresh verifier gets of the agent's work
    assert "artifacts" not in config


def test_task_toml_quotes_the_image():
    task = load_tasks(str(REPO / "examples" / "tasks"))[0]
    odd = 'img"with\\quotes:1'
    assert tomllib.loads(harbor_task_toml(task, odd))["environment"]["docker_image"] == odd


def test_dataset_has_every_file_and_runnable_scripts(tasks, tmp_path: Path):
    images = {t.id: IMAGE for t in tasks}
    write_harbor_dataset(tasks, images, tmp_path, separate_verifier=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(t.id for t in tasks)
    for task in tasks:
        folder = tmp_path / task.id
        assert (folder / "instruction.md").read_text() == task.instruction
        for sub, files in (
            ("environment", task.environment_files),
            ("tests", task.test_files),
            ("solution", task.solution_files),
        ):
            for rel, data in files.items():
                assert (folder / sub / rel).read_bytes() == data
        assert os.access(folder / "solution" / "solve.sh", os.X_OK)
        assert os.access(folder / "tests" / "test.sh", os.X_OK)


def test_network_overlay_for_no_network_tasks_only(tasks):
    def with_mode(task, mode):
        env = replace(task.config.environment, network_mode=mode)
        return replace(task, config=replace(task.config, environment=env))

    assert network_overlay(tasks) is (tasks[0].config.environment.network_mode == "none")
    assert network_overlay([with_mode(t, "none") for t in tasks]) is True
    assert network_overlay([with_mode(t, "bridge") for t in tasks]) is False
    with pytest.raises(ValueError, match="one network mode"):
        network_overlay([with_mode(tasks[0], "none"), with_mode(tasks[1], "bridge")])
