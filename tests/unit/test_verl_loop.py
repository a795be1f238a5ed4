"""The verl agent loop's own logic (clients/verl.py), without verl: how a trajectory becomes
verl's output fields (a masked one: no token trained on, a neutral reward), how the samples of
one prompt that start together become one group, and what the loop's settings and a dataset
row must say. verl's own code judges the whole loop on a live service in
tests/e2e/test_real_vllm.py (test_verl_runs_the_rollouts_agent_loop_on_its_own_replica)."""

from __future__ import annotations

import asyncio

import pytest

from clients.verl import (
    GroupGatherer,
    LoopSettings,
    output_fields,
    sampling_of,
    task_of,
)
from service.trajectory import Status, Trajectory


def traj(index: int, reward: float | None, status: Status = Status.ok) -> Trajectory:
    return Trajectory(
        trajectory_id=f"t{index}",
        rollout_id="r",
        group_id="g",
        task_id="task",
        sample_index=index,
        policy_version_start=3,
        policy_version_end=5,
        prompt_token_ids=[1, 2, 3],
        response_token_ids=[10, 11, 20, 21, 12],
        loss_mask=[1, 1, 0, 0, 1],
        rollout_logprobs=[-0.5, -0.25, 0.0, 0.0, -1.0],
        reward=reward,
        status=status,
        exclude_from_baseline=status is Status.sandbox_error,
        num_turns=2,
    )


def test_a_graded_trajectory_is_verls_output_field_for_field() -> None:
    group = [traj(0, 1.0), traj(1, 0.0)]
    out = output_fields(group[0], group)
    assert out["prompt_ids"] == [1, 2, 3]
    assert out["response_ids"] == [10, 11, 20, 21, 12]
    assert out["response_mask"] == [1, 1, 0, 0, 1]
    assert out["response_logprobs"] == [-0.5, -0.25, 0.0, 0.0, -1.0]
    assert out["reward_score"] == 1.0 and out["num_turns"] == 2
    extra = out["extra_fields"]
    assert (extra["min_global_steps"], extra["max_global_steps"]) == (3, 5)
    assert extra["rollouts_masked"] is False and extra["rollouts_truncated"] is False
    # A wrong answer keeps its 0.
    assert output_fields(group[1], group)["reward_score"] == 0.0


def test_a_masked_trajectory_trains_no_token_and_moves_no_baseline() -> None:
    group = [traj(0, 1.0), traj(1, 0.0), traj(2, 1.0), traj(3, None, Status.sandbox_error)]
    out = output_fields(group[3], group)
    assert out["response_mask"] == [0] * 5
    assert out["reward_score"] == pytest.approx(2 / 3)  # its graded siblings' mean, never 0
    assert out["extra_fields"]["rollouts_masked"] is True
    alone = [traj(0, None, Status.sandbox_error)]
    assert output_fields(alone[0], alone)["reward_score"] == 0.0


def test_a_response_longer_than_verls_is_cut_as_verls_loops_cut_it() -> None:
    t = traj(0, 1.0)
    out = output_fields(t, [t], response_length=3)
    assert out["response_ids"] == [10, 11, 20] and out["response_mask"] == [1, 1, 0]
    assert len(out["response_logprobs"]) == 3 and out["extra_fields"]["rollouts_truncated"]


async def test_samples_that_start_together_go_as_one_group_and_later_ones_alone() -> None:
    gatherer = GroupGatherer()
    sent: list[int] = []

    async def send(n: int) -> list[Trajectory]:
        sent.append(n)
        await asyncio.sleep(0)
        return [traj(i, float(i % 2)) for i in reversed(range(n))]  # any order

    async def sample(key: str) -> int:
        t, group = await gatherer.join((key,), send)
        assert len(group) == sent[-1] or len(group) in sent
        return t.sample_index

    first = await asyncio.gather(*(sample("uid-1") for _ in range(4)), sample("uid-2"))
    assert sorted(first[:4]) == [0, 1, 2, 3] and first[4] == 0
    assert sorted(sent) == [1, 4]
    late = await sample("uid-1")  # the same prompt, started after its group went
    assert late == 0 and sent[-1] == 1


async def test_a_failed_group_fails_each_of_its_samples() -> None:
    gatherer = GroupGatherer()

    async def send(n: int) -> list[Trajectory]:
        raise RuntimeError("the service is down")

    results = await asyncio.gather(
        *(gatherer.join(("uid",), send) for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, RuntimeError) for r in results), results


def test_settings_rows_and_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROLLOUTS_URL", raising=False)
    monkeypatch.delenv("ROLLOUTS_TASKS", raising=False)
    with pytest.raises(ValueError, match="url"):
        LoopSettings.of({"tasks_path": "/data/tasks"})
    monkeypatch.setenv("ROLLOUTS_URL", "http://rollouts:8080")
    monkeypatch.setenv("ROLLOUTS_API_KEY", "k")
    s = LoopSettings.of({"tasks_path": "/data/tasks", "agent": {"max_turns": 4}, "name": "x"})
    assert (s.url, s.api_key, s.agent) == ("http://rollouts:8080", "k", {"max_turns": 4})
    assert task_of({"task_id": "a"}, "task_id") == "a"
    assert task_of({"extra_info": {"task_id": "b"}}, "task_id") == "b"
    with pytest.raises(ValueError, match="task_id"):
        task_of({"extra_info": {}}, "task_id")
    verl = {"temperature": 1, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": 1}
    assert sampling_of(verl, 512) == {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "repetition_penalty": 1.0,
        "max_tokens": 512,
    }
