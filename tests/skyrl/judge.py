"""SkyRL's own code judges RolloutsGenerator and Batch.to_skyrl() output on batches that a live
rollouts service collected, in skyrl-train 0.3.1 and skyrl 0.4.0 alike.

Runs in the Python 3.12 venv of tests/skyrl/skyrl_venv.py with torch and ray stubbed
(tests/skyrl/stubs.py); started by tests/e2e/test_skyrl.py, which owns the service, the
stand-in policy and the fault proxy in front of it. The judge asks for policy faults on stdout
("FAULT <mode>") and waits for "OK" on stdin. It writes a JSON report of every SkyRL function it
ran, on what, and the result; any failed check raises (exit status 1).

    python judge.py --url URL --api-key KEY --tasks PATH --task-ids a,b,c --report FILE
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import math
import sys
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(REPO)]

import stubs  # noqa: E402

stubs.install()

import skyrl.train.generators.base as base040  # noqa: E402
import skyrl.train.generators.utils as gu040  # noqa: E402
import skyrl.train.trainer as tr040  # noqa: E402
import skyrl.train.utils.trainer_utils as tu040  # noqa: E402
import skyrl_train.generators.base as base031  # noqa: E402
import skyrl_train.generators.utils as gu031  # noqa: E402
import skyrl_train.trainer as tr031  # noqa: E402
import skyrl_train.utils.trainer_utils as tu031  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from skyrl.backends.skyrl_train.inference_servers.engine_utils import (  # noqa: E402
    get_sampling_params_for_backend as sampling040,
)
from skyrl.train.config import SkyRLTrainConfig  # noqa: E402
from skyrl.train.fully_async_trainer import FullyAsyncRayPPOTrainer  # noqa: E402
from skyrl_train.inference_engines.utils import (  # noqa: E402
    get_sampling_params_for_backend as sampling031,
)

from clients import skyrl as cs  # noqa: E402
from clients import skyrl_output as so  # noqa: E402
from clients.trainer import AsyncTrainerClient, Batch  # noqa: E402
from service.advantages import rloo  # noqa: E402

N = 4  # samples per prompt
PAD = 0
VLLM_STOP_REASONS = {"stop", "length", "abort"}
REPORT: dict[str, Any] = {"runs": [], "batches": {}, "stub_calls_while_judging": []}


def log(msg: str) -> None:
    print(f"[judge {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def ran(version: str, function: str, on: str, result: str = "ok", **detail: Any) -> None:
    REPORT["runs"].append(
        {"skyrl": version, "function": function, "on": on, "result": result, **detail}
    )


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise AssertionError(msg)


def fault(mode: str) -> None:
    """Ask the test to put the policy proxy in `mode` (tests/adversarial/fault_proxy.py's
    modes). Returns once it is."""
    print(f"FAULT {mode}", flush=True)
    reply = sys.stdin.readline().strip()
    check(reply == "OK", f"fault {mode}: test answered {reply!r}")
    log(f"policy proxy now {mode}")


# --------------------------------------------------------------------------- trainers


def trainer031(generator: Any) -> Any:
    import skyrl_train

    cfg = OmegaConf.load(Path(skyrl_train.__file__).parent / "config" / "ppo_base_config.yaml")
    cfg.generator.n_samples_per_prompt = N
    cfg.trainer.algorithm.zero_variance_filter = True
    t = tr031.RayPPOTrainer.__new__(tr031.RayPPOTrainer)  # what generate/postprocess use
    t.cfg, t.generator, t.all_metrics = cfg, generator, {}
    return t


def trainer040(generator: Any, cls: type = tr040.RayPPOTrainer) -> Any:
    cfg = SkyRLTrainConfig()
    cfg.generator.n_samples_per_prompt = N
    cfg.trainer.algorithm.zero_variance_filter = True
    t = cls.__new__(cls)
    t.cfg, t.generator, t.all_metrics = cfg, generator, {}
    return t


def rows(task_ids: list[str], first_uid: int = 0) -> list[dict[str, Any]]:
    """Dataset rows as SkyRL's PromptDataset.collate_fn hands them to the trainer."""
    return [
        {
            "prompt": [{"role": "user", "content": f"solve {tid}"}],
            "env_class": None,
            "env_extras": {"task_id": tid, "data_source": "rollouts"},
            "uid": str(first_uid + i),
        }
        for i, tid in enumerate(task_ids)
    ]


def input031(task_ids: list[str], step: int, first_uid: int = 0) -> tuple[dict, list[str]]:
    cfg = trainer031(None).cfg
    params = sampling031("vllm", cfg.generator.sampling_params)
    return gu031.prepare_generator_input(rows(task_ids, first_uid), N, params, "x", "train", step)


def input040(task_ids: list[str], step: int, first_uid: int = 0) -> tuple[dict, list[str]]:
    cfg = trainer040(None).cfg
    params = sampling040("vllm", cfg.generator.sampling_params)
    return gu040.prepare_generator_input(rows(task_ids, first_uid), N, params, "x", "train", step)


# --------------------------------------------------------------------------- our guarantees


def by_uid(uids: list[str], groups: list) -> dict[str, Any]:
    """The service's group behind each uid: to_skyrl's uids are group ids; a generator call's
    groups come in the order of its uids."""
    ids = {g.group_id: g for g in groups}
    if set(uids) <= set(ids):
        return {u: ids[u] for u in uids}
    return dict(zip(dict.fromkeys(uids), groups, strict=True))


def check_ours(out: dict, input_batch: dict | None, groups: list | None, on: str) -> dict:
    """What RolloutsGenerator and to_skyrl() promise, sample by sample against the service's
    trajectories, beyond SkyRL's own checks."""
    uids = out["uids"]
    n = len(out["response_ids"])
    counts: Counter = Counter()
    if input_batch is not None:  # SkyRL's order, uids and repetition ids
        for i, (got, want) in enumerate(
            zip(out["trajectory_ids"], input_batch["trajectory_ids"], strict=True)
        ):
            check(
                (got.instance_id, got.repetition_id) == (want.instance_id, want.repetition_id),
                f"{on}: sample {i} is {got} where SkyRL put {want}",
            )
    check([t.instance_id for t in out["trajectory_ids"]] == uids, f"{on}: instance_id != uid")
    check(len({t.to_string() for t in out["trajectory_ids"]}) == n, f"{on}: duplicate ids")
    check(set(out["stop_reasons"]) <= VLLM_STOP_REASONS, f"{on}: {set(out['stop_reasons'])}")
    group_of = by_uid(uids, groups) if groups is not None else {}
    for i in range(n):
        resp, mask, lp = out["response_ids"][i], out["loss_masks"][i], out["rollout_logprobs"][i]
        check(len(resp) == len(mask) == len(lp) >= 1, f"{on}: sample {i} lengths")
        check(len(out["prompt_token_ids"][i]) >= 1, f"{on}: sample {i} has an empty prompt")
        masked = out["exclude_from_baseline"][i]
        counts["masked" if masked else "graded"] += 1
        if masked:
            check(set(mask) == {0} and set(lp) == {0.0}, f"{on}: masked sample {i} trains")
            graded = [
                r
                for r, u, ex in zip(out["rewards"], uids, out["exclude_from_baseline"], strict=True)
                if u == uids[i] and not ex
            ]
            neutral = sum(graded) / len(graded) if graded else 0.0
            check(math.isclose(out["rewards"][i], neutral), f"{on}: masked reward not neutral")
            check(out["advantages"][i] == 0.0, f"{on}: masked sample with an advantage")
        if not group_of:
            continue
        group = group_of[uids[i]]
        if input_batch is not None:
            want_task = input_batch["env_extras"][i]["task_id"]
            check(group.task_id == want_task, f"{on}: sample {i} is not of task {want_task}")
        rep = out["trajectory_ids"][i].repetition_id
        t = next(t for t in group.trajectories if t.sample_index == rep)
        check(t.exclude_from_baseline == masked, f"{on}: sample {i} mask flag")
        counts[f"status {t.status.value}"] += 1
        if not t.response_token_ids:
            counts["empty response (padded)"] += 1
            check(resp == [PAD] and mask == [0] and lp == [0.0], f"{on}: empty response {i}")
        else:
            check(resp == t.response_token_ids, f"{on}: sample {i} tokens changed")
            if not masked:
                check(mask == t.loss_mask and lp == t.rollout_logprobs, f"{on}: sample {i} mask")
                check(out["rewards"][i] == t.reward, f"{on}: sample {i} reward")
            elif 1 in t.loss_mask:
                counts["masked with generated tokens"] += 1
        if t.prompt_token_ids:
            check(out["prompt_token_ids"][i] == t.prompt_token_ids, f"{on}: prompt {i}")
        else:
            counts["empty prompt (borrowed)"] += 1
        check(out["advantages"][i] == (t.advantage or 0.0), f"{on}: advantage {i}")
    masked_per_uid = Counter(
        u for u, ex in zip(uids, out["exclude_from_baseline"], strict=True) if ex
    )
    mixed = [u for u, m in masked_per_uid.items() if m < uids.count(u)]
    counts["groups with masked and graded samples"] = len(mixed)
    # Advantages: RLOO per uid (SkyRL's `rloo`: (r_i - mean) * n / (n - 1), a lone sample 0)
    # over baseline_uids gives the service's rloo_n advantages.
    grouped = so.baseline_uids(uids, out["exclude_from_baseline"], out["advantages"])
    members: dict[str, list[int]] = defaultdict(list)
    for i, u in enumerate(grouped):
        members[u].append(i)
    for u, idx in members.items():
        want = rloo([out["rewards"][i] for i in idx]) if len(idx) > 1 else [0.0]
        for i, a in zip(idx, want, strict=True):
            check(
                math.isclose(a, out["advantages"][i], abs_tol=1e-9),
                f"{on}: {i}: RLOO over {u} gives {a}, the service {out['advantages'][i]}",
            )
    counts["baseline groups"] = sum(1 for idx in members.values() if len(idx) > 1)
    return dict(counts)


# --------------------------------------------------------------------------- SkyRL's functions


def metrics_match(ours: dict, theirs: dict, version: str, on: str) -> None:
    for key, value in theirs.items():
        check(key in ours, f"{version} {on}: rollout_metrics lacks {key}")
        check(
            math.isclose(float(ours[key]), float(value), rel_tol=1e-9, abs_tol=1e-9),
            f"{version} {on}: {key} is {ours[key]}, SkyRL computes {value}",
        )


def skyrl_uids(out: dict, inp: dict | None) -> tuple[list[str], int]:
    """The uids SkyRL's trainer passes along (from its own input) and its prompt count."""
    if inp is None:
        return out["uids"], len(out["uids"])
    return [t.instance_id for t in inp["trajectory_ids"]], len(inp["prompts"])


def judge031(out: dict, inp: dict | None, on: str) -> None:
    v = "skyrl-train 0.3.1"
    uids, num_prompts = skyrl_uids(out, inp)
    tu031.validate_generator_output(num_prompts, copy.deepcopy(out))
    ran(v, "trainer_utils.validate_generator_output", on)
    theirs = gu031.get_rollout_metrics(out["response_ids"], out["rewards"])
    metrics_match(out["rollout_metrics"], theirs, v, on)
    ran(v, "generators.utils.get_rollout_metrics", on, "equal to ours", keys=len(theirs))
    kept = tu031.zero_variance_filter(out["rewards"], uids)
    ran(v, "trainer_utils.zero_variance_filter", on, f"kept {len(kept)}/{len(uids)}")
    check_zero_variance(out, uids, kept, v, on)
    t = trainer031(None)
    post = tr031.RayPPOTrainer.postprocess_generator_output(t, copy.deepcopy(out), uids)
    check_postprocessed(out, post, uids, t.all_metrics, v, on)
    ran(v, "RayPPOTrainer.postprocess_generator_output", on, metrics=metric_view(t.all_metrics))
    cat = gu031.concatenate_generator_outputs([copy.deepcopy(out)])
    check(cat["response_ids"] == out["response_ids"], f"{v} {on}: concatenate changed data")
    ran(v, "generators.utils.concatenate_generator_outputs", on)


def judge040(out: dict, inp: dict | None, on: str) -> None:
    v = "skyrl 0.4.0"
    uids, num_prompts = skyrl_uids(out, inp)
    tu040.validate_generator_output(num_prompts, copy.deepcopy(out))
    ran(v, "trainer_utils.validate_generator_output", on)
    # Step-wise validation with every sample its own last step: trajectory ids unique and
    # contiguous (two rollouts of one task once gave duplicate ids).
    tu040.validate_generator_output(
        num_prompts, {**copy.deepcopy(out), "is_last_step": [True] * len(uids)}, step_wise=True
    )
    ran(v, "trainer_utils.validate_generator_output(step_wise=True)", on, "ids unique")
    theirs = gu040.get_rollout_metrics(
        out["response_ids"],
        out["rewards"],
        loss_masks=out["loss_masks"],
        trajectory_completion_times=out["trajectory_generation_times"],
    )
    metrics_match(out["rollout_metrics"], theirs, v, on)
    ran(v, "generators.utils.get_rollout_metrics", on, "equal to ours", keys=len(theirs))
    kept = tu040.zero_variance_filter(out["rewards"], uids, loss_masks=out["loss_masks"])
    ran(v, "trainer_utils.zero_variance_filter", on, f"kept {len(kept)}/{len(uids)}")
    check_zero_variance(out, uids, kept, v, on)
    t = trainer040(None)
    post, post_uids = tr040.RayPPOTrainer.postprocess_generator_output(
        t, copy.deepcopy(out), list(uids)
    )
    check(post_uids == uids, f"{v} {on}: postprocess changed uids")
    check_postprocessed(out, post, uids, t.all_metrics, v, on)
    ran(v, "RayPPOTrainer.postprocess_generator_output", on, metrics=metric_view(t.all_metrics))
    cat = gu040.concatenate_generator_outputs([copy.deepcopy(out)])
    metrics_match(out["rollout_metrics"], cat["rollout_metrics"], v, on + " (concatenated)")
    ran(v, "generators.utils.concatenate_generator_outputs", on)


def metric_view(m: dict) -> dict:
    return {k: round(float(x), 4) for k, x in m.items() if k.startswith("reward/")}


def check_zero_variance(out: dict, uids: list[str], kept: list[int], v: str, on: str) -> None:
    """A group of several samples (0.4: several live ones) is dropped exactly when its graded
    samples all got the same reward: neutral rewards never make a group look varied."""
    graded: dict[str, set[float]] = defaultdict(set)
    size: Counter = Counter(uids)
    for r, u, ex in zip(out["rewards"], uids, out["exclude_from_baseline"], strict=True):
        if not ex:
            graded[u].add(r)
    kept_uids = {uids[i] for i in kept}
    for u in size:
        live = [
            i
            for i, (uu, m) in enumerate(zip(uids, out["loss_masks"], strict=True))
            if uu == u and sum(m) > 0
        ]
        if size[u] == 1 or (v.startswith("skyrl 0.4") and len(live) <= 1):
            check(u in kept_uids, f"{v} {on}: group {u} with one (live) sample dropped")
            continue
        flat = len(graded[u]) <= 1
        check((u not in kept_uids) == flat, f"{v} {on}: group {u} kept={u in kept_uids}")


def check_postprocessed(out: dict, post: dict, uids: list[str], metrics: dict, v, on) -> None:
    for i, (resp, per_token) in enumerate(zip(out["response_ids"], post["rewards"], strict=True)):
        check(len(per_token) == len(resp), f"{v} {on}: per-token rewards of {i}")
        check(per_token[-1] == out["rewards"][i], f"{v} {on}: reward not on the last token")
        check(sum(per_token[:-1]) == 0.0, f"{v} {on}: reward elsewhere")
    for i, mask in enumerate(post["loss_masks"]):
        if out["exclude_from_baseline"][i]:
            check(set(mask) == {0}, f"{v} {on}: masked sample {i} trainable after postprocess")
    # pass@n over all samples is pass@n over the graded ones: neutral rewards add no pass.
    per_uid: dict[str, list[float]] = defaultdict(list)
    for r, u, ex in zip(out["rewards"], uids, out["exclude_from_baseline"], strict=True):
        per_uid.setdefault(u, [])
        if not ex:
            per_uid[u].append(r)
    pass_at_n = sum(any(r > 0 for r in rs) for rs in per_uid.values()) / len(per_uid)
    got = metrics[f"reward/avg_pass_at_{N}"]
    check(math.isclose(got, pass_at_n), f"{v} {on}: pass@{N} {got}, graded samples {pass_at_n}")


class Fixed:
    """A generator that hands SkyRL's trainer a fixed output (for to_skyrl())."""

    def __init__(self, out: dict) -> None:
        self.out = out

    async def generate(self, input_batch: Any) -> dict:
        return copy.deepcopy(self.out)


def wrapper_on(out: dict, on: str) -> None:
    """The trainers' generate() wrappers on a fixed output (to_skyrl())."""
    batch = {"prompts": [[{"role": "user", "content": "x"}]] * len(out["response_ids"])}
    for version, make, cls, interface in (
        ("skyrl-train 0.3.1", trainer031, tr031.RayPPOTrainer, base031.GeneratorInterface),
        ("skyrl 0.4.0", trainer040, tr040.RayPPOTrainer, base040.GeneratorInterface),
    ):
        t = make(type("Fixed", (Fixed, interface), {})(out))
        got = asyncio.run(cls.generate(t, batch))
        check("generate/avg_num_tokens" in t.all_metrics, f"{version} {on}: no rollout_metrics")
        check(got["response_ids"] == out["response_ids"], f"{version} {on}: data changed")
        ran(version, "RayPPOTrainer.generate (trainer wrapper)", on)


class Recording:
    """Hands a trainer what the inner generator returns, keeping a copy of it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.output: dict = {}

    async def generate(self, input_batch: Any) -> dict:
        out = await self.inner.generate(input_batch)
        self.output = copy.deepcopy(out)
        return out


# --------------------------------------------------------------------------- scenario


async def wait_status(
    client: AsyncTrainerClient, gen: Any, call: Any, done: Any, poll_s: float = 0.2
) -> Any:
    """The status of the rollout the generator collects for `call`, once `done(status)` holds;
    None if the call finished first."""
    seen: set[str] = set()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        seen |= gen.active_rollouts
        for rid in seen:
            status = await client.status(rid)
            if done(status):
                return status
        if call.done():
            return None
        await asyncio.sleep(poll_s)
    raise AssertionError("the generator's rollout never reached the awaited state")


Collected = dict[str, tuple[dict, dict, list | None]]  # name -> (output, input, groups)


async def scenario(args: argparse.Namespace) -> Collected:
    tasks = args.task_ids.split(",")
    # A sampling seed keeps the stand-in's choice (oracle or wrong solution) fixed across a
    # sample's turns; without one it draws afresh each turn.
    opts = {"pad_token_id": PAD, "wait_s": 5.0, "sampling": {"seed": 7}}
    G031, G040 = cs.generator_class("skyrl_train"), cs.generator_class("skyrl")
    gen031 = G031(args.url, tasks_path=args.tasks, api_key=args.api_key, **opts)
    gen040 = G040(args.url, tasks_path=args.tasks, api_key=args.api_key, **opts)
    check(isinstance(gen031, base031.GeneratorInterface), "not a 0.3.1 GeneratorInterface")
    check(isinstance(gen040, base040.GeneratorInterface), "not a 0.4.0 GeneratorInterface")
    out: Collected = {}
    watch = AsyncTrainerClient(args.url, args.api_key)

    # 1. skyrl-train 0.3.1's synchronous step through its trainer's generate() wrapper, in an
    #    event loop of its own per step (asyncio.run), as 0.3.1's train() runs it.
    log("step 1: skyrl-train 0.3.1 RayPPOTrainer.generate, every task")
    inp, _ = input031(tasks, step=1)
    t = trainer031(gen031)
    o = await asyncio.to_thread(asyncio.run, tr031.RayPPOTrainer.generate(t, inp))
    check("generate/avg_num_tokens" in t.all_metrics, "0.3.1's wrapper took no rollout_metrics")
    ran("skyrl-train 0.3.1", "RayPPOTrainer.generate (trainer wrapper)", "step 1")
    out["step 1: 0.3.1 sync step"] = (o, inp, list(gen031.last_groups))

    # 2. skyrl 0.4.0's synchronous step; the policy server dies for one sample mid-episode.
    log("step 2: skyrl 0.4.0 RayPPOTrainer.generate, one sample's policy dies mid-run")
    inp, _ = input040(tasks, step=2, first_uid=10)
    recorder = type("Recording", (Recording, base040.GeneratorInterface), {})(gen040)
    t = trainer040(recorder)
    # The server dies for one sample alone: the first sample's own later turn (a group's first
    # turn is one shared request) and its retries go unanswered. That sample dies mid-episode
    # with tokens generated, while the rest of its group goes on to be graded.
    await asyncio.to_thread(fault, "drop_sample")
    step = asyncio.ensure_future(tr040.RayPPOTrainer.generate(t, inp))
    status = await wait_status(
        watch, gen040, step, lambda s: s.counts.get("policy_error", 0) >= 1, poll_s=0.05
    )
    fault("pass")
    REPORT["samples completed when the policy died"] = status and status.samples_completed
    wrapped = await step
    o = recorder.output  # 0.4.0's wrapper pops rollout_metrics from what it returns
    check("generate/avg_num_tokens" in t.all_metrics, "0.4.0's wrapper took no rollout_metrics")
    check(wrapped["response_ids"] == o["response_ids"], "0.4.0's wrapper changed the output")
    ran("skyrl 0.4.0", "RayPPOTrainer.generate (trainer wrapper)", "step 2")
    name = "step 2: 0.4.0 sync step, one sample's policy dies mid-run"
    out[name] = (o, inp, list(gen040.last_groups))

    # 3. 0.4.0's fully async loop: one generate() per prompt group. First a group whose first
    #    turn fails (policy down before it starts).
    log("step 3: one group, its first turn fails")
    fault("down")
    inp, _ = input040(tasks[:1], step=3, first_uid=20)
    call = asyncio.ensure_future(gen040.generate(inp))
    await wait_status(watch, gen040, call, lambda s: s.samples_completed >= N)
    fault("pass")
    out["step 3: async group, first turn failed"] = (await call, inp, list(gen040.last_groups))

    # 4. A group the service drops (its rollout cancelled at once) is submitted again.
    log("step 4: one group, dropped by the service and submitted again")
    before = gen040.resubmitted_groups
    inp, _ = input040(tasks[1:2], step=3, first_uid=21)
    call = asyncio.ensure_future(gen040.generate(inp))
    while not gen040.active_rollouts:
        await asyncio.sleep(0.01)
    await watch.cancel(next(iter(gen040.active_rollouts)))
    o = await call
    REPORT["groups resubmitted after a drop"] = gen040.resubmitted_groups - before
    check(gen040.resubmitted_groups > before, "the cancelled group was not submitted again")
    out["step 4: async group, dropped and resubmitted"] = (o, inp, list(gen040.last_groups))

    # 5. Concurrent calls on the one generator, as the fully async trainer's workers make them.
    log("step 5: concurrent one-group calls on one generator")
    singles = [input040([tid], step=4, first_uid=30 + k)[0] for k, tid in enumerate(tasks[:2])]
    # ... and SkyRL's evaluation alongside: greedy, one sample per prompt.
    cfg = trainer040(None).cfg
    params = sampling040("vllm", cfg.generator.eval_sampling_params)
    n_eval = cfg.generator.eval_n_samples_per_prompt
    evaluation, _ = gu040.prepare_generator_input(
        rows(tasks[2:3], 40), n_eval, params, "x", "eval", 4
    )
    results = await asyncio.gather(*(gen040.generate(i) for i in [*singles, evaluation]))
    for k, (i, o) in enumerate(zip(singles, results, strict=False)):
        out[f"step 5.{k}: async group, concurrent"] = (o, i, None)
    out[f"step 5.{len(singles)}: eval, {n_eval} sample per prompt"] = (
        results[-1],
        evaluation,
        None,
    )
    await watch.aclose()
    return out


def judge_all(collected: Collected) -> None:
    all_groups: list = []
    for on, (o, inp, groups) in collected.items():
        log(f"judging {on}")
        REPORT["batches"][on] = check_ours(o, inp, groups, on)
        judge031(o, inp, on)
        judge040(o, inp, on)
        if groups is None:
            continue
        all_groups += groups
        # The same trajectories through Batch.to_skyrl(): the same dict but for the ids.
        sky = Batch("judge", 0.0, groups).to_skyrl(pad_token_id=PAD)
        check_same(o, sky, on)
        on2 = on + ", via Batch.to_skyrl()"
        REPORT["batches"][on2] = check_ours(sky, None, groups, on2)
        judge031(sky, None, on2)
        judge040(sky, None, on2)
        wrapper_on(sky, on2)

    # The fully async trainer's mini-batch: its groups' outputs concatenated, then
    # postprocessed with the per-group uids (FullyAsyncRayPPOTrainer's conversion).
    parts = [copy.deepcopy(o) for k, (o, _, _) in collected.items() if "async" in k]
    uids = [u for p in parts for u in p["uids"]]
    cat = gu040.concatenate_generator_outputs(parts)
    ran("skyrl 0.4.0", "generators.utils.concatenate_generator_outputs", f"{len(parts)} groups")
    cat.pop("rollout_metrics")
    t = trainer040(None, FullyAsyncRayPPOTrainer)
    FullyAsyncRayPPOTrainer.postprocess_generator_output(t, cat, uids)
    ran("skyrl 0.4.0", "FullyAsyncRayPPOTrainer.postprocess_generator_output", "the concatenation")
    gu031.concatenate_generator_outputs([copy.deepcopy(p) for p in parts])
    v031 = "skyrl-train 0.3.1"
    ran(v031, "generators.utils.concatenate_generator_outputs", f"{len(parts)} groups")

    # to_skyrl() of one batch holding several rollouts of each task: ids stay unique.
    every = Batch("judge", 0.0, all_groups).to_skyrl(pad_token_id=PAD)
    n = len(every["uids"])
    tu040.validate_generator_output(n, {**every, "is_last_step": [True] * n}, step_wise=True)
    most = max(Counter(g.task_id for g in all_groups).values())
    on = f"to_skyrl() of {len(all_groups)} groups, {most} rollouts of one task"
    ran("skyrl 0.4.0", "trainer_utils.validate_generator_output(step_wise=True)", on, "ids unique")
    judge_hook(collected)


def judge_hook(collected: Collected) -> None:
    """ServiceAdvantagesMixin: config checks on SkyRL's own configs, and the regrouping."""
    for version, cfg in (
        ("skyrl-train 0.3.1", trainer031(None).cfg),
        ("skyrl 0.4.0", trainer040(None).cfg),
    ):
        try:
            cs.check_trainer_config(cfg)
        except ValueError:
            pass
        else:
            raise AssertionError(f"{version}: the default estimator (grpo) was accepted")
        cfg.trainer.algorithm.advantage_estimator = "rloo"
        cs.check_trainer_config(cfg)
        ran(version, "ServiceAdvantagesMixin config check", "SkyRL's default config",
            "grpo refused, rloo accepted")  # fmt: skip
    for cls in (tr031.RayPPOTrainer, tr040.RayPPOTrainer, FullyAsyncRayPPOTrainer):
        hooked = type("Hooked", (cs.ServiceAdvantagesMixin, cls), {})
        check(
            hooked.convert_to_training_input is cs.ServiceAdvantagesMixin.convert_to_training_input,
            f"{cls.__qualname__}: the mixin's hook is not first",
        )

    class Capture:
        def convert_to_training_input(self, generator_output: dict, uids: list[str]) -> Any:
            return uids

    hooked_cls = type("Hooked", (cs.ServiceAdvantagesMixin, Capture), {})
    hooked = hooked_cls.__new__(hooked_cls)  # SkyRL's __init__ builds models; not needed here
    for on, (o, _, _) in collected.items():
        got = hooked.convert_to_training_input(o, o["uids"])
        check(got == so.baseline_uids(o["uids"], o["exclude_from_baseline"], o["advantages"]), on)


def check_same(gen: dict, sky: dict, on: str) -> None:
    """A generator output and to_skyrl() of the same groups: equal but for uids and ids."""
    check(set(gen) == set(sky), f"{on}: key sets differ: {set(gen) ^ set(sky)}")
    uid_order = list(dict.fromkeys(gen["uids"]))
    group_order = list(dict.fromkeys(sky["uids"]))
    where = {
        (uid_order.index(t.instance_id), t.repetition_id): i
        for i, t in enumerate(gen["trajectory_ids"])
    }
    for j, t in enumerate(sky["trajectory_ids"]):
        i = where[(group_order.index(t.instance_id), t.repetition_id)]
        for key in gen:
            if key not in ("uids", "trajectory_ids", "rollout_metrics"):
                check(gen[key][i] == sky[key][j], f"{on}: {key} differs at {t.to_string()}")
    for key, value in gen["rollout_metrics"].items():
        check(math.isclose(value, sky["rollout_metrics"][key], rel_tol=1e-12), f"{on}: {key}")


def load_example() -> Any:
    """examples/skyrl/main_rollouts.py, imported with the other modules (its @ray.remote
    decorator is a stub call at import time)."""
    import importlib.util
    import os

    os.environ.update(
        ROLLOUTS_URL="http://127.0.0.1:1", ROLLOUTS_TASKS="/data/tasks", ROLLOUTS_API_KEY="k"
    )
    path = REPO / "examples" / "skyrl" / "main_rollouts.py"
    spec = importlib.util.spec_from_file_location("main_rollouts", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def check_example(mod: Any) -> None:
    """The example's get_generator hands SkyRL a RolloutsGenerator; its trainers are hooked."""
    cfg = trainer040(None).cfg
    exp = mod.RolloutsPPOExp.__new__(mod.RolloutsPPOExp)
    gen = exp.get_generator(cfg, type("Tokenizer", (), {"pad_token_id": 7})(), None)
    check(isinstance(gen, base040.GeneratorInterface), "example: not a GeneratorInterface")
    check(gen.options.pad_token_id == 7 and gen.tasks_path == "/data/tasks", "example options")
    check(issubclass(mod.trainer_class(cfg), cs.ServiceAdvantagesMixin), "example trainer")
    check(issubclass(mod.trainer_class(cfg), tr040.RayPPOTrainer), "example trainer")
    cfg.trainer.fully_async.enabled = True
    check(issubclass(mod.trainer_class(cfg), FullyAsyncRayPPOTrainer), "example async trainer")
    ran(
        "skyrl 0.4.0",
        "examples/skyrl RolloutsPPOExp.get_generator, trainer_class",
        "SkyRL's config",
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--api-key", required=True)
    p.add_argument("--tasks", required=True)
    p.add_argument("--task-ids", required=True)
    p.add_argument("--report", required=True)
    args = p.parse_args()
    t0 = time.monotonic()
    try:
        example = load_example()
        stubs.CALLS.clear()  # from here on, nothing may call into torch or ray
        collected = asyncio.run(scenario(args))
        REPORT["collect_s"] = round(time.monotonic() - t0, 1)
        judge_all(collected)
        check_example(example)
        REPORT["stub_calls_while_judging"] = sorted(set(stubs.CALLS))
        check(not stubs.CALLS, f"torch/ray stubs were called: {sorted(set(stubs.CALLS))}")
        REPORT["ok"] = True
    except BaseException:
        REPORT["ok"] = False
        REPORT["error"] = traceback.format_exc()
        raise
    finally:
        REPORT["wall_s"] = round(time.monotonic() - t0, 1)
        Path(args.report).write_text(json.dumps(REPORT, indent=2, default=str))


if __name__ == "__main__":
    main()
