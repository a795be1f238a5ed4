"""SkyRL 0.4's own code judges our step-wise output (`generator.step_wise_trajectories`) of
groups whose episodes were summarized (issue 36): `step_wise_output` on trajectories built
directly, and RolloutsGenerator(step_wise=True) through SkyRL's RayPPOTrainer.generate() on a
live service that collects summarized terminus-2 episodes (the stand-in policy). Runs in the
venv of tests/skyrl/skyrl_venv.py (torch and ray stubbed); started by tests/e2e/test_skyrl.py.
Prints one trajectory's step-wise form as JSON on stdout; a failed check raises (exit 1).

    python step_wise_judge.py --url URL --api-key KEY --tasks PATH --task-id ID
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(REPO)]

import stubs  # noqa: E402

stubs.install()

import skyrl.train.generators.utils as gu040  # noqa: E402
import skyrl.train.trainer as tr040  # noqa: E402
import skyrl.train.utils.trainer_utils as tu040  # noqa: E402
from skyrl.backends.skyrl_train.inference_servers.engine_utils import (  # noqa: E402
    get_sampling_params_for_backend as sampling040,
)
from skyrl.train.config import SkyRLTrainConfig  # noqa: E402

from clients import skyrl as cs  # noqa: E402
from clients import skyrl_output as so  # noqa: E402
from service.trajectory import Status  # noqa: E402
from tests.trajectories import plain, summarized  # noqa: E402

N = 2  # samples per prompt in the generator's call (each a whole stand-in episode)


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise AssertionError(msg)


def refused(out: dict[str, Any], num_prompts: int, why: str) -> None:
    try:
        tu040.validate_generator_output(num_prompts, out, step_wise=True)
    except AssertionError:
        return
    raise AssertionError(f"SkyRL's validator accepted {why}")


def direct() -> dict[str, Any]:
    """A group with two summarized samples (one masked), a plain one and a failed one."""
    ts = [
        summarized("r.g0.s0", "r", "r.g0", "t", 0, reward=1.0),
        plain("r.g0.s1", "r", "r.g0", "t", 1, reward=0.0),
        summarized("r.g0.s2", "r", "r.g0", "t", 2, reward=None, status=Status.sandbox_error),
        plain("r.g0.s3", "r", "r.g0", "t", 3, reward=1.0),
    ]
    out = so.step_wise_output(ts)
    tu040.validate_generator_output(len(ts), copy.deepcopy(out), step_wise=True)
    check(sum(out["is_last_step"]) == len(ts), "one last step per trajectory")
    other = [summarized("r.g1.s0", "r", "r.g1", "u", 0), plain("r.g1.s1", "r", "r.g1", "u", 1)]
    cat = gu040.concatenate_generator_outputs(
        [copy.deepcopy(out), so.step_wise_output(other)], step_wise=True
    )
    check(len(cat["response_ids"]) == len(out["response_ids"]) + 6, "concatenation lost steps")
    # The validator is not vacuous: the per-trajectory form, and steps out of order, fail it.
    refused(so.generator_output(ts), len(ts), "an output without is_last_step")
    shuffled = copy.deepcopy(out)
    for key in ("response_ids", "trajectory_ids", "is_last_step", "loss_masks", "rewards",
                "rollout_logprobs", "prompt_token_ids", "stop_reasons"):  # fmt: skip
        shuffled[key] = [shuffled[key][i] for i in (0, 5, 1, 2, 3, 4, *range(6, len(out[key])))]
    refused(shuffled, len(ts), "a trajectory's steps split by another's")
    return out


async def through_the_generator(args: argparse.Namespace) -> dict[str, Any]:
    cfg = SkyRLTrainConfig()
    cfg.generator.n_samples_per_prompt = N
    cfg.generator.step_wise_trajectories = True
    cfg.trainer.algorithm.advantage_estimator = "rloo"
    cs.check_trainer_config(cfg)  # step-wise is accepted by the service-advantages mixin
    cfg.generator.merge_stepwise_output = True
    try:
        cs.check_trainer_config(cfg)
        raise AssertionError("merge_stepwise_output was accepted")
    except ValueError:
        cfg.generator.merge_stepwise_output = False
    gen = cs.generator_class("skyrl")(
        args.url, tasks_path=args.tasks, api_key=args.api_key, step_wise=True, wait_s=5.0,
        advantage={"min_group_size": 2}, agent={"max_turns": 16},
        # A seed keeps the stand-in's script (the oracle) across a sample's turns and summary.
        sampling={"seed": 3, "max_tokens": 1024},
    )  # fmt: skip
    trainer = tr040.RayPPOTrainer.__new__(tr040.RayPPOTrainer)
    trainer.cfg, trainer.generator, trainer.all_metrics = cfg, gen, {}
    rows = [{"prompt": [{"role": "user", "content": "x"}], "env_class": None,
             "env_extras": {"task_id": args.task_id}, "uid": "0"}]  # fmt: skip
    params = sampling040("vllm", cfg.generator.sampling_params)
    inp, _ = gu040.prepare_generator_input(rows, N, params, "x", "train", 1)
    # SkyRL's own wrapper: it validates the output with step_wise=True.
    out = await tr040.RayPPOTrainer.generate(trainer, inp)
    (group,) = gen.last_groups
    by_index = {t.sample_index: t for t in group.trajectories}
    steps = [len(by_index[tid.repetition_id].all_segments()) for tid in inp["trajectory_ids"]]
    check(len(out["response_ids"]) == sum(steps) and max(steps) > 1, f"steps {steps}")
    i = 0
    for tid, n in zip(inp["trajectory_ids"], steps, strict=True):
        t = by_index[tid.repetition_id]
        for k, seg in enumerate(t.all_segments()):
            check(out["trajectory_ids"][i].to_string() == tid.to_string(), "step order")
            check(out["prompt_token_ids"][i] == seg.prompt_token_ids, "prompt of a step")
            check(out["response_ids"][i] == seg.response_token_ids, "response of a step")
            check(out["loss_masks"][i] == seg.loss_mask, "loss mask of a step")
            check(out["rollout_logprobs"][i] == seg.rollout_logprobs, "logprobs of a step")
            last = k == n - 1
            check(out["is_last_step"][i] is last, "is_last_step")
            check(out["rewards"][i] == (t.reward if last else 0.0), "reward on the last step")
            check(out["advantages"][i] == t.advantage, "advantage broadcast")
            i += 1
    # SkyRL's step-wise post-processing: uids from the trajectory ids, as its train loop does.
    uids = [tid.instance_id for tid in out["trajectory_ids"]]
    post, post_uids = tr040.RayPPOTrainer.postprocess_generator_output(
        trainer, copy.deepcopy(out), uids
    )
    check(post_uids == uids and len(post["response_ids"]) == len(uids), "postprocess")
    first = next(t for t in group.trajectories if t.segments)
    n = len(first.segments)
    start = next(i for i, tid in enumerate(out["trajectory_ids"])
                 if tid.repetition_id == first.sample_index)  # fmt: skip
    return {
        "trajectory_id": first.trajectory_id,
        "reward": first.reward,
        "advantage": first.advantage,
        "steps": [
            {
                "kind": seg.kind.value,
                "parent": seg.parent,
                "prompt_tokens": len(out["prompt_token_ids"][start + k]),
                "response_tokens": len(out["response_ids"][start + k]),
                "trained_tokens": sum(out["loss_masks"][start + k]),
                "versions": sorted({v for v in seg.response_policy_versions if v >= 0}),
                "trajectory_id": out["trajectory_ids"][start + k].to_string(),
                "is_last_step": out["is_last_step"][start + k],
                "reward": out["rewards"][start + k],
                "advantage": out["advantages"][start + k],
            }
            for k, seg in enumerate(first.segments)
        ][:n],
    }


def example_follows_the_config() -> None:
    """examples/skyrl's generator is step-wise exactly when SkyRL's config says so."""
    import importlib.util
    import os

    os.environ.update(ROLLOUTS_URL="http://127.0.0.1:1", ROLLOUTS_TASKS="/data/tasks")
    spec = importlib.util.spec_from_file_location(
        "main_rollouts", REPO / "examples" / "skyrl" / "main_rollouts.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    exp = mod.RolloutsPPOExp.__new__(mod.RolloutsPPOExp)
    tokenizer = type("Tokenizer", (), {"pad_token_id": 0})()
    for step_wise in (False, True):
        cfg = SkyRLTrainConfig()
        cfg.generator.step_wise_trajectories = step_wise
        gen = exp.get_generator(cfg, tokenizer, None)
        check(gen.options.step_wise is step_wise, "example: step_wise follows SkyRL's config")


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("--url", "--api-key", "--tasks", "--task-id"):
        p.add_argument(name, required=True)
    args = p.parse_args()
    direct()
    example_follows_the_config()
    example = asyncio.run(through_the_generator(args))
    print(json.dumps(example))


if __name__ == "__main__":
    main()
