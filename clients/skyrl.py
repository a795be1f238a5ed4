"""SkyRL integration: a remote generator, the conversion to SkyRL's GeneratorOutput, and the
trainer hook that makes SkyRL train on the service's rloo_n advantages (docs/skyrl.md).

- `RolloutsGenerator(base_url, *, tasks_path, ...)` is a SkyRL `GeneratorInterface`: its
  `generate(input_batch)` runs SkyRL's batch on a rollouts service and returns a
  `GeneratorOutput` in SkyRL's order.
- The conversion to SkyRL's fields is `clients.skyrl_output.generator_output` (or, with
  `step_wise=True`, `step_wise_output`: one step per segment of a summarized episode), shared
  with `Batch.to_skyrl()`.
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
from dataclasses import dataclass, fields
from typing import Any

from clients.skyrl_output import (
    baseline_uids,
    generator_output,
    skyrl_base,
    step_wise_output,
)
from clients.trainer import AsyncTrainerClient
from service.trajectory import Trajectory
from service.wire import Group


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
    if _cfg(cfg, "generator.merge_stepwise_output"):
        # Merging re-cuts the steps; the service's segments are already as merged as exact
        # tokens allow (a segment that extends the previous one is one segment).
        wrong.append("generator.merge_stepwise_output=false")
    if wrong:
        raise ValueError("ServiceAdvantagesMixin needs " + ", ".join(wrong))


class ServiceAdvantagesMixin:
    """Put ahead of SkyRL's trainer class (`class T(ServiceAdvantagesMixin, RayPPOTrainer)`):
    SkyRL's `rloo` estimator then computes the service's rloo_n advantages, masked samples out
    of the baseline (see `baseline_uids`); step-wise too, where SkyRL computes them on the last
    steps and broadcasts them to each trajectory's other steps. The generator output must come from
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
    # SkyRL's generator.step_wise_trajectories: one output row per segment of a summarized
    # episode (every segment trained, request train_segments="all"); False: one row per
    # trajectory, its last segment (train_segments="last": the earlier ones are not kept).
    step_wise: bool = False


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
        convert = step_wise_output if self.options.step_wise else generator_output
        return convert(
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
                        train_segments="all" if self.options.step_wise else "last",
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
