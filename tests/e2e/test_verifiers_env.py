"""`rollouts serve-env` judged by verifiers 0.4.0's own code (tests/vf/: its venv, its EnvClient
and trace types): `health`, a graded `run` whose branch is the service's trajectory token for
token, a `cancel` mid-episode that leaves no container, and a summarized episode's segments as
separate branches. The policy here is the stand-in; test_real_vllm.py runs the same `run`
against the real vLLM engine.

Deterministic without sleeps: the cancel case holds the episode's first turn in the stand-in
(a keep pause) until the test has cancelled, and waits only for Docker to show the sandbox.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from sandboxes.docker_adapter import default_adapter
from service.trajectory import Message, Segment, SegmentKind, Status, Trajectory
from tests.e2e.live import API_KEY, TASKS, containers_of, serve, stand_in, wait_until
from tests.vf.env_server import judge, judge_fails, judging, serve_env, venv_python

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]
MODEL = "policy"


def served_model(url: str) -> str:
    return httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]


@pytest.fixture(scope="module")
def vf_python() -> Path:
    return venv_python()


def check_sample(sample: dict, prompt: list[int], response: list[int], mask: list[int], logprobs):
    assert sample["token_ids"] == prompt + response
    assert sample["sampled_mask"] == [False] * len(prompt) + [m == 1 for m in mask]
    assert sample["logprobs"] == [0.0] * len(prompt) + list(logprobs)
    assert sample["trainable"]


def test_run_is_graded_and_branch_is_the_trajectory_and_cancel_leaves_no_container(
    tmp_path: Path, vf_python: Path
) -> None:
    with (
        stand_in(tmp_path, p_correct=1.0, seed=3) as policy,
        # The service has no policy of its own: each run names the orchestrator's server.
        serve(tmp_path, [], "--allow-policy-url", policy.url, "--warm-containers", "0") as svc,
        serve_env(vf_python, svc.url, API_KEY, "--tasks", TASKS) as addr,
    ):
        spec = {
            "task_data": {"name": "camel-to-snake", "prompt": "ignored: the task is ours"},
            "base_url": policy.url + "/v1",
            "model": served_model(policy.url),
            "sampling": {"temperature": 1.0, "max_tokens": 512, "seed": 7},
        }
        got = judge(vf_python, "run", addr, stdin=spec)
        assert got["ok"] and got["rewards"] == {"reward": 1.0} and not got["errors"]
        info = got["info"]["rollouts"]
        r = svc.call("GET", f"/ui/api/trajectories/{info['trajectory_id']}")
        assert r.status_code == 200, r.text
        t = Trajectory.model_validate(r.json())
        assert t.status == Status.ok and t.reward == 1.0 and t.task_id == "camel-to-snake"
        [sample] = got["samples"]
        check_sample(
            sample, t.prompt_token_ids, t.response_token_ids, t.loss_mask, t.rollout_logprobs
        )
        assert got["num_turns"] == t.num_turns >= 1

        # A field the service cannot honour is refused by name, and nothing runs.
        bad = judge_fails(
            vf_python, "run", addr, stdin={**spec, "sampling": {"logit_bias": {"1": 2}}}
        )
        assert "sampling.logit_bias" in bad

        # cancel: the first turn is held in the stand-in until the client has cancelled.
        policy.pause()
        with judging(vf_python, "cancel", addr) as j:
            assert j.stdin is not None and j.stdout is not None
            j.stdin.write(json.dumps(spec) + "\n")
            j.stdin.flush()
            assert '"started"' in j.stdout.readline()
            held = wait_until(
                "the run's sandbox", lambda: containers_of([svc.process.pid]), 300, poll_s=0.1
            )
            assert len(held) == 1
            labels = default_adapter().client.api.inspect_container(held[0])["Config"]["Labels"]
            rollout_id = labels["rollouts.rollout_id"]
            assert svc.status(rollout_id)["status"] == "running"
            j.stdin.write("cancel\n")
            j.stdin.flush()
            assert '"cancelled": true' in j.stdout.readline()
            wait_until(
                "the cancelled run's sandbox to be removed",
                lambda: not containers_of([svc.process.pid]),
                120,
                poll_s=0.2,
            )
        policy.resume()
        assert svc.status(rollout_id)["status"] == "cancelled"


def test_each_segment_is_a_branch_and_a_masked_sample_carries_no_reward(
    vf_python: Path,
) -> None:
    main = {
        "prompt_token_ids": [1, 2, 3],
        "response_token_ids": [10, 11, 20, 21, 22, 12],
        "loss_mask": [1, 1, 0, 0, 0, 1],
        "rollout_logprobs": [-0.5, -0.25, 0.0, 0.0, 0.0, -1.5],
        "response_policy_versions": [0, 0, -1, -1, -1, 1],
    }
    summary = {
        "prompt_token_ids": [5, 6],
        "response_token_ids": [30, 31],
        "loss_mask": [1, 1],
        "rollout_logprobs": [-0.1, -0.2],
        "response_policy_versions": [0, 0],
    }
    messages = [
        Message(role="system", content="s"),
        Message(role="user", content="u"),
        Message(role="assistant", content="a1"),
        Message(role="user", content="o1"),
        Message(role="assistant", content="a2"),
    ]
    t = Trajectory(
        trajectory_id="t",
        rollout_id="r",
        group_id="g",
        task_id="camel-to-snake",
        sample_index=0,
        reward=1.0,
        status=Status.ok,
        messages=messages,
        segments=[
            Segment(kind=SegmentKind.summary, **summary),
            Segment(kind=SegmentKind.main, **main),
        ],
        **main,
    )
    spec = {"trajectory": t.model_dump(mode="json"), "task_data": {"name": "x"}, "model": MODEL}
    got = judge(vf_python, "branches", stdin=spec)
    assert got["ok"] and got["rewards"] == {"reward": 1.0}
    first, second = got["samples"]  # in node order: the summary's branch first
    check_sample(first, **_sample_args(summary))
    check_sample(second, **_sample_args(main))
    assert got["info"]["rollouts"]["segments"] == ["summary", "main"]

    masked = t.model_copy(update={"status": Status.sandbox_error, "reward": None, "segments": []})
    spec = {**spec, "trajectory": masked.model_dump(mode="json")}
    got = judge(vf_python, "branches", stdin=spec)
    assert not got["ok"] and got["rewards"] == {"reward": None}
    assert got["errors"] and "sandbox_error" in got["errors"][0]
    [sample] = got["samples"]
    check_sample(sample, **_sample_args(main))


def _sample_args(seg: dict) -> dict:
    return {
        "prompt": seg["prompt_token_ids"],
        "response": seg["response_token_ids"],
        "mask": seg["loss_mask"],
        "logprobs": seg["rollout_logprobs"],
    }
