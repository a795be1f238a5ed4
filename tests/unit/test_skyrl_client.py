"""clients/skyrl.py without SkyRL (the suite's Python 3.11): the conversion to SkyRL's fields,
the regrouping that makes SkyRL's `rloo` give the service's rloo_n, and RolloutsGenerator's
call logic against a scripted service. SkyRL's own code judges the same output in
tests/e2e/test_skyrl.py."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace
from typing import Any

import pytest

from clients import skyrl as cs
from clients import skyrl_output as so
from clients.trainer import Batch
from service.advantages import AdvantageConfig, compute_advantages
from service.trajectory import Status, Timings, Trajectory
from service.wire import Group


def traj(
    group: str,
    index: int,
    status: Status = Status.ok,
    reward: float | None = 1.0,
    *,
    response: list[int] | None = None,
    prompt: list[int] | None = None,
    stop: str | None = "stop",
    advantage: float | None = 0.0,
    total_s: float = 1.0,
) -> Trajectory:
    response = [5, 6, 7] if response is None else response
    mask = [1 if i % 3 != 2 else 0 for i in range(len(response))]
    return Trajectory(
        trajectory_id=f"{group}.s{index}",
        rollout_id=group.split(".")[0],
        group_id=group,
        task_id="task-" + group,
        sample_index=index,
        prompt_token_ids=[1, 2] if prompt is None else prompt,
        response_token_ids=response,
        loss_mask=mask,
        rollout_logprobs=[-0.5 if m else 0.0 for m in mask],
        reward=reward,
        status=status,
        stop_reason=stop,
        advantage=advantage,
        timings=Timings(total_s=total_s),
    )


def mixed_group(group: str = "r.g0") -> list[Trajectory]:
    rewards = [1.0, 0.0, None, None, 1.0]
    statuses = [Status.ok, Status.ok, Status.sandbox_error, Status.policy_error, Status.ok]
    excluded = [s != Status.ok for s in statuses]
    adv = compute_advantages(rewards, excluded, AdvantageConfig(min_group_size=3))
    out = []
    for i, (r, s, a) in enumerate(zip(rewards, statuses, adv, strict=True)):
        empty = s == Status.policy_error  # its first turn failed: no tokens at all
        out.append(
            traj(
                group,
                i,
                s,
                r,
                advantage=a,
                total_s=float(i + 1),
                response=[] if empty else None,
                prompt=[] if empty else None,
                stop=None if empty else "stop",
            )  # fmt: skip
        )
    return out


def test_masked_samples_train_nothing_and_get_the_neutral_reward() -> None:
    ts = mixed_group()
    out = so.generator_output(ts, pad_token_id=9)
    assert out["rewards"] == [1.0, 0.0, pytest.approx(2 / 3), pytest.approx(2 / 3), 1.0]
    assert out["loss_masks"][2] == [0, 0, 0] and out["rollout_logprobs"][2] == [0.0] * 3
    assert out["response_ids"][2] == [5, 6, 7]  # the tokens stay, untrained
    # The first-turn failure: one pad token, mask 0, logprob 0; the group's prompt borrowed.
    assert out["response_ids"][3] == [9] and out["loss_masks"][3] == [0]
    assert out["rollout_logprobs"][3] == [0.0] and out["prompt_token_ids"][3] == [1, 2]
    assert out["stop_reasons"] == ["stop", "stop", "stop", "abort", "stop"]
    assert out["exclude_from_baseline"] == [False, False, True, True, False]
    assert out["advantages"][2:4] == [0.0, 0.0]
    # Graded samples are untouched.
    assert out["loss_masks"][0] == ts[0].loss_mask
    assert out["rollout_logprobs"][0] == ts[0].rollout_logprobs
    tids = out["trajectory_ids"]
    assert [(t.instance_id, t.repetition_id) for t in tids] == [("r.g0", i) for i in range(5)]
    assert tids[1].to_string() == "r.g0_1"
    assert out["uids"] == ["r.g0"] * 5
    assert out["trajectory_generation_times"] == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_every_response_token_carries_its_policy_version() -> None:
    """SkyRL's per-sample extras: `response_policy_versions` aligned with `response_ids` (a turn
    that spans an update changes version at the token; -1 where the mask is 0), and
    `policy_versions` the oldest weights behind the sample (staleness counts from there)."""
    spanning = traj("r.g0", 0, response=[5, 6, 7, 8, 9, 10])
    spanning = spanning.model_copy(
        update={"response_policy_versions": [3, 4, -1, 4, 4, -1], "policy_version_start": 3}
    )
    ts = [spanning, *mixed_group()[1:]]
    out = so.generator_output(ts, pad_token_id=9)
    assert out["response_policy_versions"][0] == [3, 4, -1, 4, 4, -1]
    assert out["policy_versions"][0] == 3
    for response, versions in zip(
        out["response_ids"], out["response_policy_versions"], strict=True
    ):
        assert len(response) == len(versions)
    assert out["response_policy_versions"][3] == [-1]  # the padded empty response


def test_a_group_with_no_graded_sample_and_context_length() -> None:
    failed = [traj("r.g1", i, Status.policy_error, None, response=[], prompt=[]) for i in range(2)]
    out = so.generator_output(failed)
    assert out["rewards"] == [0.0, 0.0] and out["prompt_token_ids"] == [[0], [0]]
    long = traj("r.g2", 0, Status.context_length, 0.0, stop="stop")
    assert so.generator_output([long])["stop_reasons"] == ["length"]


def test_rollout_metrics_as_skyrl_computes_them() -> None:
    out = so.generator_output(mixed_group())
    m = out["rollout_metrics"]
    lengths = [3, 3, 3, 1, 3]
    assert m["generate/min_num_tokens"] == 1 and m["generate/max_num_tokens"] == 3
    assert m["generate/avg_num_tokens"] == pytest.approx(sum(lengths) / 5)
    mean = sum(lengths) / 5
    std = math.sqrt(sum((x - mean) ** 2 for x in lengths) / 5)
    assert m["generate/std_num_tokens"] == pytest.approx(std)
    # rewards 1, 0, 2/3, 2/3, 1: positive ones have 3, 3, 1, 3 tokens; the zero one 3.
    assert m["generate/avg_tokens_non_zero_rewards"] == pytest.approx(10 / 4)
    assert m["generate/avg_tokens_zero_rewards"] == 3.0
    assert m["generate/avg_assistant_tokens"] == pytest.approx((2 + 2 + 0 + 0 + 2) / 5)
    assert m["generate/tokens_per_turn_mean"] == 2.0 and m["generate/tokens_per_turn_max"] == 2
    # numpy's linear percentile of 1..5 at 90: 4.6
    assert m["generate/trajectory_time_completion_p90"] == pytest.approx(4.6)
    assert m["generate/trajectory_time_completion_max"] == 5.0
    assert m["rollouts/num_masked"] == 2


def test_to_skyrl_converts_the_batch_group_by_group() -> None:
    """A batch of two groups: one entry per trajectory, in the batch's order, the pad token
    passed on, the service's advantages (rloo_n over 1, 0, 1: 0.5, -1, 0.5; masked: 0)."""
    groups = [
        Group(group_id=g, task_id="t", rollout_id="r", trajectories=mixed_group(g)[:n])
        for g, n in (("r.g1", 2), ("r.g0", 5))
    ]
    out = Batch("b", 0.0, groups).to_skyrl(pad_token_id=9)
    assert out["uids"] == ["r.g1"] * 2 + ["r.g0"] * 5
    assert [t.to_string() for t in out["trajectory_ids"]] == [
        "r.g1_0", "r.g1_1", "r.g0_0", "r.g0_1", "r.g0_2", "r.g0_3", "r.g0_4",
    ]  # fmt: skip
    assert out["response_ids"][5] == [9] and out["loss_masks"][5] == [0]  # r.g0.s3: no tokens
    assert out["advantages"] == [0.5, -1.0, 0.5, -1.0, 0.0, 0.0, 0.5]
    assert out["rewards"] == [1.0, 0.0, 1.0, 0.0, pytest.approx(2 / 3), pytest.approx(2 / 3), 1.0]
    assert out["exclude_from_baseline"] == [False, False, False, False, True, True, False]


def skyrl_rloo(rewards: list[float]) -> list[float]:
    """SkyRL's rloo over one uid's samples, written out: (r - mean) * n / (n - 1); alone: 0."""
    n = len(rewards)
    return [(r - sum(rewards) / n) * n / (n - 1) if n > 1 else 0.0 for r in rewards]


def test_baseline_uids_make_rloo_the_service_rloo_n() -> None:
    cases = [  # rewards, min_group_size, the service's advantages (RLOO: r - mean of the others)
        ([1.0, 0.0, None, 1.0, 0.0], 3, [2 / 3, -2 / 3, 0, 2 / 3, -2 / 3]),  # masked: out
        ([1.0, None, None, None, 0.0], 3, [0, 0, 0, 0, 0]),  # too few graded samples
        ([1.0, 1.0, None, 1.0], 2, [0, 0, 0, 0]),  # zero variance
        ([0.0, 1.0, 0.5, 0.25], 4, [-7 / 12, 3 / 4, 1 / 12, -1 / 4]),  # nothing masked
    ]
    for rewards, min_size, want in cases:
        excluded = [r is None for r in rewards]
        service = compute_advantages(rewards, excluded, AdvantageConfig(min_group_size=min_size))
        assert service == pytest.approx(want), (rewards, min_size)
        neutral = sum(r for r in rewards if r is not None) / sum(not e for e in excluded)
        filled = [neutral if r is None else r for r in rewards]
        uids = ["u"] * len(rewards)
        grouped = so.baseline_uids(uids, excluded, service)
        got = [0.0] * len(rewards)
        for uid in set(grouped):
            idx = [i for i, g in enumerate(grouped) if g == uid]
            for i, a in zip(idx, skyrl_rloo([filled[i] for i in idx]), strict=True):
                got[i] = a
        assert got == pytest.approx(want), (rewards, min_size)


def test_service_advantages_mixin_regroups_and_checks_the_config() -> None:
    class Capture:
        cfg = None

        def __init__(self, cfg: Any) -> None:
            self.cfg = cfg

        def convert_to_training_input(self, generator_output: dict, uids: list[str]) -> Any:
            return uids

    def cfg(estimator: str = "rloo", dynamic: str | None = None) -> Any:
        algorithm = SimpleNamespace(
            advantage_estimator=estimator,
            dynamic_sampling=SimpleNamespace(type=dynamic),
            use_kl_in_reward=False,
        )
        return SimpleNamespace(
            trainer=SimpleNamespace(algorithm=algorithm),
            generator=SimpleNamespace(step_wise_trajectories=False),
        )

    Hooked = type("Hooked", (cs.ServiceAdvantagesMixin, Capture), {})
    with pytest.raises(ValueError, match="advantage_estimator=rloo"):
        Hooked(cfg("grpo"))
    with pytest.raises(ValueError, match="dynamic_sampling"):
        Hooked(cfg(dynamic="filter"))
    trainer = Hooked(cfg())
    out = so.generator_output(mixed_group())
    got = trainer.convert_to_training_input(out, out["uids"])
    # The graded samples keep the group's uid; each masked one gets one of its own (SkyRL gives
    # a lone sample advantage 0).
    assert got[0] == got[1] == got[4] == "r.g0"
    assert len({got[2], got[3], "r.g0"}) == 3
    with pytest.raises(ValueError, match="exclude_from_baseline"):
        trainer.convert_to_training_input({"response_ids": [[1]]}, ["u"])


def test_without_skyrl_the_look_alike_trajectory_id() -> None:
    try:
        so.skyrl_base()
    except ImportError:
        assert so.trajectory_id_class() is so.TrajectoryID
        with pytest.raises(ImportError, match="rollouts\\[skyrl\\]"):
            cs.RolloutsGenerator  # noqa: B018
    else:
        pytest.skip("SkyRL is installed here")


def test_sampling_parameters_map_to_the_service() -> None:
    common = {"max_tokens": 1024, "temperature": 0.7, "top_p": 0.9, "top_k": -1, "min_p": 0.0}
    vllm = {**common, "logprobs": None, "skip_special_tokens": True, "stop": ("a",), "seed": None}
    got = cs.service_sampling(vllm, {"seed": 3})
    assert got == {**common, "stop": ["a"], "seed": 3}
    assert cs.service_sampling({"max_new_tokens": 5}, None) == {"max_tokens": 5}
    assert cs.service_sampling(None, None) is None


# --------------------------------------------------------------------------- the generator


class FakeService:
    """Answers RolloutsGenerator's client calls: each submitted task becomes a group whose
    samples arrive out of order; rollouts named in `drop` deliver nothing (dropped)."""

    def __init__(self, drop: int = 0) -> None:
        self.drop = drop
        self.submits: list[dict[str, Any]] = []
        self.versions: list[int] = []
        self.acked: list[str] = []
        self.pending: dict[str, list[Group]] = {}

    async def __aenter__(self) -> FakeService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

    async def submit(self, tasks_path: str, n_samples: int, **kw: Any) -> str:
        rid = f"r{len(self.submits)}"
        self.submits.append({"n": n_samples, **kw})
        groups = []
        for k, task in enumerate(kw["ids"]):
            gid = f"{rid}.g{k}"
            ts = [traj(gid, i, reward=float(i % 2)) for i in reversed(range(n_samples))]
            groups.append(Group(group_id=gid, task_id=task, rollout_id=rid, trajectories=ts))
        if self.drop:
            self.drop -= 1
            groups = []
        self.pending[rid] = groups
        return rid

    async def lease(self, max_groups: int, rollout_id: str, wait_s: float) -> Any:
        groups = self.pending.pop(rollout_id, [])
        if not groups:
            return None, 0

        async def ack(batch: Batch) -> None:
            self.acked.append(batch.batch_id)

        return Batch(f"b-{rollout_id}", 0.0, groups, ack), 0

    async def set_policy(self, version: int, max_staleness: int | None) -> None:
        self.versions.append(version)

    async def cancel(self, rollout_id: str) -> None:
        pass


def generator(service: FakeService, **options: Any) -> Any:
    base = SimpleNamespace(TrajectoryID=so.TrajectoryID)
    cls = type("G", (cs._RolloutsGenerator,), {"_skyrl": base})
    gen = cls("http://x", tasks_path="/data/tasks", **options)
    gen._client = lambda: service  # type: ignore[method-assign]
    return gen


def skyrl_input(tasks: list[str], n: int, step: int = 1, phase: str = "train") -> dict:
    """What SkyRL's prepare_generator_input builds: each prompt n times, uid = row index."""
    return {
        "prompts": [[{"role": "user", "content": t}] for t in tasks for _ in range(n)],
        "env_extras": [{"task_id": t} for t in tasks for _ in range(n)],
        "trajectory_ids": [
            so.TrajectoryID(instance_id=str(u), repetition_id=k)
            for u in range(len(tasks))
            for k in range(n)
        ],
        "sampling_params": {"max_tokens": 64, "temperature": 1.0},
        "batch_metadata": SimpleNamespace(global_step=step, training_phase=phase),
    }


def test_generate_returns_skyrl_order_with_one_rollout_per_repeated_task() -> None:
    service = FakeService()
    gen = generator(service)
    out = asyncio.run(gen.generate(skyrl_input(["a", "b", "a"], n=4, step=3)))
    # "a" twice: two rollouts, each task once in each.
    assert [s["ids"] for s in service.submits] == [["a", "b"], ["a"]]
    assert service.submits[0]["sampling"] == {"max_tokens": 64, "temperature": 1.0}
    assert service.versions == [3] and len(service.acked) == 2
    assert out["uids"] == [str(u) for u in range(3) for _ in range(4)]
    assert [t.repetition_id for t in out["trajectory_ids"]] == [0, 1, 2, 3] * 3
    assert out["rewards"] == [0.0, 1.0, 0.0, 1.0] * 3  # sample_index k at repetition k
    assert [g.task_id for g in gen.last_groups] == ["a", "b", "a"]
    asyncio.run(gen.generate(skyrl_input(["b"], n=4, step=2)))
    assert service.versions == [3]  # versions only go forward


def test_dropped_groups_are_submitted_again_and_eval_takes_any_group_size() -> None:
    service = FakeService(drop=1)
    gen = generator(service, advantage={"min_group_size": 2})
    out = asyncio.run(gen.generate(skyrl_input(["a"], n=2)))
    assert len(service.submits) == 2 and gen.resubmitted_groups == 1
    assert len(out["response_ids"]) == 2
    asyncio.run(gen.generate(skyrl_input(["a"], n=1, phase="eval")))
    assert service.submits[-1]["advantage"] == {"min_group_size": 2, "estimator": "rloo"}
    gone = generator(FakeService(drop=5), max_resubmits=1)
    with pytest.raises(RuntimeError, match="dropped"):
        asyncio.run(gone.generate(skyrl_input(["a"], n=2)))


def test_bad_inputs_are_refused() -> None:
    gen = generator(FakeService())
    batch = skyrl_input(["a"], n=2)
    batch["env_extras"] = [{}, {}]
    with pytest.raises(ValueError, match="task_id"):
        asyncio.run(gen.generate(batch))
    batch = skyrl_input(["a", "b"], n=1)
    batch["trajectory_ids"] = [so.TrajectoryID("0", 0), so.TrajectoryID("0", 1)]
    with pytest.raises(ValueError, match="two tasks"):
        asyncio.run(gen.generate(batch))
    with pytest.raises(TypeError, match="unknown RolloutsGenerator option"):
        generator(FakeService(), n_sample=3)
