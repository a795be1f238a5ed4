"""SkyRL integration: a remote generator, the conversion to SkyRL's GeneratorOutput, and the
trainer hook that makes SkyRL train on the service's rloo_n advantages (docs/skyrl.md).

- `RolloutsGenerator(base_url, *, tasks_path, ...)` is a SkyRL `GeneratorInterface`: its
  `generate(input_batch)` runs SkyRL's batch on a rollouts service and returns a
  `GeneratorOutput` in SkyRL's order.
- `generator_output(trajectories, ...)` is the one conversion to SkyRL's fields; the generator
  and `Batch.to_skyrl()` both use it, so both give the same dict.
- `ServiceAdvantagesMixin` (put ahead of SkyRL's `RayPPOTrainer` or `FullyAsyncRayPPOTrainer`)
  regroups the samples so that SkyRL's own `rloo` estimator computes the service's rloo_n
  advantages: masked samples out of the baseline.

SkyRL (skyrl >= 0.4 as `skyrl.train`, or skyrl-train 0.3 as `skyrl_train`; Python >= 3.12) is
imported only when a generator class or SkyRL's `TrajectoryID` is first needed: this module
imports, and `to_skyrl()` works, without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from types import ModuleType
from typing import Any

from clients.trainer import AsyncTrainerClient
from service.trajectory import Status, Trajectory
from service.wire import Group

# SkyRL's generator module per package layout, newest first.
SKYRL_FLAVOURS: dict[str, str] = {
    "skyrl": "skyrl.train.generators.base",  # skyrl >= 0.4
    "skyrl_train": "skyrl_train.generators.base",  # skyrl-train 0.3
}


@functools.cache
def skyrl_base(flavour: str | None = None) -> ModuleType:
    """SkyRL's `generators.base` module (GeneratorInterface, TrajectoryID, GeneratorOutput)."""
    names = [flavour] if flavour else list(SKYRL_FLAVOURS)
    for name in names:
        if name not in SKYRL_FLAVOURS:
            raise ValueError(f"unknown SkyRL flavour {name!r}; one of {sorted(SKYRL_FLAVOURS)}")
        with contextlib.suppress(ImportError):
            return importlib.import_module(SKYRL_FLAVOURS[name])
    raise ImportError(
        "SkyRL is not installed (it needs Python >= 3.12): pip install 'rollouts[skyrl]'"
    )


@dataclass
class TrajectoryID:
    """SkyRL's TrajectoryID, field for field: used only where SkyRL is not installed."""

    instance_id: str
    repetition_id: int

    def to_string(self) -> str:
        return f"{self.instance_id}_{self.repetition_id}"


@functools.cache
def trajectory_id_class() -> type:
    """SkyRL's TrajectoryID class where SkyRL imports, else the look-alike above."""
    try:
        return skyrl_base().TrajectoryID
    except ImportError:
        return TrajectoryID


# --------------------------------------------------------------------------- conversion

# vLLM's finish reasons. SkyRL counts anything but "stop" as truncated.
STOP = "stop"
LENGTH = "length"
ABORT = "abort"


def skyrl_stop_reason(t: Trajectory) -> str:
    """The stop reason in vLLM's vocabulary. A sample ended by the context limit is "length"
    (SkyRL's own agent loop says so when the next prompt would not fit); one that never
    finished a turn (its first request failed, or it was cancelled) is vLLM's "abort"."""
    if t.status == Status.context_length:
        return LENGTH
    return t.stop_reason or ABORT


def neutral_rewards(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Per group: the mean reward of its graded (not masked) samples, or 0.0 when none was
    graded. A masked sample gets this neutral reward, never a 0 it did not earn: then SkyRL's
    group mean, pass@n, zero-variance filter and GRPO mean are those of the graded samples."""
    graded: dict[str, list[float]] = {}
    for t in trajectories:
        bucket = graded.setdefault(t.group_id, [])
        if not t.exclude_from_baseline and t.reward is not None:
            bucket.append(float(t.reward))
    return {g: (sum(rs) / len(rs) if rs else 0.0) for g, rs in graded.items()}


def _mean(xs: Sequence[float]) -> float:
    return float(sum(xs)) / len(xs)


def _std(xs: Sequence[float]) -> float:  # population std, as numpy's default
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


def _p90(xs: Sequence[float]) -> float:  # numpy's default (linear) percentile
    s = sorted(xs)
    pos = 0.9 * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _turn_lengths(mask: Sequence[int]) -> list[int]:
    """Runs of consecutive 1s: the tokens generated in each turn."""
    runs: list[int] = []
    run = 0
    for m in mask:
        if m:
            run += 1
        elif run:
            runs.append(run)
            run = 0
    if run:
        runs.append(run)
    return runs


def rollout_metrics(
    responses: Sequence[Sequence[int]],
    rewards: Sequence[float],
    loss_masks: Sequence[Sequence[int]],
    completion_times: Sequence[float] | None = None,
    num_masked: int = 0,
) -> dict[str, Any]:
    """The metrics SkyRL's own generators report (`get_rollout_metrics` of skyrl 0.4 with loss
    masks and trajectory times; skyrl-train 0.3 reports the first six keys), computed the same
    way, plus `rollouts/num_masked`."""
    lengths = [len(r) for r in responses]
    nonzero = [n for n, r in zip(lengths, rewards, strict=True) if r > 0.0]
    zero = [n for n, r in zip(lengths, rewards, strict=True) if r == 0.0]
    out: dict[str, Any] = {
        "generate/min_num_tokens": min(lengths),
        "generate/max_num_tokens": max(lengths),
        "generate/avg_num_tokens": _mean(lengths),
        "generate/std_num_tokens": _std(lengths),
        "generate/avg_tokens_non_zero_rewards": _mean(nonzero) if nonzero else 0.0,
        "generate/avg_tokens_zero_rewards": _mean(zero) if zero else 0.0,
    }
    assistant = [sum(m) for m in loss_masks]
    out.update(
        {
            "generate/avg_assistant_tokens": _mean(assistant),
            "generate/min_assistant_tokens": min(assistant),
            "generate/max_assistant_tokens": max(assistant),
            "generate/std_assistant_tokens": _std(assistant),
        }
    )
    turns = [n for m in loss_masks for n in _turn_lengths(m)]
    if turns:
        out.update(
            {
                "generate/tokens_per_turn_mean": _mean(turns),
                "generate/tokens_per_turn_std": _std(turns),
                "generate/tokens_per_turn_max": max(turns),
            }
        )
    if completion_times:
        out.update(
            {
                "generate/trajectory_time_completion_mean": _mean(completion_times),
                "generate/trajectory_time_completion_p90": _p90(completion_times),
                "generate/trajectory_time_completion_max": max(completion_times),
            }
        )
    out["rollouts/num_masked"] = num_masked
    return out


def generator_output(
    trajectories: Sequence[Trajectory],
    *,
    uids: Sequence[str] | None = None,
    trajectory_ids: Sequence[Any] | None = None,
    pad_token_id: int = 0,
) -> dict[str, Any]:
    """SkyRL's GeneratorOutput for these trajectories, in the order given.

    SkyRL's fields (what its trainer, `validate_generator_output`,
    `postprocess_generator_output`, its zero-variance filter and `concatenate_generator_outputs`
    read): `prompt_token_ids`, `response_ids`, `rewards` (one float per sample),
    `loss_masks`, `stop_reasons` (vLLM's), `rollout_logprobs`, `trajectory_ids`
    (`TrajectoryID(instance_id=uid, repetition_id=k)`), `rollout_metrics` and
    `trajectory_generation_times`. Extra per-sample lists, which SkyRL carries along (its
    `concatenate_generator_outputs` keeps every extra list): `uids`, `advantages` (the
    service's), `exclude_from_baseline`, `policy_versions` (the oldest weights behind a sample's
    generated tokens: what staleness counts from) and `response_policy_versions` (one per
    response token, aligned with `response_ids`: the policy version of the weights that
    generated it, -1 where the mask is 0).

    - A masked sample (`exclude_from_baseline`) keeps its tokens but trains nothing: its loss
      mask and logprobs are all 0, and its reward is the neutral one (`neutral_rewards`).
    - An empty response (a sample whose first turn failed) becomes one `pad_token_id` with
      mask 0 and logprob 0: SkyRL puts the reward on the last response token. An empty prompt
      borrows the group's shared first prompt (or one pad token).
    - `uids` default to the service's group ids; `trajectory_ids` to `(uid, sample_index)`.
    """
    ts = list(trajectories)
    if not ts:
        raise ValueError("no trajectories: SkyRL needs at least one sample")
    uid_list = list(uids) if uids is not None else [t.group_id for t in ts]
    if len(uid_list) != len(ts):
        raise ValueError(f"{len(uid_list)} uids for {len(ts)} trajectories")
    if trajectory_ids is None:
        cls = trajectory_id_class()
        tid_list = [
            cls(instance_id=u, repetition_id=t.sample_index)
            for u, t in zip(uid_list, ts, strict=True)
        ]
    else:
        tid_list = list(trajectory_ids)
        if len(tid_list) != len(ts):
            raise ValueError(f"{len(tid_list)} trajectory ids for {len(ts)} trajectories")
    neutral = neutral_rewards(ts)
    first_prompt: dict[str, list[int]] = {}
    for t in ts:
        if t.prompt_token_ids:
            first_prompt.setdefault(t.group_id, list(t.prompt_token_ids))

    prompts, responses, rewards, masks, logprobs, versions = [], [], [], [], [], []
    for t in ts:
        response = list(t.response_token_ids)
        token_versions = list(t.response_policy_versions)
        if t.exclude_from_baseline:
            mask, lps = [0] * len(response), [0.0] * len(response)
            reward = neutral[t.group_id]
        else:
            mask, lps = list(t.loss_mask), [float(x) for x in t.rollout_logprobs]
            reward = float(t.reward) if t.reward is not None else neutral[t.group_id]
        if not response:
            response, mask, lps, token_versions = [pad_token_id], [0], [0.0], [-1]
        prompts.append(list(t.prompt_token_ids) or first_prompt.get(t.group_id) or [pad_token_id])
        responses.append(response)
        rewards.append(reward)
        masks.append(mask)
        logprobs.append(lps)
        versions.append(token_versions)
    times = [float(t.timings.total_s) for t in ts]
    masked = sum(t.exclude_from_baseline for t in ts)
    return {
        "prompt_token_ids": prompts,
        "response_ids": responses,
        "rewards": rewards,
        "loss_masks": masks,
        "stop_reasons": [skyrl_stop_reason(t) for t in ts],
        "rollout_logprobs": logprobs,
        "trajectory_ids": tid_list,
        "rollout_metrics": rollout_metrics(responses, rewards, masks, times, masked),
        "trajectory_generation_times": times,
        "uids": uid_list,
        "advantages": [float(t.advantage or 0.0) for t in ts],
        "exclude_from_baseline": [t.exclude_from_baseline for t in ts],
        "policy_versions": [t.policy_version_start for t in ts],
        "response_policy_versions": versions,
    }


# --------------------------------------------------------------------------- advantages


def baseline_uids(
    uids: Sequence[str], exclude_from_baseline: Sequence[bool], advantages: Sequence[float]
) -> list[str]:
    """The uids to group samples by so that SkyRL's `rloo` estimator yields the service's
    advantages. A masked sample, and every sample of a group whose service advantages are all 0
    (fewer than `min_group_size` graded samples, or a dropped zero-variance group), gets a uid
    of its own: SkyRL gives a lone sample advantage 0. The rest stay grouped, and RLOO over a
    group's graded samples is what the service computed (rloo_n, and rloo alike)."""
    if not len(uids) == len(exclude_from_baseline) == len(advantages):
        raise ValueError("uids, exclude_from_baseline and advantages must have equal lengths")
    live: set[str] = set()
    for uid, ex, adv in zip(uids, exclude_from_baseline, advantages, strict=True):
        if not ex and adv != 0.0:
            live.add(uid)
    return [
        uid if (uid in live and not ex) else f"{uid}#alone{i}"
        for i, (uid, ex) in enumerate(zip(uids, exclude_from_baseline, strict=True))
    ]


def _cfg(cfg: Any, path: str) -> Any:
    for part in path.split("."):
        try:
            cfg = getattr(cfg, part)
        except (AttributeError, KeyError):
            return None
    return cfg


def check_trainer_config(cfg: Any) -> None:
    """The SkyRL settings under which `ServiceAdvantagesMixin` gives the service's numbers."""
    wrong = []
    if _cfg(cfg, "trainer.algorithm.advantage_estimator") != "rloo":
        wrong.append("trainer.algorithm.advantage_estimator=rloo")
    if _cfg(cfg, "trainer.algorithm.dynamic_sampling.type") is not None:
        wrong.append("trainer.algorithm.dynamic_sampling.type=null (it drops the extra fields)")
    if _cfg(cfg, "trainer.algorithm.use_kl_in_reward"):
        wrong.append("trainer.algorithm.use_kl_in_reward=false (it changes the rewards)")
    if _cfg(cfg, "generator.step_wise_trajectories"):
        wrong.append("generator.step_wise_trajectories=false")
    if wrong:
        raise ValueError("ServiceAdvantagesMixin needs " + ", ".join(wrong))


class ServiceAdvantagesMixin:
    """Put ahead of SkyRL's trainer class (`class T(ServiceAdvantagesMixin, RayPPOTrainer)`):
    SkyRL's `rloo` estimator then computes the service's rloo_n advantages, masked samples out
    of the baseline (see `baseline_uids`). The generator output must come from
    `RolloutsGenerator` or `Batch.to_skyrl()` (it carries `exclude_from_baseline` and
    `advantages`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        check_trainer_config(self.cfg)  # type: ignore[attr-defined]

    def convert_to_training_input(self, generator_output: Any, uids: list[str]) -> Any:
        ex = generator_output.get("exclude_from_baseline")
        adv = generator_output.get("advantages")
        if ex is None or adv is None or len(ex) != len(uids) or len(adv) != len(uids):
            raise ValueError(
                "generator output without per-sample exclude_from_baseline and advantages: use "
                "RolloutsGenerator or Batch.to_skyrl(), and no SkyRL dynamic sampling"
            )
        return super().convert_to_training_input(  # type: ignore[misc]
            generator_output, baseline_uids(uids, ex, adv)
        )


# --------------------------------------------------------------------------- the generator

# SkyRL's sampling parameters (vLLM's or SGLang's names) -> the service's sampling fields.
_SAMPLING_FIELDS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "max_tokens": "max_tokens",
    "max_new_tokens": "max_tokens",
    "max_generate_length": "max_tokens",
    "seed": "seed",
    "stop": "stop",
}


@dataclass(frozen=True)
class GeneratorOptions:
    sampling: dict[str, Any] | None = None  # overrides SkyRL's sampling parameters
    agent: dict[str, Any] | None = None  # the request's agent limits (max_turns, timeout_s, ...)
    advantage: dict[str, Any] | None = None  # the request's advantage config
    priority: int = 0
    pad_token_id: int = 0  # the token that stands in for an empty response
    set_policy_version: bool = True  # POST /v1/policy {version: global_step}
    max_staleness: int | None = None  # sent with the version; None: SkyRL governs staleness
    max_groups: int = 64  # per lease
    wait_s: float = 30.0  # lease long poll
    max_resubmits: int = 3  # rounds of resubmitting groups the service dropped
    timeout_s: float | None = None  # for one generate() call
    retries: int = 10  # HTTP retries (connection errors, 5xx, 429)


def service_sampling(skyrl_params: dict[str, Any] | None, overrides: dict[str, Any] | None):
    """The service's `sampling` body from SkyRL's sampling parameters (unknown keys, such as
    logprobs or skip_special_tokens, are SkyRL's business), then `overrides`."""
    out: dict[str, Any] = {}
    for key, value in (skyrl_params or {}).items():
        name = _SAMPLING_FIELDS.get(key)
        if name is not None and value is not None:
            out[name] = list(value) if name == "stop" else value
    out.update(overrides or {})
    return out or None


@dataclass
class _Plan:
    uids: list[str]  # in first-seen order
    task: dict[str, str]  # uid -> task id
    slots: dict[str, list[tuple[int, int]]]  # uid -> [(repetition_id, position)], sorted
    tids: list[Any]  # SkyRL's TrajectoryID per position


def _plan(input_batch: Any, task_id_key: str, tid_cls: type) -> _Plan:
    n = len(input_batch["prompts"])
    extras = input_batch.get("env_extras")
    if extras is None or len(extras) != n:
        raise ValueError(
            f"env_extras must hold one dict per prompt with the task id ({task_id_key!r})"
        )
    tasks = []
    for i, extra in enumerate(extras):
        if not extra or extra.get(task_id_key) is None:
            raise ValueError(f"prompt {i}: env_extras has no {task_id_key!r} (the task id)")
        tasks.append(str(extra[task_id_key]))
    tids = input_batch.get("trajectory_ids")
    if tids is None:  # not from SkyRL's prepare_generator_input: repetitions of each task
        seen: dict[str, int] = {}
        tids = []
        for task in tasks:
            tids.append(tid_cls(instance_id=task, repetition_id=seen.get(task, 0)))
            seen[task] = seen.get(task, 0) + 1
    if len(tids) != n:
        raise ValueError(f"{len(tids)} trajectory_ids for {n} prompts")
    plan = _Plan([], {}, {}, list(tids))
    for pos, (tid, task) in enumerate(zip(tids, tasks, strict=True)):
        uid = str(tid.instance_id)
        if uid not in plan.task:
            plan.uids.append(uid)
            plan.task[uid] = task
            plan.slots[uid] = []
        elif plan.task[uid] != task:
            raise ValueError(f"uid {uid!r} names two tasks: {plan.task[uid]!r} and {task!r}")
        plan.slots[uid].append((int(tid.repetition_id), pos))
    for slots in plan.slots.values():
        slots.sort()
        if len({r for r, _ in slots}) != len(slots):
            raise ValueError("a uid has repeated repetition ids")
    return plan


def _rounds(uids: list[str], plan: _Plan) -> list[tuple[int, list[str]]]:
    """Split uids into rollout requests: one n_samples each, a task at most once each."""
    out: list[tuple[int, list[str], set[str]]] = []
    for uid in uids:
        n, task = len(plan.slots[uid]), plan.task[uid]
        for rn, members, tasks in out:
            if rn == n and task not in tasks:
                members.append(uid)
                tasks.add(task)
                break
        else:
            out.append((n, [uid], {task}))
    return [(n, members) for n, members, _ in out]


def _field(metadata: Any, name: str) -> Any:
    """A field of SkyRL's BatchMetadata (a dataclass; a dict is accepted too)."""
    if isinstance(metadata, dict):
        return metadata.get(name)
    return getattr(metadata, name, None)


class _RolloutsGenerator:
    """A SkyRL generator that runs each batch on a rollouts service.

    For each prompt it takes the task id from `env_extras[i][task_id_key]` (so the SkyRL
    dataset has a column with the service's task ids), submits the tasks with SkyRL's
    `n_samples_per_prompt` and sampling parameters, tags the policy version with
    `batch_metadata.global_step`, leases until every group of the call has arrived (groups the
    service dropped, by staleness or cancellation, are submitted again), acknowledges them, and
    returns a GeneratorOutput in SkyRL's order (`generator_output`). It works in SkyRL's
    synchronous loop and in the fully asynchronous one (one call per prompt group).

    Options (keywords): see `GeneratorOptions`.
    """

    def __init__(
        self,
        base_url: str,
        *,
        tasks_path: str,
        api_key: str | None = None,
        task_id_key: str = "task_id",
        **options: Any,
    ) -> None:
        try:
            self.options = GeneratorOptions(**options)
        except TypeError:
            known = sorted(f.name for f in fields(GeneratorOptions))
            raise TypeError(
                f"unknown RolloutsGenerator option in {sorted(options)}; known: {known}"
            ) from None
        self.base_url = base_url
        self.tasks_path = tasks_path
        self.api_key = api_key
        self.task_id_key = task_id_key
        self.active_rollouts: set[str] = set()  # rollouts being collected right now
        self.resubmitted_groups = 0  # groups submitted again after the service dropped them
        self.last_groups: list[Group] = []  # the service's groups of the latest call (logging)
        self._policy_version = -1

    def _client(self) -> AsyncTrainerClient:
        # One client per call: SkyRL 0.3 runs every step in its own event loop (asyncio.run).
        return AsyncTrainerClient(
            self.base_url,
            self.api_key,
            timeout_s=self.options.wait_s + 60.0,
            retries=self.options.retries,
        )

    async def generate(self, input_batch: Any) -> dict[str, Any]:
        tid_cls = type(self)._skyrl.TrajectoryID  # type: ignore[attr-defined]
        plan = _plan(input_batch, self.task_id_key, tid_cls)
        sampling = service_sampling(input_batch.get("sampling_params"), self.options.sampling)
        metadata = input_batch.get("batch_metadata")
        advantage = self.options.advantage
        if _field(metadata, "training_phase") == "eval":
            # Nothing trains on eval samples, and SkyRL evaluates with as few as one sample
            # per prompt, which rloo_n's min_group_size would refuse: plain RLOO takes any n.
            advantage = {**(advantage or {}), "estimator": "rloo"}
        async with asyncio.timeout(self.options.timeout_s), self._client() as client:
            await self._sync_policy_version(client, metadata)
            groups = await self._collect(client, plan, sampling, advantage)
        trajectories: list[Trajectory | None] = [None] * len(plan.tids)
        for uid in plan.uids:
            ordered = sorted(groups[uid].trajectories, key=lambda t: t.sample_index)
            for (_, pos), t in zip(plan.slots[uid], ordered, strict=True):
                trajectories[pos] = t
        self.last_groups = [groups[uid] for uid in plan.uids]
        return generator_output(
            trajectories,  # type: ignore[arg-type]
            uids=[str(tid.instance_id) for tid in plan.tids],
            trajectory_ids=plan.tids,
            pad_token_id=self.options.pad_token_id,
        )

    async def _sync_policy_version(self, client: AsyncTrainerClient, metadata: Any) -> None:
        if not self.options.set_policy_version:
            return
        step = _field(metadata, "global_step")
        if step is None or step <= self._policy_version:
            return  # versions only go forward (async workers may carry older steps)
        self._policy_version = step
        await client.set_policy(int(step), self.options.max_staleness)

    async def _collect(
        self,
        client: AsyncTrainerClient,
        plan: _Plan,
        sampling: dict[str, Any] | None,
        advantage: dict[str, Any] | None,
    ) -> dict[str, Group]:
        got: dict[str, Group] = {}
        pending = list(plan.uids)
        for attempt in range(self.options.max_resubmits + 1):
            submitted: list[tuple[str, dict[str, str], int]] = []
            try:
                for n, uids in _rounds(pending, plan):
                    tasks = [plan.task[u] for u in uids]
                    rid = await client.submit(
                        self.tasks_path,
                        n_samples=n,
                        ids=tasks,
                        limit=len(tasks),
                        sampling=sampling,
                        agent=self.options.agent,
                        advantage=advantage,
                        priority=self.options.priority,
                    )
                    submitted.append((rid, dict(zip(tasks, uids, strict=True)), n))
                    self.active_rollouts.add(rid)
                leases = [
                    asyncio.ensure_future(self._lease_rollout(client, rid, want))
                    for rid, want, _ in submitted
                ]
                try:
                    delivered = await asyncio.gather(*leases)
                finally:
                    for lease in leases:
                        lease.cancel()
            except BaseException:
                await self._cancel(client, [rid for rid, _, _ in submitted])
                raise
            finally:
                self.active_rollouts.difference_update(rid for rid, _, _ in submitted)
            for (_, want, n), groups in zip(submitted, delivered, strict=True):
                for task, group in groups.items():
                    if len(group.trajectories) == n:
                        got[want[task]] = group
            pending = [u for u in pending if u not in got]
            if not pending:
                return got
            if attempt < self.options.max_resubmits:
                self.resubmitted_groups += len(pending)
        raise RuntimeError(
            f"the service dropped the groups of {len(pending)} prompts "
            f"{self.options.max_resubmits + 1} times (tasks {[plan.task[u] for u in pending]})"
        )

    async def _lease_rollout(
        self, client: AsyncTrainerClient, rollout_id: str, want: dict[str, str]
    ) -> dict[str, Group]:
        """Every group of one rollout the service delivers (acked at once); stops when all
        wanted tasks arrived or nothing is left to deliver (the rest were dropped)."""
        delivered: dict[str, Group] = {}
        while len(delivered) < len(want):
            batch, remaining = await client.lease(
                self.options.max_groups, rollout_id=rollout_id, wait_s=self.options.wait_s
            )
            if batch is not None:
                for group in batch.groups:
                    if group.task_id in want:
                        delivered[group.task_id] = group
                await batch.ack()
            elif remaining == 0:
                break
        return delivered

    @staticmethod
    async def _cancel(client: AsyncTrainerClient, rollout_ids: list[str]) -> None:
        for rid in rollout_ids:  # best effort: the call is being abandoned
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.cancel(rid), 10.0)


@functools.cache
def _generator_class(module_name: str) -> type:
    base = importlib.import_module(module_name)
    return type(
        "RolloutsGenerator",
        (_RolloutsGenerator, base.GeneratorInterface),
        {"__module__": __name__, "__doc__": _RolloutsGenerator.__doc__, "_skyrl": base},
    )


def generator_class(flavour: str | None = None) -> type:
    """RolloutsGenerator as a subclass of the installed SkyRL's GeneratorInterface (or of the
    one named: "skyrl" for skyrl >= 0.4, "skyrl_train" for skyrl-train 0.3)."""
    return _generator_class(skyrl_base(flavour).__name__)


def __getattr__(name: str) -> Any:
    # `from clients.skyrl import RolloutsGenerator` imports SkyRL only here, on first use.
    if name == "RolloutsGenerator":
        return generator_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
